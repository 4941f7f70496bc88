"""A real S3-protocol server for the tests: moto's standalone server (``pip install
'moto[server]'``, in the ``test`` extra) in its own process on a free loopback port, with one
bucket per test run. The client side is the service's own boto3 code, over HTTP."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from tests.support.stack import free_port

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client

HOW_TO = (
    "the object-storage tests need moto's S3 server: `.venv/bin/pip install 'moto[server]'` "
    "(part of the test extra: `make install`)"
)
# Fake credentials for moto; the server accepts any. Set for this process (in-process sweeps)
# and inherited by the API and worker processes the stacks start.
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "rhosynth-test",
    "AWS_SECRET_ACCESS_KEY": "rhosynth-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}
REGION = "us-east-1"


class S3Unavailable(RuntimeError):
    pass


@dataclass
class S3Server:
    endpoint: str
    bucket: str
    process: subprocess.Popen[bytes]
    log: Path

    def settings(self, prefix: str) -> dict[str, Any]:
        """RHOSYNTH_* values that store under ``s3://<bucket>/<prefix>``."""
        return {
            "storage_url": f"s3://{self.bucket}/{prefix}",
            "s3_endpoint_url": self.endpoint,
            "s3_region": REGION,
            "s3_addressing_style": "path",
        }

    def client(self) -> S3Client:
        import boto3

        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        )

    def keys(self, prefix: str) -> list[str]:
        """Every key in the bucket under ``prefix`` (a plain text prefix, paginated)."""
        paginator = self.client().get_paginator("list_objects_v2")
        return sorted(
            item["Key"]
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix)
            for item in page.get("Contents", [])
        )

    def stop(self) -> None:
        self.process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


def start_server(workdir: Path) -> S3Server:
    """Start moto's server and create this run's bucket, or raise S3Unavailable."""
    try:
        import boto3  # noqa: F401
        import moto.server  # noqa: F401
    except ImportError as error:
        raise S3Unavailable(f"{HOW_TO} ({error})") from None
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = workdir / "moto.log"
    with open(log, "wb") as handle:
        process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env={**os.environ, **CREDENTIALS},
            start_new_session=True,
        )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        if process.poll() is not None:
            raise S3Unavailable(f"moto's server exited: {log.read_text()[-2000:]}\n{HOW_TO}")
        try:
            httpx.get(f"{endpoint}/moto-api/", timeout=2)
            break
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                process.kill()
                raise S3Unavailable(f"moto's server did not answer on {endpoint}") from None
            time.sleep(0.2)
    server = S3Server(endpoint, f"rhosynth-test-{uuid.uuid4().hex[:12]}", process, log)
    server.client().create_bucket(Bucket=server.bucket)
    return server


@contextlib.contextmanager
def credentials() -> Iterator[None]:
    """The fake credentials in this process's environment for the block."""
    saved = {name: os.environ.get(name) for name in CREDENTIALS}
    os.environ.update(CREDENTIALS)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
