"""Fit a graphical model to noisy marginals by entropic mirror descent (post-processing).

Private-PGM (McKenna, Sheldon, Miklau, "Graphical-model based estimation and inference for
differential privacy", ICML 2019, Algorithm 1): minimise the Gaussian negative log-likelihood

    L(μ) = Σ_i ½ ‖(μ_{A_i} − y_i) / σ_i‖²

over the marginals μ of a Markov random field on the measurements' junction tree. Each step
moves the log-potentials against the gradient, θ ← θ − η·∇L(μ(θ)) (a measurement's gradient
lives on its attributes and is broadcast into the clique that holds them), then recomputes μ by
belief propagation. The step η is found by backtracking: halve until the Armijo condition
``L(μ) − L(μ') ≥ c·⟨∇L(μ), μ − μ'⟩`` holds, grow it by ``GROWTH`` after a step accepted at once;
a warm-started fit starts from the step its warm start ended with. Only noisy, already-released
marginals are read: this is post-processing and spends no privacy budget.

Deviations from private-pgm (mbi 1.x ``FactoredInference.mirror_descent``):

* the Armijo test there is ``L − L' ≥ ½·η·⟨∇L, μ − μ'⟩`` (η of order 1/N makes it nearly "any
  decrease"); here it is the textbook ``c·⟨∇L, μ − μ'⟩`` with a small c, and the step grows after
  an immediate acceptance instead of being doubled before every line search;
* measurements of the same attribute set are pooled (``W = Σ 1/σ²``, precision-weighted mean);
  grouped measurements (``NoisyMarginal.groups``, y = Q·μ + z) are kept apart: each adds
  ½‖(Q·μ_A − y)/σ‖² to the loss and Qᵀ(Q·μ_A − y)/σ² to the gradient of its attribute set A
  (a plain key of weight 0 is created for A if nothing else measured it);
* the fit stops early once the loss improves by less than ``tolerance`` (relative) over
  ``CONVERGENCE_WINDOW`` iterations;
* ``momentum=True`` (PPSyn) tries a heavy-ball step with Nesterov's weights before the plain
  Armijo step and restarts the momentum whenever it does not lower the loss (:func:`_descend`);
* the inner loop never materialises θ or the clique beliefs: θ is kept as θ⁰ plus one
  accumulated update per measured attribute set, a clique's factor is ``exp(θ⁰)`` times small
  multipliers, and measured marginals are read from the upward-pass products (see
  :class:`_Engine`). This is the same arithmetic in a different order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from engine.domain import Domain
from engine.estimation.inference import (
    FLUSH_ERROR,
    PRECISION_GUARD,
    UNDERFLOW_GUARD,
    FloatArray,
    Reducer,
    TargetLattice,
    calibrate,
    canonical_potentials,
    make_plan,
    marginalise,
    precise,
    stable_factors,
)
from engine.estimation.junction_tree import JunctionTree, Labels, build_junction_tree
from engine.estimation.measurements import NoisyMarginal, estimate_total
from engine.estimation.model import GraphicalModel, add_to_clique

ARMIJO = 1e-4
"""Fraction of the first-order predicted decrease a step must achieve."""
GROWTH = 1.1
"""Step-size growth after a step accepted without backtracking."""
MOMENTUM_GROWTH = 1.05
"""Step-size growth after an accepted momentum step (a cold start begins at a tiny step and
must be able to leave it; a faster growth makes restarts frequent)."""
MAX_BACKTRACKS = 40
CONVERGENCE_WINDOW = 10
CALLBACK_EVERY = 10
RESYNC_EVERY = 50
"""Accepted steps between exact recomputations of the factors from the potentials."""
MERGE_FRACTION = 8
"""Small broadcast operands are multiplied together first while their union has at most
1/MERGE_FRACTION of the clique's cells, so the clique itself is touched fewer times."""
WARM_FLOOR = 1e-15
"""Relative floor on marginals when a warm start is projected onto a different tree."""


def _in_id_order(labels: Labels, measurement: NoisyMarginal) -> tuple[tuple[int, ...], FloatArray]:
    domain = labels.domain
    positions = labels.clique(measurement.attributes)
    expected = tuple(domain.size(name) for name in measurement.attributes)
    if measurement.values.shape != expected:
        raise ValueError(
            f"measurement on {measurement.attributes} has shape {measurement.values.shape}, "
            f"the domain says {expected}"
        )
    values = measurement.values.transpose(labels.axes_from(measurement.attributes))
    return positions, np.ascontiguousarray(values)


def _groups_in_id_order(labels: Labels, measurement: NoisyMarginal) -> tuple[int, ...]:
    """The attribute positions of a grouped measurement (its ``groups`` are checked here)."""
    assert measurement.groups is not None
    domain = labels.domain
    expected = tuple(domain.size(name) for name in measurement.attributes)
    if measurement.groups.shape != expected:
        raise ValueError(
            f"grouped measurement on {measurement.attributes} has groups of shape "
            f"{measurement.groups.shape}, the domain says {expected}"
        )
    return labels.clique(measurement.attributes)


