"""What a release is made of, beyond its rows: the record of its noisy measurements and charges
(:mod:`engine.release.record`)."""

from engine.release.record import Charge, MeasuredMarginal, RecordError, ReleaseRecord

__all__ = ["Charge", "MeasuredMarginal", "RecordError", "ReleaseRecord"]
