"""What a release is made of, beyond its rows: the record of its noisy measurements and charges
(:mod:`engine.release.record`) and the fitted model more rows can be drawn from
(:mod:`engine.models.fitted`; saved with its schema by :mod:`engine.release.model_file`). The record
of a finished run is built by :func:`engine.release.from_result.record_from_result` (not imported
here, so that reading a record or a model file does not import every mechanism)."""

from engine.models.fitted import FittedModel, ModelError
from engine.release.record import Charge, MeasuredMarginal, RecordError, ReleaseRecord

__all__ = [
    "Charge",
    "FittedModel",
    "MeasuredMarginal",
    "ModelError",
    "RecordError",
    "ReleaseRecord",
]