@dataclass(frozen=True, eq=False)
class _Grouped:
    """One grouped measurement: ``key`` is the index of the key of its attribute set, ``groups``
    maps each cell of that key's flat (id-ordered) vector to a group, ``target`` holds the noisy
    group sums and ``weight`` is 1/σ²."""

    key: int
    groups: npt.NDArray[np.intp]
    target: FloatArray
    weight: float


@dataclass(frozen=True, eq=False)
class _Key:
    """All measurements of one attribute set, pooled: ½Σ w_i‖μ − y_i‖² = ½W‖μ − Y‖² + const.

    ``W = Σ w_i`` (w_i = 1/σ_i²), ``Y = Σ w_i y_i / W``; the constant keeps the reported loss
    equal to the sum over the individual measurements.
    """

    clique: int
    attributes: tuple[int, ...]
    target: FloatArray
    weight: float
    constant: float


def _pool(
    tree: JunctionTree,
    placed: Sequence[tuple[tuple[int, ...], FloatArray]],
    weights: Sequence[float],
    hosts: Sequence[tuple[int, ...]] = (),
) -> list[_Key]:
    """Pool the plain measurements by attribute set; ``hosts`` are the attribute sets of grouped
    measurements, which get a key (of weight 0 if no plain measurement has that set)."""
    pooled: dict[tuple[int, ...], list[tuple[FloatArray, float]]] = {}
    for positions in hosts:
        pooled.setdefault(positions, [])
    for (positions, values), weight in zip(placed, weights, strict=True):
        pooled.setdefault(positions, []).append((values, weight))
    keys = []
    for positions, entries in pooled.items():
        holder = tree.containing(positions)
        assert holder is not None  # every measured set is a clique of the triangulated graph
        if not entries:  # only grouped measurements of this set: a weight-0 key to host them
            shape = tuple(tree.sizes[v] for v in positions)
            keys.append(_Key(holder, positions, np.zeros(shape), 0.0, 0.0))
            continue
        total_weight = sum(w for _, w in entries)
        mean = np.asarray(sum(w * y for y, w in entries) / total_weight, dtype=np.float64)
        constant = 0.5 * sum(w * _dot(y.ravel(), y.ravel()) for y, w in entries)
        constant -= 0.5 * total_weight * _dot(mean.ravel(), mean.ravel())
        keys.append(_Key(holder, positions, mean, total_weight, max(constant, 0.0)))
    return keys


def _shape_in(sizes: Sequence[int], attrs: Sequence[int], host: Sequence[int]) -> tuple[int, ...]:
    inside = set(attrs)
    return tuple(sizes[v] if v in inside else 1 for v in host)


