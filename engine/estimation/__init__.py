"""Graphical-model estimation: the "generate" core of select–measure–generate (post-processing).

Private-PGM (McKenna, Sheldon, Miklau, "Graphical-model based estimation and inference for
differential privacy", ICML 2019): given noisy marginals, fit the Markov random field on their
junction tree whose marginals best explain them (Gaussian likelihood, entropic mirror descent),
then answer marginal queries and synthesise rows from it. Nothing in this package reads data or
adds noise; it only post-processes released measurements, so it spends no privacy budget.

Use from a mechanism: pass *all* measurements so far to :func:`estimate` on every re-fit, with
``warm_start=`` the previous model (its potentials and step size carry over); ask
:func:`model_size` about the measured attribute sets plus a candidate, which is exactly what
``estimate`` would allocate; batch candidate queries through one
:meth:`GraphicalModel.project_many` call so they share work. A measurement of sums over
disjoint groups of a marginal's cells (PPSyn's partitioned marginals) is a ``NoisyMarginal``
with ``groups`` set; it is fitted as the linear query Q·μ (see :class:`NoisyMarginal`).

>>> import numpy as np
>>> from engine.domain import Domain
>>> domain = Domain.from_mapping({"a": 2, "b": 3})
>>> y = NoisyMarginal(("a", "b"), np.array([[10.0, 20.0, 30.0], [5.0, 15.0, 20.0]]), sigma=1.0)
>>> model = estimate(domain, [y], iterations=500)
>>> bool(np.allclose(model.project(["a", "b"]), y.values, atol=0.05))
True
>>> model_size(domain, [("a", "b")])
6
"""

from engine.estimation.junction_tree import ModelSizer, ModelTooLarge, model_size
from engine.estimation.measurements import NoisyMarginal, estimate_total
from engine.estimation.mirror_descent import estimate
from engine.estimation.model import GraphicalModel

__all__ = [
    "GraphicalModel",
    "ModelSizer",
    "ModelTooLarge",
    "NoisyMarginal",
    "estimate",
    "estimate_total",
    "model_size",
]
