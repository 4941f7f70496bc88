"""Fitted models: what a release samples from, below both the mechanisms that fit them
(engine/mechanisms/) and the release package that stores them (engine/release/).

* :mod:`engine.models.fitted`: :class:`FittedModel`, the kind protocol and registry, and the
  ``.npz`` file format;
* :mod:`engine.models.kinds`: the kinds (independent, graphical, joint, copula, GUM);
* :mod:`engine.models.compression`: the public re-coding of a compressed domain that a model
  carries, and how a mechanism builds it from noisy one-way counts;
* :mod:`engine.models.gum`: GUM, the record synthesis PrivSyn runs and its model re-runs;
* :mod:`engine.models.copula`: drawing records from a fitted Gaussian copula.

Nothing here imports a mechanism, the release package, FastAPI, SQLAlchemy or Celery.
"""

from engine.models.fitted import FittedModel, ModelError, ModelKind, register_kind
from engine.models.kinds import (
    CopulaModel,
    GraphicalModelKind,
    GUMModel,
    IndependentModel,
    JointModel,
)

__all__ = [
    "CopulaModel",
    "FittedModel",
    "GUMModel",
    "GraphicalModelKind",
    "IndependentModel",
    "JointModel",
    "ModelError",
    "ModelKind",
    "register_kind",
]
