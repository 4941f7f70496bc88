"""Belief propagation and variable elimination on a junction tree (post-processing only).

Sum-product message passing (two passes, Hugin-style distribution) turns log-space clique
potentials θ into calibrated clique marginals scaled to the model's total, as in Private-PGM
(McKenna, Sheldon, Miklau, ICML 2019). Nothing here sees data or spends privacy budget.

Numerics. The fast path works in probability space: each clique's factor is
``ψ = exp(θ − max θ)`` (one ``exp`` per clique per call) and every upward message is rescaled to
a maximum of 1, so every product of factors is at most 1 and nothing overflows. A cell whose
product of factors is ≥ 2⁻¹⁰²² is then computed to full relative precision; a cell below that
loses its precision (or becomes 0), which is negligible as long as nothing later divides it by a
tiny number. That is checked with a running bound on the absolute error underflow can cause:
a product of factors at most 1 is off by at most ``FLUSH_ERROR`` from underflow, plus what its
children's messages were off by; an upward message sums ``terms`` such cells and is divided by its
maximum (which multiplies its error bound by ``terms / scale``); a clique's belief is its product
times the downward message, so the error bound of its beliefs is the error bound of its cells
times the message's maximum. If that exceeds ``PRECISION_GUARD`` of the total anywhere (or a
message's maximum or the root's mass is below ``1e-250`` or not finite), the whole call is redone
in log space with max-subtracted log-sum-exp, which is exact but several times slower. It happens
only when potentials of opposite sign and hundreds of nats cancel across cliques, so that every
cell carrying the mass underflowed on the way up; without the bound the pass then returned NaN
(a message overflowed) or, silently, the marginals of a different distribution (a surviving tiny
cell took the mass). :func:`canonical_potentials` rewrites such potentials into an equivalent form
without cancellation, in which the pass is exact again.
Deviation from private-pgm: mbi passes log-space messages (a log-sum-exp per message); the
probability-space pass with a guarded fallback computes the same beliefs with far fewer ``exp``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from engine.estimation.junction_tree import JunctionTree

FloatArray = npt.NDArray[np.float64]

UNDERFLOW_GUARD = 1e-250
"""Smallest rescaling factor the probability-space pass accepts before falling back to logs."""
FLUSH_ERROR = 2.0**-1022
"""Bound on the absolute error underflow causes in a product of factors, each at most 1: every
product that falls below the smallest normal number 2⁻¹⁰²² is rounded to a multiple of 2⁻¹⁰⁷⁴,
and far fewer than 2⁵¹ such roundings touch one cell."""
PRECISION_GUARD = 2.0**-40
"""Largest bound on the underflow error of a belief, relative to the total, that the
probability-space pass accepts (about 9e-13)."""


def precise(bound: float, message: FloatArray | float, total: float) -> bool:
    """Whether cells off by at most ``bound`` (absolute), multiplied by ``message`` (a downward
    message, or the root's ``total / mass``), stay within ``PRECISION_GUARD · total`` of their
    exact values. False for a non-finite message. One pass over a separator-sized array."""
    peak = message if isinstance(message, float) else float(message.max(initial=0.0))
    return bool(bound * peak <= PRECISION_GUARD * total)


class Reducer:
    """A precompiled :func:`marginalise` for one array shape and one set of kept axes.

    Runs of adjacent axes with the same flag are merged, and each summed run is contracted by
    BLAS against ones: ``x.reshape(-1, n) @ 1`` for a trailing run, ``1 @ x.reshape(n, -1)`` for
    a leading one; a middle run is done as a GEMM against ``[I; …; I]`` when the block after it
    is short, by ``einsum`` when the block before it is short, and by adding slices otherwise.
    This is several times faster than ``ndarray.sum`` over inner axes, and building the plan once
    keeps the per-call Python overhead small in the estimator's inner loop.

    Only BLAS calls that OpenBLAS runs on one thread are used (matrix-vector products with more
    than ``FEW_ROWS`` outputs, and matrix products cut into row blocks of at most ``GEMM_BLOCK``
    multiply-adds); a sum down to a handful of values would be a ``ddot``, which OpenBLAS runs on
    worker threads that stall when the machine's other cores are busy (measured: 5–50× slower).
    """

    __slots__ = ("_kept_shape", "_steps")

    def __init__(self, shape: Sequence[int], keep: Sequence[bool]) -> None:
        if len(keep) != len(shape):
            raise ValueError("one keep flag per axis is required")
        self._kept_shape = tuple(n for n, k in zip(shape, keep, strict=True) if k)
        groups: list[list[int]] = []  # [flag, size]
        for flag, n in zip(keep, shape, strict=True):
            if groups and bool(groups[-1][0]) == bool(flag):
                groups[-1][1] *= n
            else:
                groups.append([int(bool(flag)), n])
        steps: list[tuple[int, tuple[int, ...], FloatArray | int]] = []
        while any(not flag for flag, _ in groups):
            if not groups[-1][0]:
                n = groups.pop()[1]
                rows = math.prod(size for _, size in groups)
                if rows <= FEW_ROWS:
                    # A (near-)total sum is a dot product to BLAS, which OpenBLAS threads.
                    steps.append((_ROW_SUMS, (rows, n), n))
                else:
                    steps.append((_RIGHT, (rows, n), np.ones(n)))
            elif not groups[0][0]:
                n = groups.pop(0)[1]
                cols = math.prod(size for _, size in groups)
                if cols <= FEW_ROWS:
                    steps.append((_COLUMN_SUMS, (n, cols), n))
                else:
                    steps.append((_LEFT, (n, cols), np.ones(n)))
            else:
                i = next(i for i, (flag, _) in enumerate(groups) if not flag)
                n = groups[i][1]
                pre = math.prod(size for _, size in groups[:i])
                post = math.prod(size for _, size in groups[i + 1 :])
                if post <= 4:
                    steps.append((_BLOCKS, (pre, n * post), np.tile(np.eye(post), (n, 1))))
                elif pre <= 1000 or n > 8:
                    steps.append((_EINSUM, (pre, n, post), n))
                else:
                    steps.append((_SLICES, (pre, n, post), n))
                groups[i - 1][1] *= groups[i + 1][1]
                del groups[i : i + 2]
        self._steps = steps

    def __call__(self, values: FloatArray) -> FloatArray:
        if not self._steps:
            return values
        x = values
        for kind, shape, operand in self._steps:
            if kind == _RIGHT:
                assert isinstance(operand, np.ndarray)
                matrix = x.reshape(shape)
                if matrix.size <= GEMV_BLOCK:
                    x = matrix @ operand
                else:
                    rows = max(1, GEMV_BLOCK // shape[1])
                    x = np.empty(shape[0])
                    for start in range(0, shape[0], rows):
                        np.matmul(
                            matrix[start : start + rows], operand, out=x[start : start + rows]
                        )
            elif kind == _ROW_SUMS:
                x = x.reshape(shape).sum(axis=1)
            elif kind == _COLUMN_SUMS:
                x = x.reshape(shape).sum(axis=0)
            elif kind == _LEFT:
                assert isinstance(operand, np.ndarray)
                matrix = x.reshape(shape)
                if matrix.size <= GEMV_BLOCK:
                    x = operand @ matrix
                else:
                    cols = max(1, GEMV_BLOCK // shape[0])
                    x = np.empty(shape[1])
                    for start in range(0, shape[1], cols):
                        np.matmul(
                            operand, matrix[:, start : start + cols], out=x[start : start + cols]
                        )
            elif kind == _BLOCKS:
                assert isinstance(operand, np.ndarray)
                matrix = x.reshape(shape)
                rows = max(1, GEMM_BLOCK // operand.size)
                if matrix.shape[0] <= rows:
                    x = matrix @ operand
                else:
                    x = np.empty((matrix.shape[0], operand.shape[1]))
                    for start in range(0, matrix.shape[0], rows):
                        np.matmul(
                            matrix[start : start + rows], operand, out=x[start : start + rows]
                        )
            elif kind == _EINSUM:
                x = np.einsum("ijk->ik", x.reshape(shape))
            else:
                cube = x.reshape(shape)
                x = cube[:, 0, :].copy()
                for j in range(1, shape[1]):
                    x += cube[:, j, :]
        result: FloatArray = x.reshape(self._kept_shape)
        return result


_RIGHT, _LEFT, _BLOCKS, _EINSUM, _SLICES, _ROW_SUMS, _COLUMN_SUMS = range(7)
FEW_ROWS = 64
"""Reductions to at most this many values use numpy's own sum instead of BLAS."""
GEMM_BLOCK = 1 << 19
"""Multiply-adds per matrix-matrix BLAS call; OpenBLAS runs calls this small on one thread."""
GEMV_BLOCK = 1 << 17
"""Multiply-adds per matrix-vector BLAS call; OpenBLAS runs calls this small on one thread."""


def marginalise(values: FloatArray, keep: Sequence[bool]) -> FloatArray:
    """Sum ``values`` over the axes whose ``keep`` flag is false (kept axes stay in order).

    See :class:`Reducer`; build one directly to sum many arrays of the same shape.
    """
    if all(keep):
        return values
    return Reducer(values.shape, keep)(np.ascontiguousarray(values))


class TargetLattice:
    """How to read several marginals out of one clique's belief with little work.

    ``targets[i]`` is an attribute set inside ``clique`` (ascending positions). It is computed
    from ``sources[i]`` (-1: the clique's belief; otherwise an earlier, smallest superset among the
    targets) by summing the axes whose ``keep[i]`` flag is false. Targets are ordered largest
    first, so every source precedes the targets it feeds.
    """

    def __init__(
        self, clique: tuple[int, ...], sizes: Sequence[int], targets: Sequence[tuple[int, ...]]
    ) -> None:
        unique = sorted(set(targets), key=lambda t: (-math.prod(sizes[v] for v in t), t))
        self.clique = clique
        self.targets: list[tuple[int, ...]] = unique
        self.index = {t: i for i, t in enumerate(unique)}
        self.sources: list[int] = []
        self.keep: list[tuple[bool, ...]] = []
        self.reducers: list[Reducer] = []
        for i, target in enumerate(unique):
            wanted = set(target)
            best, best_attrs, best_cells = -1, clique, math.prod(sizes[v] for v in clique)
            for j in range(i):
                other = unique[j]
                cells = math.prod(sizes[v] for v in other)
                if wanted <= set(other) and cells < best_cells:
                    best, best_attrs, best_cells = j, other, cells
            self.sources.append(best)
            keep = tuple(v in wanted for v in best_attrs)
            self.keep.append(keep)
            self.reducers.append(Reducer(tuple(sizes[v] for v in best_attrs), keep))

    def extract(self, belief: FloatArray) -> list[FloatArray]:
        """The marginals of ``belief`` on every target, in ``targets`` order."""
        out: list[FloatArray] = []
        for source, reducer in zip(self.sources, self.reducers, strict=True):
            out.append(reducer(belief if source < 0 else out[source]))
        return out


class Plan:
    """Axis bookkeeping for belief propagation on one junction tree, computed once per tree.

    ``targets[c]`` lists extra attribute sets inside clique c whose marginals the caller wants
    with the beliefs (for the loss); the separators with c's children are always added, since the
    downward pass needs them.
    """

    def __init__(
        self, tree: JunctionTree, targets: Sequence[Sequence[tuple[int, ...]]] | None = None
    ) -> None:
        self.tree = tree
        count = len(tree.cliques)
        sizes = tree.sizes
        # Flags of the separator with the parent among a clique's axes (upward message), and the
        # shape that broadcasts a separator array against the clique (resp. its parent).
        self.up_keep: list[tuple[bool, ...]] = []
        self.in_child: list[tuple[int, ...]] = []
        self.in_parent: list[tuple[int, ...]] = []
        for c in range(count):
            sep = set(tree.separators[c])
            clique = tree.cliques[c]
            self.up_keep.append(tuple(v in sep for v in clique))
            self.in_child.append(tuple(sizes[v] if v in sep else 1 for v in clique))
            p = tree.parent[c]
            self.in_parent.append(
                () if p == -1 else tuple(sizes[v] if v in sep else 1 for v in tree.cliques[p])
            )
        self.lattices: list[TargetLattice] = []
        for c in range(count):
            wanted = [tree.separators[k] for k in tree.children[c]]
            if targets is not None:
                wanted += list(targets[c])
            self.lattices.append(TargetLattice(tree.cliques[c], sizes, wanted))
        # How many cells of a clique one entry of its upward message sums (the root: all).
        self.terms = [
            math.prod(tree.shapes[c]) // math.prod(sizes[v] for v in tree.separators[c])
            for c in range(count)
        ]
        # Where the downward pass finds each child's separator marginal in its parent's targets.
        self.sep_slot = [
            -1 if tree.parent[c] == -1 else self.lattices[tree.parent[c]].index[tree.separators[c]]
            for c in range(count)
        ]


def make_plan(
    tree: JunctionTree, targets: Sequence[Sequence[tuple[int, ...]]] | None = None
) -> Plan:
    """Precompute what :func:`calibrate` needs for ``tree`` (and the extra marginals wanted)."""
    return Plan(tree, targets)


class UnderflowError(ArithmeticError):
    """The probability-space pass lost precision; the caller retries in log space."""


Calibrated = tuple[list[FloatArray], list[list[FloatArray]]]
"""Beliefs per clique, and per clique the marginals of its lattice's targets."""


def stable_factors(potentials: Sequence[FloatArray]) -> list[FloatArray]:
    """``exp(θ − max θ)`` for each clique: the probability-space factors, each with maximum 1."""
    factors = []
    for theta in potentials:
        shifted = theta - theta.max()
        np.exp(shifted, out=shifted)
        factors.append(shifted)
    return factors


def calibrate_factors(plan: Plan, factors: Sequence[FloatArray], total: float) -> Calibrated:
    """Calibrated clique marginals (each summing to ``total``) from probability-space factors.

    Raises :class:`UnderflowError` if the guard described in the module docstring trips.
    """
    tree = plan.tree
    count = len(factors)
    products: list[FloatArray] = list(factors)
    upward: list[FloatArray] = [factors[0]] * count
    unscaled: list[FloatArray] = [factors[0]] * count
    # error[c]: bound on the absolute underflow error of clique c's product cells; off[c]: the
    # same for the entries of its (rescaled) upward message.
    error = [FLUSH_ERROR] * count
    off = [0.0] * count
    for c in reversed(tree.preorder):
        children = tree.children[c]
        if children:
            product = products[c] * upward[children[0]].reshape(plan.in_parent[children[0]])
            for k in children[1:]:
                product *= upward[k].reshape(plan.in_parent[k])
            products[c] = product
            error[c] += sum(off[k] for k in children)
        if tree.parent[c] == -1:
            continue
        summed = marginalise(products[c], plan.up_keep[c])
        scale = float(summed.max())
        if not (scale >= UNDERFLOW_GUARD and math.isfinite(scale)):
            raise UnderflowError("an upward message underflowed")
        # The parent sees the message rescaled to maximum 1; the downward pass divides by the
        # unscaled sums, so the product itself needs no rescaling.
        unscaled[c] = summed
        upward[c] = summed / scale if scale != 1.0 else summed
        off[c] = plan.terms[c] * error[c] / scale

    root = tree.preorder[0]
    mass = float(marginalise(products[root], (False,) * products[root].ndim))
    if not (mass >= UNDERFLOW_GUARD and math.isfinite(mass)):
        raise UnderflowError("the root's mass underflowed")
    if not precise(plan.terms[root] * error[root], total / mass, total):
        raise UnderflowError("the root's mass is not known precisely")
    beliefs: list[FloatArray] = [factors[0]] * count
    marginals: list[list[FloatArray]] = [[] for _ in range(count)]
    if products[root] is factors[root]:
        beliefs[root] = products[root] * (total / mass)
    else:
        beliefs[root] = products[root]
        beliefs[root] *= total / mass
    marginals[root] = plan.lattices[root].extract(beliefs[root])
    for c in tree.preorder[1:]:
        marginal = marginals[tree.parent[c]][plan.sep_slot[c]]
        # b_c = prod_c · μ_p(S) / Σ_{c∖S} prod_c: the slices of b_c sum to the parent's marginal.
        up = unscaled[c]
        down = np.divide(marginal, up, out=np.zeros_like(marginal), where=up > 0)
        if not precise(plan.terms[c] * error[c], down, total):
            raise UnderflowError("a downward message amplified the underflow error")
        if products[c] is factors[c]:
            beliefs[c] = products[c] * down.reshape(plan.in_child[c])
        else:
            beliefs[c] = products[c]
            beliefs[c] *= down.reshape(plan.in_child[c])
        marginals[c] = plan.lattices[c].extract(beliefs[c])
    return beliefs, marginals


def _logsumexp(values: FloatArray, keep: Sequence[bool]) -> FloatArray:
    if all(keep):
        return values
    axes = tuple(i for i, k in enumerate(keep) if not k)
    peak = values.max(axis=axes, keepdims=True)
    result = np.log(np.exp(values - peak).sum(axis=axes, keepdims=True)) + peak
    squeezed: FloatArray = np.squeeze(result, axis=axes)
    return squeezed


def calibrate_log(plan: Plan, potentials: Sequence[FloatArray], total: float) -> Calibrated:
    """The same as :func:`calibrate_factors`, computed entirely in log space (exact, slower)."""
    tree = plan.tree
    count = len(potentials)
    products = [np.array(theta, dtype=np.float64, copy=True) for theta in potentials]
    upward: list[FloatArray] = [products[0]] * count
    for c in reversed(tree.preorder):
        for k in tree.children[c]:
            products[c] += upward[k].reshape(plan.in_parent[k])
        if tree.parent[c] != -1:
            upward[c] = _logsumexp(products[c], plan.up_keep[c])
    root = tree.preorder[0]
    log_beliefs: list[FloatArray] = [products[0]] * count
    everything = (False,) * products[root].ndim
    log_beliefs[root] = products[root] - _logsumexp(products[root], everything) + math.log(total)
    for c in tree.preorder[1:]:
        p = tree.parent[c]
        sep = set(tree.separators[c])
        marginal = _logsumexp(log_beliefs[p], tuple(v in sep for v in tree.cliques[p]))
        log_beliefs[c] = products[c] + (marginal - upward[c]).reshape(plan.in_child[c])
    beliefs = [np.exp(b) for b in log_beliefs]
    return beliefs, [plan.lattices[c].extract(beliefs[c]) for c in range(count)]


def canonical_potentials(plan: Plan, potentials: Sequence[FloatArray]) -> list[FloatArray]:
    """Potentials of the same distribution without cancellation across cliques.

    Potentials on a junction tree are redundant: any function of a separator can move from a
    clique to its neighbour without changing the distribution, and a long mirror-descent fit
    drifts along those directions (observed on adult-sample: a clique's potentials at +343 to
    +660 nats, cancelled by other cliques, where its canonical form spans −57 to 0). This is the
    log-space upward pass of :func:`calibrate_log`: every non-root clique's log-sum-exp over its
    non-separator attributes is moved to its parent, so each non-root potential becomes the log
    of the model's conditional P(C ∖ S | S) (at most 0, and for every value of S at least one
    cell is at least −log of the number of cells summed), and the root's is its log marginal up
    to a constant, shifted to maximum 0. Then no product of probability-space factors needs
    cancellation, and :func:`calibrate_factors` is exact on them. One ``exp`` and one ``log`` per
    cell.
    """
    tree = plan.tree
    theta = [np.array(values, dtype=np.float64, copy=True) for values in potentials]
    for c in reversed(tree.preorder):
        p = tree.parent[c]
        if p == -1:
            theta[c] -= theta[c].max()
            continue
        message = _logsumexp(theta[c], plan.up_keep[c])
        theta[c] -= message.reshape(plan.in_child[c])
        theta[p] += message.reshape(plan.in_parent[c])
    return theta


def calibrate(
    plan: Plan,
    potentials: Sequence[FloatArray],
    total: float,
    factors: Sequence[FloatArray] | None = None,
) -> Calibrated:
    """Calibrated clique marginals scaled to ``total`` for log-space ``potentials``, and the
    plan's target marginals. ``factors`` may pass precomputed probability-space factors
    (``exp(θ − c)`` with c ≥ max θ for each clique, so that each is at most 1) of
    ``potentials``."""
    if factors is None:
        factors = stable_factors(potentials)
    try:
        return calibrate_factors(plan, factors, total)
    except UnderflowError:
        return calibrate_log(plan, potentials, total)


# --- contraction of factors (variable elimination) -------------------------------------------

Factor = tuple[tuple[int, ...], FloatArray]
"""A factor: attribute positions (ascending) and an array with one axis per attribute."""


def sum_to(factor: Factor, keep: set[int] | frozenset[int]) -> Factor:
    """Sum a factor over its attributes not in ``keep``."""
    attrs, values = factor
    flags = tuple(v in keep for v in attrs)
    if all(flags):
        return factor
    return tuple(v for v in attrs if v in keep), marginalise(values, flags)


def _blocked_matmul(left: FloatArray, right: FloatArray) -> FloatArray:
    """Batched ``left @ right`` in row blocks small enough for OpenBLAS to use one thread.

    OpenBLAS hands large calls to worker threads, which stall badly when the machine's other
    cores are busy (measured: matrix-vector products above ~300k multiply-adds, matrix products
    above ~1M); :data:`GEMV_BLOCK` and :data:`GEMM_BLOCK` stay below that.
    """
    batch, rows, inner = left.shape
    cols = right.shape[2]
    limit = GEMV_BLOCK if cols == 1 or rows == 1 else GEMM_BLOCK
    if rows * inner * cols <= limit:
        whole: FloatArray = np.matmul(left, right)
        return whole
    # Column blocks when even one row is too much work, then row blocks; a single-row block
    # is a matrix-vector product and gets the smaller limit.
    width = cols if inner * cols <= GEMM_BLOCK else max(1, GEMV_BLOCK // inner)
    step = max(1, GEMM_BLOCK // (inner * width))
    if step == 1:
        width = max(1, min(width, GEMV_BLOCK // inner))
    out = np.empty((batch, rows, cols))
    for start in range(0, rows, step):
        stop = start + step
        if width == cols:
            np.matmul(left[:, start:stop], right, out=out[:, start:stop])
            continue
        for first in range(0, cols, width):
            last = first + width
            out[:, start:stop, first:last] = np.matmul(left[:, start:stop], right[:, :, first:last])
    return out


def multiply_and_sum(left: Factor, right: Factor, keep: set[int] | frozenset[int]) -> Factor:
    """The product of two factors summed over every attribute not in ``keep``, via matmul.

    Attributes are split into kept-and-shared (batch), kept-and-one-sided (rows / columns) and
    summed-and-shared (the contracted axis); attributes in only one factor and not kept are summed
    out first. The result's attributes are ascending.
    """
    la, lv = sum_to(left, keep | set(right[0]))
    ra, rv = sum_to(right, keep | set(la))
    lset, rset = set(la), set(ra)
    batch = [v for v in la if v in rset and v in keep]
    contracted = [v for v in la if v in rset and v not in keep]
    rows = [v for v in la if v not in rset]
    cols = [v for v in ra if v not in lset]
    lpos = {v: i for i, v in enumerate(la)}
    rpos = {v: i for i, v in enumerate(ra)}
    lshape = dict(zip(la, lv.shape, strict=True))
    rshape = dict(zip(ra, rv.shape, strict=True))
    bsize = math.prod(lshape[v] for v in batch)
    rsize = math.prod(lshape[v] for v in rows)
    ksize = math.prod(lshape[v] for v in contracted)
    csize = math.prod(rshape[v] for v in cols)
    lmat = lv.transpose([lpos[v] for v in batch + rows + contracted]).reshape(bsize, rsize, ksize)
    rmat = rv.transpose([rpos[v] for v in batch + contracted + cols]).reshape(bsize, ksize, csize)
    if ksize == 1:
        product = lmat * rmat
    elif rsize == 1 and csize == 1:
        # Dot products: BLAS would call ddot, which OpenBLAS threads (see Reducer).
        product = np.einsum("bk,bk->b", lmat[:, 0, :], rmat[:, :, 0]).reshape(bsize, 1, 1)
    elif rsize == 1:
        # A vector times a matrix, done as the matrix (transposed) times the vector so that it
        # can be split into row blocks.
        product = _blocked_matmul(rmat.transpose(0, 2, 1), lmat.transpose(0, 2, 1))
        product = product.reshape(bsize, 1, csize)
    else:
        product = _blocked_matmul(lmat, rmat)
    order = batch + rows + cols
    shape = [lshape[v] for v in batch + rows] + [rshape[v] for v in cols]
    result = product.reshape(shape)
    final = sorted(order)
    if final != order:
        result = result.transpose([order.index(v) for v in final])
    return tuple(final), result
