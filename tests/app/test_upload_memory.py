"""Uploads keep the API process's memory bounded whatever the file says (issue 11, section 3).

Each file is under the stack's upload cap (8 MiB) and would decode into gigabytes if the reader
trusted it. The API process's resident memory is sampled with psutil while the upload runs; the
growth over its idle size must stay below the bound documented in docs/operations.md.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.conftest import Tenant
from tests.support.api import upload
from tests.support.bombs import (
    constant_numbers_parquet,
    dictionary_bomb,
    distinct_dictionary_bomb,
    long_cell_bomb,
    many_tiny_numbers_csv,
    many_tiny_rows_csv,
)
from tests.support.memory import peak_rss
from tests.support.stack import Stack

# docs/operations.md, "Configuring limits": an upload raises the API process's resident memory
# by at most this much over its idle size.
DOCUMENTED_PEAK_MIB = 512

BOMBS: dict[str, tuple[Callable[[], tuple[bytes, str]], tuple[int, ...]]] = {
    "parquet dictionary of long values": (dictionary_bomb, (201, 422)),
    "parquet plain cells over the limit": (long_cell_bomb, (422,)),
    "parquet dictionary of millions of distinct values": (distinct_dictionary_bomb, (422,)),
    "csv of one-character cells": (many_tiny_rows_csv, (201,)),
    # Numeric columns: their raw values are written beside the codes in the same batches.
    "csv of one-character numbers": (many_tiny_numbers_csv, (201,)),
    "parquet of millions of repeated numbers": (constant_numbers_parquet, (201,)),
}


@pytest.mark.parametrize("case", sorted(BOMBS))
def test_upload_bombs_keep_api_memory_bounded(api_stack: Stack, tenant: Tenant, case: str) -> None:
    build, statuses = BOMBS[case]
    data, schema = build()
    assert len(data) < api_stack.settings.max_upload_bytes
    assert api_stack.server is not None
    with peak_rss(api_stack.server.pid) as memory:
        response = upload(tenant.owner, data, schema)
    print(f"\n{case}: {len(data)} bytes, {response.status_code}, +{memory.growth_mib:.0f} MiB")
    assert response.status_code in statuses, response.text
    assert memory.growth_mib < DOCUMENTED_PEAK_MIB
