"""The saved-model file: a :class:`~engine.models.fitted.FittedModel` with the table schema it
decodes to, so ``rhosynth sample`` needs nothing else.

An ``.npz`` archive (``allow_pickle=False`` on load) of three byte arrays: a JSON header with the
format version, the model's own bytes (:meth:`FittedModel.to_bytes`) and the schema's JSON
(:meth:`TableSchema.to_json`). The schema is public (declared or DP-discovered) and the model
holds only DP outputs, so the file can be shared like the synthetic rows.
"""

from __future__ import annotations

import io
import json
import zipfile
import zlib
from pathlib import Path

import numpy as np
import numpy.typing as npt

from engine.models.fitted import FittedModel, ModelError
from engine.tables.encoding import SchemaError, TableSchema
from engine.tables.files import atomic_path

MODEL_FILE_VERSION = 1
_HEADER, _MODEL, _SCHEMA = "header", "model", "schema"


def _bytes_array(data: bytes) -> npt.NDArray[np.uint8]:
    return np.frombuffer(data, dtype=np.uint8)


def model_file_bytes(model: FittedModel, schema: TableSchema) -> bytes:
    """The file's bytes; ``ModelError`` if ``schema`` does not describe ``model``'s domain."""
    if schema.domain() != model.domain:
        raise ModelError("the schema does not describe the model's domain")
    header = {"format": "rhosynth-model", "version": MODEL_FILE_VERSION}
    buffer = io.BytesIO()
    parts = {
        _HEADER: _bytes_array(json.dumps(header).encode()),
        _MODEL: _bytes_array(model.to_bytes()),
        _SCHEMA: _bytes_array(json.dumps(schema.to_json()).encode()),
    }
    np.savez(buffer, **parts)  # type: ignore[arg-type]
    return buffer.getvalue()


def read_model_file(data: bytes) -> tuple[FittedModel, TableSchema]:
    """The model and schema of a saved-model file; :class:`ModelError` for anything else."""
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as archive:
            parts = {}
            for name in (_HEADER, _MODEL, _SCHEMA):
                if name not in archive.files:
                    raise ModelError("not a rhosynth model file")
                raw = archive[name]
                if raw.dtype != np.uint8 or raw.ndim != 1:
                    raise ModelError("not a rhosynth model file")
                parts[name] = bytes(raw)
        header = json.loads(parts[_HEADER].decode())
        if not isinstance(header, dict) or header.get("format") != "rhosynth-model":
            raise ModelError("not a rhosynth model file")
        if header.get("version") != MODEL_FILE_VERSION:
            raise ModelError("unknown model file version")
        schema = TableSchema.from_json(json.loads(parts[_SCHEMA].decode()))
    except ModelError:
        raise
    except SchemaError as error:
        raise ModelError(f"the model file's schema is invalid ({error})") from None
    except (
        OSError,
        ValueError,
        KeyError,
        TypeError,
        EOFError,
        zipfile.BadZipFile,
        zlib.error,
    ) as error:
        raise ModelError(f"not a valid model file ({type(error).__name__})") from None
    model = FittedModel.from_bytes(parts[_MODEL])
    if schema.domain() != model.domain:
        raise ModelError("the model file's schema does not describe its model")
    return model, schema


def write_model_file(path: Path, model: FittedModel, schema: TableSchema) -> None:
    """Write the file atomically (a temporary file beside ``path``, then renamed)."""
    data = model_file_bytes(model, schema)
    with atomic_path(path) as temporary:
        temporary.write_bytes(data)


def load_model_file(path: Path) -> tuple[FittedModel, TableSchema]:
    """:func:`read_model_file` of the file at ``path`` (``OSError`` if it cannot be read)."""
    return read_model_file(path.read_bytes())