class _Clique:
    """Static plan for one clique of the junction tree inside the mirror-descent loop."""

    def __init__(self, tree: JunctionTree, c: int, keys: Sequence[_Key]) -> None:
        sizes = tree.sizes
        clique = tree.cliques[c]
        self.clique = clique
        self.cells = math.prod(tree.shapes[c])
        self.is_root = tree.parent[c] == -1
        self.separator = tree.separators[c]
        # Cells one entry of the upward message sums (the root: all of them), and cells of the
        # parent that one entry of the downward message sums.
        separator_cells = math.prod(sizes[v] for v in self.separator)
        self.terms = self.cells // separator_cells
        parent = tree.parent[c]
        self.fan_in = 0 if parent == -1 else math.prod(tree.shapes[parent]) // separator_cells
        self.up = Reducer(tree.shapes[c], tuple(v in set(self.separator) for v in clique))
        self.total = Reducer(tree.shapes[c], (False,) * len(clique))
        self.belief_shape = _shape_in(sizes, self.separator, clique)

        # Keys in this clique, smallest first; each folds into its smallest measured superset
        # here, or is applied to the clique itself (a "top" key).
        mine = [i for i, key in enumerate(keys) if key.clique == c]
        mine.sort(key=lambda i: (math.prod(sizes[v] for v in keys[i].attributes), i))
        self.keys = mine
        self.fold_into: dict[int, int] = {}
        self.fold_shape: dict[int, tuple[int, ...]] = {}
        for position, i in enumerate(mine):
            measured = keys[i].attributes
            into, host = -1, clique
            for j in mine[position + 1 :]:
                if set(measured) <= set(keys[j].attributes):
                    into, host = j, keys[j].attributes
                    break
            self.fold_into[i] = into
            self.fold_shape[i] = _shape_in(sizes, measured, host)
        self.top = [i for i in mine if self.fold_into[i] < 0]

        # Operands of the upward product: the top keys' multipliers and the children's messages,
        # merged into groups whose union of attributes stays small.
        operands: list[tuple[str, int, tuple[int, ...]]] = [
            ("key", i, keys[i].attributes) for i in self.top
        ]
        operands += [("child", k, tree.separators[k]) for k in tree.children[c]]
        limit = max(1, self.cells // MERGE_FRACTION)
        groups: list[tuple[set[int], list[tuple[str, int, tuple[int, ...]]]]] = []
        for operand in sorted(operands, key=lambda o: -math.prod(sizes[v] for v in o[2])):
            for group_attrs, members in groups:
                cells = math.prod(sizes[v] for v in group_attrs | set(operand[2]))
                # Merging never costs more than a pass the group makes anyway.
                if cells <= max(limit, math.prod(sizes[v] for v in group_attrs)):
                    group_attrs |= set(operand[2])
                    members.append(operand)
                    break
            else:
                groups.append((set(operand[2]), [operand]))
        self.groups: list[tuple[tuple[int, ...], list[tuple[str, int, tuple[int, ...]]]]] = []
        for group_attrs, members in groups:
            covered = tuple(sorted(group_attrs))
            self.groups.append(
                (
                    _shape_in(sizes, covered, clique),
                    [(kind, ident, _shape_in(sizes, a, covered)) for kind, ident, a in members],
                )
            )

        # Marginals wanted from this clique's belief: its keys and its children's separators.
        # If some T ∪ S (S = separator with the parent) is the whole clique, the belief itself
        # is needed: the product is turned into it in place and every T is read from it.
        # Otherwise each T is read from the product's marginal on T ∪ S times the downward
        # message on S, and the belief is only formed once, after the fit.
        wanted = [keys[i].attributes for i in mine] + [tree.separators[k] for k in tree.children[c]]
        augmented = sorted({tuple(sorted(set(t) | set(self.separator))) for t in wanted})
        self.in_place = (not self.is_root) and clique in augmented
        if self.in_place:
            augmented = sorted(set(wanted))
        self.lattice = TargetLattice(clique, sizes, augmented)
        self.down_shape = [_shape_in(sizes, self.separator, a) for a in self.lattice.targets]
        self.reads: dict[tuple[int, ...], tuple[int, Reducer]] = {}
        for t in wanted:
            a = t if self.in_place else tuple(sorted(set(t) | set(self.separator)))
            keep = tuple(v in set(t) for v in a)
            self.reads[t] = (self.lattice.index[a], Reducer(tuple(sizes[v] for v in a), keep))
        self.child_seps = [(k, tree.separators[k]) for k in tree.children[c]]


class _Evaluation:
    """One model evaluation: measured marginals and gradient (flat, keys concatenated), loss,
    and what rebuilds the beliefs."""

    __slots__ = ("downs", "gradients", "loss", "marginals", "products", "slot", "theta")

    def __init__(
        self,
        products: list[FloatArray],
        downs: list[FloatArray | float],
        marginals: FloatArray,
        loss: float,
        gradients: FloatArray,
        slot: int,
    ) -> None:
        self.slot = slot
        self.products = products
        self.downs = downs
        self.marginals = marginals
        self.loss = loss
        self.gradients = gradients
        # The exact path's potentials (canonical form), which θ⁰ is reset to if it is accepted.
        self.theta: list[FloatArray] | None = None


class _Buffers:
    """Arrays one evaluation writes into, reused across evaluations.

    Fresh multi-megabyte arrays cost page faults on every evaluation (measured: several
    milliseconds per evaluation of a 1M-cell model, more than the arithmetic), so the loop keeps
    two sets, one for the accepted evaluation and one for the trial, and swaps them.
    """

    __slots__ = ("diff", "gradients", "marginals", "products", "shapes")

    def __init__(self, shapes: Sequence[tuple[int, ...]], keys_size: int) -> None:
        self.shapes = shapes
        self.products: list[FloatArray | None] = [None] * len(shapes)
        self.marginals = np.empty(keys_size)
        self.gradients = np.empty(keys_size)
        self.diff = np.empty(keys_size)

    def product(self, c: int) -> FloatArray:
        buffer = self.products[c]
        if buffer is None:
            buffer = self.products[c] = np.empty(self.shapes[c])
        return buffer


class _Engine:
    """Belief propagation specialised to the mirror-descent loop.

    Potentials are θ = θ⁰ + Σ_T acc_T (broadcast), one accumulated update per measured attribute
    set T. A clique's probability-space factor is ``ψ⁰ · Π exp(acc_T + move_T)`` with
    ``ψ⁰ = exp(θ⁰ − max θ⁰)``; the multipliers only have the measured sets' sizes, and θ⁰ absorbs
    the accumulated updates every ``RESYNC_EVERY`` accepted steps (or at once after an
    evaluation the guard sent to the exact path), so they stay small. The upward pass
    multiplies ψ⁰ by the merged multipliers and children's messages (the "product" of the
    clique), the downward pass produces the message from the parent, and every measured marginal
    is read from the product's marginal on T ∪ S times that message, so clique beliefs are never
    formed inside the loop. Underflow is guarded exactly as in
    :func:`engine.estimation.inference.calibrate_factors` (a bound on the error it can cause,
    with the multipliers' maxima folded in); when the guard trips, the evaluation is redone from
    the exact θ rewritten without cancellation across cliques
    (:func:`engine.estimation.inference.canonical_potentials`), falling back to log space if
    needed, and if that evaluation is accepted θ⁰ becomes the rewritten θ, so the fast path
    works again from the next step on.
    """

    def __init__(
        self,
        tree: JunctionTree,
        keys: Sequence[_Key],
        total: float,
        grouped: Sequence[_Grouped] = (),
    ) -> None:
        self.tree = tree
        self.keys = keys
        self.grouped = grouped
        self.total = total
        self.cliques = [_Clique(tree, c, keys) for c in range(len(tree.cliques))]
        self.measured = [c for c in range(len(tree.cliques)) if self.cliques[c].keys]
        self.exact_plan = make_plan(
            tree,
            [[keys[i].attributes for i in self.cliques[c].keys] for c in range(len(tree.cliques))],
        )
        self.theta0: list[FloatArray] = []
        self.psi0: list[FloatArray] = []
        # Key-sized quantities live in flat vectors; key i is the slice bounds[i]:bounds[i + 1].
        sizes = [key.target.size for key in keys]
        self.bounds = [0, *np.cumsum(sizes, dtype=np.int64).tolist()]
        self.shapes = [key.target.shape for key in keys]
        self.target = np.concatenate([key.target.ravel() for key in keys]) if keys else np.zeros(0)
        self.weight = np.repeat([key.weight for key in keys], sizes).astype(np.float64)
        self.constant = sum(key.constant for key in keys)
        self.buffers = (
            _Buffers(tree.shapes, self.target.size),
            _Buffers(tree.shapes, self.target.size),
        )
        # Which keys each clique's multipliers are built from (for the bound on their product).
        self.starts = np.asarray(self.bounds[:-1], dtype=np.intp)
        self.incidence = np.zeros((len(tree.cliques), len(keys)))
        for c, plan in enumerate(self.cliques):
            self.incidence[c, plan.keys] = 1.0

    def views(self, flat: FloatArray) -> list[FloatArray]:
        """Per-key views (in the key's shape) of a flat key vector."""
        b = self.bounds
        return [flat[b[i] : b[i + 1]].reshape(shape) for i, shape in enumerate(self.shapes)]

    def reset(self, theta0: list[FloatArray]) -> None:
        """Start from potentials ``theta0`` with all accumulated updates at zero."""
        self.theta0 = theta0
        self.psi0 = stable_factors(theta0)

    def folded(self, c: int, updates: Sequence[FloatArray]) -> list[FloatArray]:
        """Clique c's per-key arrays with smaller keys folded into their supersets (top keys)."""
        plan = self.cliques[c]
        combined = {i: updates[i] for i in plan.keys}
        for i in plan.keys:
            into = plan.fold_into[i]
            if into >= 0:
                combined[into] = combined[into] + combined[i].reshape(plan.fold_shape[i])
        return [combined[i] for i in plan.top]

    def potentials(self, flat_updates: FloatArray) -> list[FloatArray]:
        """θ⁰ plus ``flat_updates`` (a flat key vector), broadcast into their cliques."""
        updates = self.views(flat_updates)
        theta = list(self.theta0)
        for c in self.measured:
            plan = self.cliques[c]
            values = self.theta0[c].copy()
            for i, array in zip(plan.top, self.folded(c, updates), strict=True):
                values += array.reshape(plan.fold_shape[i])
            theta[c] = values
        return theta

    def evaluate(self, flat_updates: FloatArray, slot: int) -> _Evaluation:
        """The model with potentials θ⁰ + ``flat_updates`` (a flat key vector), written into
        buffer set ``slot`` (which must not hold an evaluation still in use)."""
        updates = self.views(flat_updates)
        try:
            evaluation = self._evaluate_fast(updates, slot, flat_updates)
        except _Underflow:
            return self._evaluate_exact(updates, slot)
        if not math.isfinite(evaluation.loss):  # not expected past the guards; costs nothing
            return self._evaluate_exact(updates, slot)
        return evaluation

    def _evaluate_fast(
        self, updates: Sequence[FloatArray], slot: int, flat_updates: FloatArray | None = None
    ) -> _Evaluation:
        # log of a bound on each clique's product of multipliers: the sum of the positive parts
        # of its keys' largest updates (a folded key adds to its superset's array).
        if self.keys:
            if flat_updates is None:
                flat_updates = np.concatenate([u.ravel() for u in updates])
            peaks = np.maximum(np.maximum.reduceat(flat_updates, self.starts), 0.0)
            growth = (self.incidence @ peaks).tolist()
        else:
            growth = [0.0] * len(self.cliques)
        state = _Pass(self, updates, self.buffers[slot], growth)
        for c in reversed(self.tree.preorder):
            state.up(c)
        for c in self.tree.preorder:
            state.down(c)
        marginals = [state.read[(key.clique, key.attributes)] for key in self.keys]
        return self._score(state.products, state.downs, marginals, slot)

    def _evaluate_exact(self, updates: Sequence[FloatArray], slot: int) -> _Evaluation:
        """The evaluation from the full potentials, rewritten without cancellation across
        cliques (:func:`canonical_potentials`, in log space), which makes the probability-space
        pass exact again; :func:`calibrate` falls back to log space if it still is not."""
        theta = self.potentials(
            np.concatenate([u.ravel() for u in updates]) if updates else np.zeros(0)
        )
        theta = canonical_potentials(self.exact_plan, theta)
        beliefs, extracted = calibrate(self.exact_plan, theta, self.total)
        marginals = []
        for key in self.keys:
            lattice = self.exact_plan.lattices[key.clique]
            marginals.append(extracted[key.clique][lattice.index[key.attributes]])
        downs: list[FloatArray | float] = [1.0] * len(beliefs)
        evaluation = self._score(list(beliefs), downs, marginals, slot)
        evaluation.theta = theta
        return evaluation

    def _score(
        self,
        products: list[FloatArray],
        downs: list[FloatArray | float],
        marginals: list[FloatArray],
        slot: int,
    ) -> _Evaluation:
        buffers = self.buffers[slot]
        flat = buffers.marginals
        b = self.bounds
        for i, mu in enumerate(marginals):
            flat[b[i] : b[i + 1]] = mu.ravel()
        diff = np.subtract(flat, self.target, out=buffers.diff)
        gradient = np.multiply(self.weight, diff, out=buffers.gradients)
        loss = 0.5 * _dot(gradient, diff) + self.constant
        for term in self.grouped:
            lo, hi = b[term.key], b[term.key + 1]
            sums = np.bincount(term.groups, weights=flat[lo:hi], minlength=term.target.size)
            residual = sums - term.target
            loss += 0.5 * term.weight * _dot(residual, residual)
            gradient[lo:hi] += term.weight * residual[term.groups]
        return _Evaluation(products, downs, flat, loss, gradient, slot)

    def beliefs(self, evaluation: _Evaluation) -> list[FloatArray]:
        """The clique beliefs of an evaluation (product times the downward message)."""
        beliefs = []
        for c, (product, down) in enumerate(
            zip(evaluation.products, evaluation.downs, strict=True)
        ):
            if isinstance(down, float):
                beliefs.append(product if down == 1.0 else product * down)
            else:
                beliefs.append(product * down.reshape(self.cliques[c].belief_shape))
        return beliefs


class _Underflow(ArithmeticError):
    """The fast pass could not guarantee its precision; the evaluation is redone exactly."""


_MAX_GROWTH = 700.0
"""Largest bound on the log of a clique's product of multipliers the fast pass accepts (e^700
is near the largest float: such updates would overflow, or fail the guard anyway)."""
_ROUNDING = 1.0 + 1e-9
"""Slack for rounding in the scalar bound on a downward message's largest entry."""


class _Pass:
    """The arrays of one evaluation; ``up(c)`` and ``down(c)`` do clique c's share of the
    upward (children first) and downward (parent first) passes.

    Underflow is bounded as in :func:`engine.estimation.inference.calibrate_factors`, with the
    multipliers folded in: a clique's cells are ψ⁰ (≤ 1) times multipliers (≤ e^growth) times
    children's messages (≤ 1), so their error bound is e^growth times (``FLUSH_ERROR`` plus the
    children's message error bounds). Each downward message must keep that error within
    ``PRECISION_GUARD`` of the total. Its largest entry is only computed when a scalar bound does
    not already settle it: an entry sums ``fan_in`` of the parent's cells, each at most
    e^growth times the parent's message, and is divided by the child's scale.
    """

    __slots__ = (
        "buffers",
        "downs",
        "engine",
        "error",
        "growth",
        "largest",
        "off",
        "products",
        "read",
        "scales",
        "unscaled",
        "updates",
        "upward",
    )

    def __init__(
        self,
        engine: _Engine,
        updates: Sequence[FloatArray],
        buffers: _Buffers,
        growth: list[float],
    ) -> None:
        count = len(engine.tree.cliques)
        self.engine = engine
        self.buffers = buffers
        self.updates = updates
        self.growth = growth
        self.products: list[FloatArray] = list(engine.psi0)
        self.upward: list[FloatArray] = [engine.psi0[0]] * count
        self.unscaled: list[FloatArray] = [engine.psi0[0]] * count
        self.downs: list[FloatArray | float] = [0.0] * count
        self.read: dict[tuple[int, tuple[int, ...]], FloatArray] = {}
        # Bounds: underflow error of a clique's product cells and of its rescaled upward
        # message's entries; the upward rescaling factor; the largest downward message entry.
        self.error = [FLUSH_ERROR] * count
        self.off = [0.0] * count
        self.scales = [1.0] * count
        self.largest = [0.0] * count

    def up(self, c: int) -> None:
        """Clique c's product (ψ⁰ times its multipliers and children's messages), and its
        message to the parent (or, for the root, the normaliser)."""
        engine = self.engine
        plan = engine.cliques[c]
        multipliers: dict[int, FloatArray] = {}
        if plan.top:
            # No max-shift: the updates since the last resync are small, and an overflow would
            # make a message non-finite, which the guard below turns into an exact evaluation.
            for i, values in zip(plan.top, engine.folded(c, self.updates), strict=True):
                multipliers[i] = np.exp(values)
        growth = self.growth[c]
        if growth > _MAX_GROWTH:
            raise _Underflow
        error = FLUSH_ERROR
        for k in engine.tree.children[c]:
            error += self.off[k]
        if growth > 0.0:
            error *= math.exp(growth)
        self.error[c] = error
        product: FloatArray | None = None
        for shape, members in plan.groups:
            operand: FloatArray | None = None
            for kind, ident, member_shape in members:
                array = (multipliers[ident] if kind == "key" else self.upward[ident]).reshape(
                    member_shape
                )
                operand = array if operand is None else operand * array
            assert operand is not None
            operand = operand.reshape(shape)
            if product is None:
                product = np.multiply(engine.psi0[c], operand, out=self.buffers.product(c))
            else:
                product *= operand
        if product is not None:
            self.products[c] = product
        if plan.is_root:
            mass = float(plan.total(self.products[c]))
            if not (mass >= UNDERFLOW_GUARD and math.isfinite(mass)):
                raise _Underflow
            normaliser = engine.total / mass
            if not precise(plan.terms * error, normaliser, engine.total):
                raise _Underflow
            self.downs[c] = normaliser
            self.largest[c] = normaliser
            return
        summed = plan.up(self.products[c])
        scale = float(summed.max())
        if not (scale >= UNDERFLOW_GUARD and math.isfinite(scale)):
            raise _Underflow
        self.unscaled[c] = summed
        self.upward[c] = summed / scale if scale != 1.0 else summed
        self.off[c] = plan.terms * error / scale
        self.scales[c] = scale

    def down(self, c: int) -> None:
        """Clique c's wanted marginals and the downward messages to its children."""
        engine = self.engine
        plan = engine.cliques[c]
        down = self.downs[c]
        if plan.in_place:
            assert not isinstance(down, float)
            if self.products[c] is engine.psi0[c]:
                self.products[c] = np.multiply(
                    engine.psi0[c], down.reshape(plan.belief_shape), out=self.buffers.product(c)
                )
            else:
                self.products[c] *= down.reshape(plan.belief_shape)
            self.downs[c] = down = 1.0
        augmented = plan.lattice.extract(self.products[c])
        if isinstance(down, float):
            scaled = augmented if down == 1.0 else [values * down for values in augmented]
        else:
            scaled = [
                values * down.reshape(shape)
                for values, shape in zip(augmented, plan.down_shape, strict=True)
            ]
        for target, (slot, reducer) in plan.reads.items():
            self.read[(c, target)] = reducer(scaled[slot])
        if not plan.child_seps:
            return
        growth = self.growth[c]
        reach = self.largest[c] * _ROUNDING
        if growth > 0.0:
            reach *= math.exp(growth)
        limit = PRECISION_GUARD * engine.total
        for k, separator in plan.child_seps:
            marginal = self.read[(c, separator)]
            up = self.unscaled[k]
            message = np.divide(marginal, up, out=np.zeros_like(marginal), where=up > 0)
            child = engine.cliques[k]
            bound = child.terms * self.error[k]
            largest = child.fan_in * reach / self.scales[k]
            # A message that could multiply the underflow error of child k's cells beyond the
            # guard (or is not finite) sends the evaluation to the exact path; its largest
            # entry is only looked at when the scalar bound does not settle that.
            if not bound * largest <= limit:
                largest = float(message.max(initial=0.0))
                if not bound * largest <= limit:  # also for a non-finite message
                    raise _Underflow
            self.downs[k] = message
            self.largest[k] = largest


def _dot(a: FloatArray, b: FloatArray) -> float:
    """Inner product without BLAS: OpenBLAS threads ``ddot`` on long vectors, and those threads
    stall badly when the machine's other cores are busy (measured: 4× slower fits)."""
    return float(np.einsum("i,i->", a, b))


def _warm_potentials(tree: JunctionTree, warm: GraphicalModel) -> list[FloatArray]:
    """The warm start's potentials on ``tree``.

    If every old maximal clique lies inside a new one (the usual case when cliques are only
    added), the old potentials are added there and the new model starts as exactly the old
    distribution; new cliques start at zero. Otherwise the old distribution cannot be
    represented on the new tree, and the start is its projection onto it: the junction-tree
    factorisation ``Π μ_C / Π μ_S`` of the old model's marginals on the new cliques.
    """
    theta = [np.zeros(shape) for shape in tree.shapes]
    old = warm.tree
    if all(tree.containing(clique) is not None for clique in old.cliques):
        for clique, values in zip(old.cliques, warm._theta, strict=True):
            add_to_clique(tree, theta, clique, values)
        return theta
    names = [tree.clique_names(c) for c in range(len(tree.cliques))]
    marginals = warm.project_many(names)
    floor = WARM_FLOOR * warm.total
    for c, marginal in enumerate(marginals):
        theta[c] = np.log(np.maximum(marginal, floor))
        if tree.parent[c] != -1:
            separator = set(tree.separators[c])
            flags = tuple(v in separator for v in tree.cliques[c])
            shape = _shape_in(tree.sizes, tree.separators[c], tree.cliques[c])
            sums = marginalise(marginal, flags).reshape(shape)
            theta[c] -= np.log(np.maximum(sums, floor))
    return theta


def estimate(
    domain: Domain,
    measurements: Sequence[NoisyMarginal],
    *,
    total: float | None = None,
    cliques: Sequence[Sequence[str]] = (),
    warm_start: GraphicalModel | None = None,
    iterations: int = 1000,
    max_cells: int | None = None,
    callback: Callable[[int, float], None] | None = None,
    tolerance: float = 1e-7,
    momentum: bool = False,
) -> GraphicalModel:
    """Fit a :class:`GraphicalModel` to noisy marginals (Private-PGM mirror descent).

    ``total`` is the number of rows the model's marginals sum to; ``None`` estimates it from the
    measurements (:func:`estimate_total`). The junction tree is built from the measured attribute
    sets plus ``cliques``; :class:`ModelTooLarge` is raised before anything is allocated if its
    size (:func:`model_size`) exceeds ``max_cells``. ``warm_start`` reuses a previous model's
    potentials and last step size, which makes a re-fit after adding a measurement take a few
    dozen to a few hundred iterations. At most ``iterations`` mirror-descent steps are taken;
    the fit stops earlier when the loss improves by less than ``tolerance`` (relative) over
    ``CONVERGENCE_WINDOW`` steps (``tolerance=0`` runs them all). ``callback(iteration, loss)`` is
    called every ``CALLBACK_EVERY`` iterations and after the last one; an exception from it
    propagates and ends the fit. ``momentum=True`` adds Nesterov-style momentum with restart
    (see :func:`_descend`): the loss falls about ten times faster per iteration, so fewer
    iterations reach the same loss; the fit it converges to is the same.

    Post-processing only: no data is read and no privacy budget is spent.
    """
    if not isinstance(domain, Domain):
        raise TypeError("domain must be a Domain")
    measurements = tuple(measurements)
    if not all(isinstance(m, NoisyMarginal) for m in measurements):
        raise TypeError("measurements must be NoisyMarginal objects")
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 0:
        raise ValueError("iterations must be a non-negative int")
    if not (math.isfinite(tolerance) and tolerance >= 0):
        raise ValueError("tolerance must be finite and non-negative")
    if warm_start is not None:
        if not isinstance(warm_start, GraphicalModel):
            raise TypeError("warm_start must be a GraphicalModel")
        if warm_start.domain != domain:
            raise ValueError("warm_start was fitted on a different domain")
    if total is None:
        total = estimate_total(measurements)
    else:
        total = float(total)
        if not (math.isfinite(total) and total > 0):
            raise ValueError("total must be finite and positive")

    labels = Labels(domain)
    plain = [m for m in measurements if m.groups is None]
    partitioned = [m for m in measurements if m.groups is not None]
    placed = [_in_id_order(labels, m) for m in plain]
    hosts = [_groups_in_id_order(labels, m) for m in partitioned]
    extra = [labels.clique(clique) for clique in cliques]
    # The measured sets in measurement order (as model_size sees them), then the extra cliques.
    ordered = [labels.clique(m.attributes) for m in measurements]
    tree = build_junction_tree(labels, ordered + extra, max_cells=max_cells)
    theta = (
        _warm_potentials(tree, warm_start)
        if warm_start is not None
        else [np.zeros(shape) for shape in tree.shapes]
    )
    keys = _pool(tree, placed, [1.0 / m.sigma**2 for m in plain], hosts)
    index = {key.attributes: i for i, key in enumerate(keys)}
    grouped = []
    for positions, m in zip(hosts, partitioned, strict=True):
        assert m.groups is not None
        ids = np.ascontiguousarray(m.groups.transpose(labels.axes_from(m.attributes))).ravel()
        grouped.append(_Grouped(index[positions], ids, m.values, 1.0 / m.sigma**2))
    step = None if warm_start is None else warm_start.step_size
    return _fit(tree, keys, total, theta, iterations, step, tolerance, callback, grouped, momentum)


def _fit(
    tree: JunctionTree,
    keys: Sequence[_Key],
    total: float,
    theta0: list[FloatArray],
    iterations: int,
    step: float | None,
    tolerance: float,
    callback: Callable[[int, float], None] | None,
    grouped: Sequence[_Grouped] = (),
    momentum: bool = False,
) -> GraphicalModel:
    engine = _Engine(tree, keys, total, grouped)
    # A too-long trial step can overflow exp() in the fast path; the non-finite result is
    # caught (exact re-evaluation or backtracking), so the floating-point warning is expected.
    with np.errstate(over="ignore", invalid="ignore"):
        return _descend(engine, theta0, iterations, step, tolerance, callback, momentum)


def _descend(
    engine: _Engine,
    theta0: list[FloatArray],
    iterations: int,
    step: float | None,
    tolerance: float,
    callback: Callable[[int, float], None] | None,
    momentum: bool = False,
) -> GraphicalModel:
    """The mirror-descent loop (see the module docstring).

    With ``momentum``, a step that follows an accepted step is tried first as
    θ − η·∇L(μ) + β·(θ − θ_prev) with Nesterov's weights β_k = (t_k − 1)/t_{k+1},
    t_{k+1} = (1 + √(1 + 4t_k²))/2 (heavy-ball form: the gradient is the current one, so a
    step still costs one evaluation). It is kept if it lowers the loss; otherwise the momentum
    is dropped (t = 1, the function-value restart of O'Donoghue and Candès, "Adaptive restart
    for accelerated gradient schemes", 2015) and the plain Armijo search is done. The loss thus
    never rises, and the fixed points are the plain loop's.
    """
    keys, total, tree = engine.keys, engine.total, engine.tree
    engine.reset(theta0)
    accumulated = np.zeros_like(engine.target)
    trial_updates = np.empty_like(accumulated)
    change = np.empty_like(accumulated)
    velocity = np.zeros_like(accumulated) if momentum else accumulated
    t = 1.0
    moving = False
    current = engine.evaluate(accumulated, 0)
    if current.theta is not None:
        # The start's potentials cancel across cliques (a long fit drifted, or its warm start
        # did): go on from the same distribution in canonical form.
        engine.reset(current.theta)
    # The cold-start step: 1/(total · largest weight) keeps the first update bounded. A grouped
    # term's curvature is its weight times its largest group (QᵀQ has the group sizes on its
    # diagonal blocks), so that product stands in for its weight.
    weights = [key.weight for key in keys] + [
        term.weight * float(np.bincount(term.groups).max()) for term in engine.grouped
    ]
    safe_step = 1.0 / (total * max((w for w in weights if w > 0), default=1.0))
    if step is None or not (math.isfinite(step) and step > 0):
        step = safe_step
    # A warm start never starts below the safe step: a fit that ended near its optimum may have
    # shrunk its step to ~1e-10, and a new measurement would then barely move the model while
    # the convergence test took the lack of progress for convergence.
    step = max(step, safe_step)
    history = [current.loss]
    done = 0
    since_resync = 0
    for iteration in range(1, iterations + 1):
        if not keys:
            break
        accepted = grow = False
        if moving:
            t_next = (1.0 + math.sqrt(1.0 + 4.0 * t * t)) / 2.0
            np.multiply(current.gradients, -step, out=change)
            np.add(accumulated, change, out=trial_updates)
            np.multiply(velocity, (t - 1.0) / t_next, out=change)
            trial_updates += change
            trial = engine.evaluate(trial_updates, 1 - current.slot)
            if math.isfinite(trial.loss) and trial.loss < current.loss:
                accepted, t = True, t_next
                step *= MOMENTUM_GROWTH
            else:
                moving, t = False, 1.0
        if not accepted:
            # A warm start inherits a step size tuned to the previous loss; after a much more
            # precise measurement joins, even MAX_BACKTRACKS halvings may not bring it back into
            # range. Then the search restarts once from the cold-start step before giving up.
            for restart in (False, True):
                if restart:
                    if step <= safe_step:
                        break
                    step = safe_step
                for attempt in range(MAX_BACKTRACKS):
                    np.multiply(current.gradients, -step, out=change)
                    np.add(accumulated, change, out=trial_updates)
                    trial = engine.evaluate(trial_updates, 1 - current.slot)
                    np.subtract(current.marginals, trial.marginals, out=change)
                    predicted = _dot(current.gradients, change)
                    if (
                        math.isfinite(trial.loss)
                        and current.loss - trial.loss >= ARMIJO * predicted
                    ):
                        accepted, grow = True, attempt == 0
                        break
                    step *= 0.5
                if accepted:
                    break
            if not accepted:
                break
            moving = momentum
        if momentum:
            # The step just taken, in the same coordinates as the updates (a resync below
            # moves θ⁰, not the difference between two consecutive points).
            np.subtract(trial_updates, accumulated, out=velocity)
        accumulated, trial_updates = trial_updates, accumulated
        current = trial
        if grow:
            step *= GROWTH
        since_resync += 1
        if current.theta is not None:
            # The exact path's potentials: θ⁰ + the accumulated updates, without cancellation.
            engine.reset(current.theta)
            accumulated[:] = 0.0
            since_resync = 0
        elif since_resync >= RESYNC_EVERY:
            # Fold the accumulated updates into θ⁰ so the factors are exact again.
            engine.reset(engine.potentials(accumulated))
            accumulated[:] = 0.0
            since_resync = 0
        done = iteration
        history.append(current.loss)
        if callback is not None and iteration % CALLBACK_EVERY == 0:
            callback(iteration, current.loss)
        if len(history) > CONVERGENCE_WINDOW:
            before = history[-1 - CONVERGENCE_WINDOW]
            if before - current.loss <= tolerance * max(current.loss, 0.0):
                break
    if callback is not None and done % CALLBACK_EVERY != 0:
        callback(done, current.loss)
    return GraphicalModel(
        tree,
        engine.potentials(accumulated),
        total,
        beliefs=engine.beliefs(current),
        loss=current.loss,
        iterations=done,
        step_size=step,
    )
