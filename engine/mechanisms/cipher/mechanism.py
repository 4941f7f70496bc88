"""CIPHER: a full joint distribution from noisy low-order marginals by stepwise ridge solves
(Eugenio & Liu, "Construction of Differentially Private Empirical Distributions from a low-order
Marginals Set through Solving Linear Equations with l_2 Regularization", SAND2021-0088 C;
arXiv:1812.05671).

The reconstruction climbs one order at a time. For every attribute subset S above the measured
order it picks a target t ∈ S, writes the (|S|−1)-way tables it already has as linear equations
in the unknown conditional z_c(r) = P(t = c | R = r), R = S \\ {t} (law of total probability),
solves them with an l2 (ridge) penalty and multiplies back: P(S) = z·P(R). The last level S = all
attributes is the released joint, which is clipped, normalised and sampled. See
``../shared/papers/notes-cipher_dpcopula.md`` Part A for the derivation this file follows.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from fractions import Fraction
from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field
from scipy import sparse

from engine.accounting import split_rho
from engine.counting import CountingEngine
from engine.domain import Domain
from engine.marginals import Measurement, measure_marginal
from engine.mechanisms.base import (
    DomainRefused,
    Mechanism,
    Milestone,
    ProgressReporter,
    ResourceEstimate,
    SynthesisResult,
    resolve_rows,
    resource_estimate,
)
from engine.mechanisms.independent.mechanism import estimate_total
from engine.mechanisms.preview import NoisePreview, marginal_preview
from engine.models.fitted import FittedModel
from engine.models.kinds import JointModel

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

DEFAULT_MAX_CELLS = 4_194_304
"""2^22 cells: the full joint as float64 is 32 MB. Measured on a 2-core machine: (160, 160, 160)
(4.1M cells) runs in 2 s and (45, 45, 45, 45) in 11 s, both at about 390 MB peak RSS."""

DEFAULT_MAX_RECONSTRUCTED_CELLS = 100_000_000
"""Cap on Σ cells(S) over the subsets S the reconstruction solves for. The run time is about
linear in it: nltcs (16 binary columns, 43 million at order 2) takes about 35 s on a shared
2-core machine, at about 330 MB peak RSS; 17 binary columns (129 million) are refused."""

FLOOR = 1e-9
"""Probability floor of ``clip_mid``: intermediate tables are clipped to at least this and
renormalised, so no conditioning cell is empty or negative."""

_EMPTY = 1e-12
"""A conditioning cell with at most this mass counts as empty (only reachable with
``clip_mid=False``); its conditional falls back to the variable's one-way marginal."""

_DENSE_UNKNOWNS = 32
"""Systems with at most this many unknowns per target level are solved exactly (batched dense
normal equations, ``np.linalg.solve``); larger ones by batched conjugate gradients."""

_CG_TOL = 1e-6
"""Relative residual ‖AᵀAz + λz − Aᵀb‖ ≤ 1e-6·‖Aᵀb‖ at which conjugate gradients stop. On nltcs
tolerances from 1e-7 to 1e-4 gave the same TVD to four decimals."""
_CG_MAX_ITER = 300
"""Iteration cap per batch (reached only with ``clip_mid=False``, whose systems can be badly
conditioned; the clipped systems converge in 30–90 iterations)."""
_CHUNK_ELEMENTS = 1 << 20


def measured_queries(
    domain: Domain, params: CIPHERParams
) -> tuple[list[int], list[tuple[int, ...]]]:
    """(the columns with more than one value, the marginals measured as tuples of positions in
    that list): every ``order``-subset, the whole kept set if smaller, or the first column's
    one-way marginal when no column varies. Each gets an equal part of ρ."""
    kept = [i for i, size in enumerate(domain.sizes) if size > 1]
    if not kept:
        return kept, [(0,)]
    if params.order >= len(kept):
        return kept, [tuple(range(len(kept)))]
    return kept, list(itertools.combinations(range(len(kept)), params.order))


class CIPHERParams(BaseModel):
    """Parameters of CIPHER (see CIPHERMechanism for the defaults' sources)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    order: int = Field(
        default=2,
        ge=1,
        le=3,
        description="Q is every order-way marginal (the whole table if there are fewer "
        "attributes); the budget is split equally over them",
    )
    lam: float = Field(
        default=1e-3,
        ge=1e-9,
        le=10.0,
        description="λ: the ridge (l2) penalty of every linear solve; the paper only asks for a "
        "small value (at least 1e-9: below it AᵀA + λI can be singular in floating point)",
    )
    clip_mid: bool = Field(
        default=True,
        description="clip every intermediate table at a small positive floor and renormalise it "
        "(recommended deviation); false is the paper: correct negatives only at the end",
    )
    target: Literal["random", "largest"] = Field(
        default="random",
        description="the target variable of each subset's solve: drawn with the job's seed "
        "(the paper) or the attribute with the most values (first on ties)",
    )
    max_cells: int = Field(
        default=DEFAULT_MAX_CELLS,
        ge=1,
        le=1 << 26,
        description="refuse a domain whose full joint (product of the attribute sizes) has more "
        "cells than this: CIPHER materialises the full joint",
    )
    max_reconstructed_cells: int = Field(
        default=DEFAULT_MAX_RECONSTRUCTED_CELLS,
        ge=1,
        le=10**10,
        description="refuse a domain whose reconstruction (Σ of the cells of every attribute "
        "subset above the measured order, all of which are solved for) exceeds this",
    )
    synthesis: Literal["round", "sample"] = Field(
        default="round",
        description="'round' (controlled rounding of rows × the joint: counts are floor or "
        "ceiling of their expectation) or 'sample' (i.i.d. rows from the joint)",
    )


# ---------------------------------------------------------------------------------------------
# Public sizes (check_domain)
# ---------------------------------------------------------------------------------------------


def reconstructed_cells(sizes: Sequence[int], order: int) -> int:
    """Σ cells(S) over the subsets S of the attributes with more than one value and
    |S| > min(order, their number): the tables CIPHER solves for (public: sizes only)."""
    kept = [int(k) for k in sizes if k > 1]
    p0 = min(order, len(kept))
    # Elementary symmetric polynomials e_j(sizes) = Σ_{|S| = j} Π_{v ∈ S} K_v, in exact ints.
    e = [1] + [0] * len(kept)
    for k in kept:
        for j in range(len(kept), 0, -1):
            e[j] += k * e[j - 1]
    return sum(e[p0 + 1 :])


# ---------------------------------------------------------------------------------------------
# One subset's system (the paper's layout; used by tests and as the reference of the batched
# solver)
# ---------------------------------------------------------------------------------------------


def _conditional(table: FloatArray, axis: int, fallback: FloatArray) -> FloatArray:
    """``table`` divided by its sum over ``axis``; where that sum is at most ``_EMPTY`` the
    conditional is ``fallback`` (broadcast along ``axis``)."""
    total = table.sum(axis=axis, keepdims=True)
    ok = total > _EMPTY
    safe = np.where(ok, total, 1.0)
    out: FloatArray = np.where(ok, table / safe, fallback)
    return out


def system_matrix(
    p_r: FloatArray,
    p_ot: Sequence[FloatArray],
) -> tuple[sparse.csr_matrix, FloatArray]:
    """The paper's linear system for one subset S = R ∪ {t}, as (A, b).

    ``p_r`` is P(R) (one axis per variable of R, in order); ``p_ot[i]`` is P((R \\ {x_i}) ∪ {t})
    with the axes of R \\ {x_i} in order and t last. The unknowns are z = P(t ≠ K_t | R),
    level-major (z_1 over the cells of R in C order, then z_2, …). A is block-diagonal with
    K_t − 1 identical blocks; each block stacks, for every x_i ∈ R (last first, so that the
    conditioning sets R \\ {x_i} are in lexicographic order), one row per cell o of
    R \\ {x_i} holding P(x_i = v | o) in column (o, v). b stacks P(t = c | R \\ {x_i}) in the
    same order. Conditionals of empty cells fall back to uniform (test helper; the mechanism
    uses one-way marginals).
    """
    shape = p_r.shape
    m = len(shape)
    n = math.prod(shape)
    k_t = p_ot[0].shape[-1] if m > 0 else 0
    cols = np.arange(n).reshape(shape)
    rows: list[IntArray] = []
    col_parts: list[IntArray] = []
    values: list[FloatArray] = []
    rhs: list[FloatArray] = []
    offset = 0
    # Groups in reverse, so the conditioning sets R \ {x_i} come in lexicographic order, as in
    # the paper's example: b = (P(V3|V1), P(V3|V2)).
    for i in reversed(range(m)):
        w = _conditional(p_r, i, np.full_like(p_r, 1.0 / shape[i]))
        o_cells = n // shape[i]
        # Row index of every cell r: its position among the cells of R \ {x_i}.
        row_of = np.moveaxis(
            np.broadcast_to(
                np.arange(o_cells).reshape(shape[:i] + shape[i + 1 :])[..., None],
                (*shape[:i], *shape[i + 1 :], shape[i]),
            ),
            -1,
            i,
        )
        rows.append((row_of + offset).ravel())
        col_parts.append(cols.ravel())
        values.append(w.ravel())
        table = p_ot[i]
        cond = _conditional(table, table.ndim - 1, np.full_like(table, 1.0 / k_t))
        rhs.append(cond.reshape(o_cells, k_t)[:, : k_t - 1])
        offset += o_cells
    block = sparse.csr_matrix(
        (np.concatenate(values), (np.concatenate(rows), np.concatenate(col_parts))),
        shape=(offset, n),
    )
    a = sparse.block_diag([block] * (k_t - 1), format="csr")
    b = np.concatenate(rhs, axis=0).T.ravel()
    return a, b


# ---------------------------------------------------------------------------------------------
# Batched ridge solver
# ---------------------------------------------------------------------------------------------


class _NormalOperator:
    """z ↦ (AᵀA + λI) z for a batch of same-shaped systems, on flat (B, n, L) arrays.

    Equation group i contributes D_i z = w_i ⊙ expand_i(Σ_{x_i} w_i ⊙ z): a sum along axis i of
    R, done on a (B, left, K_i, right, L) view by adding the K_i slices (faster than a strided
    ``sum``), with preallocated buffers.
    """

    def __init__(self, weights: Sequence[FloatArray], lam: float, levels: int) -> None:
        self.batch = weights[0].shape[0]
        sizes = weights[0].shape[1:-1]
        self.n = math.prod(sizes)
        self.levels = levels
        self.lam = lam
        self.views: list[tuple[int, int, int]] = []
        self.weights: list[FloatArray] = []
        for i, w in enumerate(weights):
            left = math.prod(sizes[:i])
            right = math.prod(sizes[i + 1 :])
            self.views.append((left, sizes[i], right))
            self.weights.append(np.ascontiguousarray(w).reshape(self.batch, self.n, 1))
        self.buffer = np.empty((self.batch, self.n, levels))

    def diagonal(self) -> FloatArray:
        """diag(AᵀA + λI), shape (B, n, 1): the Jacobi preconditioner."""
        diag = np.full((self.batch, self.n, 1), self.lam)
        for w in self.weights:
            diag += w * w
        return diag

    def __call__(self, z: FloatArray, out: FloatArray) -> FloatArray:
        np.multiply(z, self.lam, out=out)
        buf = self.buffer
        for w, (left, k, right) in zip(self.weights, self.views, strict=True):
            shape = (self.batch, left, k, right, self.levels)
            np.multiply(w, z, out=buf)
            view = buf.reshape(shape)
            summed = view[:, :, 0:1].copy()
            for v in range(1, k):
                summed += view[:, :, v : v + 1]
            np.multiply(w.reshape(self.batch, left, k, right, 1), summed, out=view)
            out += buf
        return out


def _batched_dot(a: FloatArray, b: FloatArray) -> FloatArray:
    """Σ_n a[b, n, l]·b[b, n, l], shape (B, 1, L)."""
    out: FloatArray = np.einsum("bnl,bnl->bl", a, b)[:, None, :]
    return out


def solve_ridge_batch(
    weights: Sequence[FloatArray], rhs: Sequence[FloatArray], lam: float
) -> FloatArray:
    """Z = argmin Σ_i ‖A_i z − b_i‖² + λ‖z‖² for a batch of same-shaped subsets.

    ``weights[i]``: (B, *sizes_R, 1), the coefficients P(x_i = v | o) of equation group i;
    ``rhs[i]``: (B, *sizes_R with 1 at axis i, L), the right-hand sides P(t = c | o). Returns Z
    with shape (B, *sizes_R, L), i.e. (AᵀA + λI)⁻¹Aᵀb, one column per target level. Solved
    exactly by batched dense normal equations when R has at most 32 cells, otherwise by
    Jacobi-preconditioned conjugate gradients on AᵀA + λI (symmetric positive definite since
    λ > 0; the notes' push-through identity or LSQR give the same minimiser) to a relative
    residual of 1e-6. The ridge objective is then within a relative 1e-6 of its minimum; the
    components of z along null(A), where only λ curves the objective, converge slowest (they
    only move the unmeasured top-order interaction of P(S)).
    """
    batch = weights[0].shape[0]
    sizes = weights[0].shape[1:-1]
    levels = rhs[0].shape[-1]
    n = math.prod(sizes)
    g = np.zeros((batch, *sizes, levels))
    for w, b in zip(weights, rhs, strict=True):
        g += w * b
    g = g.reshape(batch, n, levels)
    if n <= _DENSE_UNKNOWNS:
        operator = _NormalOperator(weights, lam, n)
        eye = np.ascontiguousarray(np.broadcast_to(np.eye(n), (batch, n, n)))
        normal = operator(eye, np.empty_like(eye))
        try:
            solved: FloatArray = np.linalg.solve(normal, g).astype(np.float64, copy=False)
        except np.linalg.LinAlgError:
            # AᵀA + λI is singular in floating point when λ is tiny next to AᵀA (λ = 1e-9 on
            # an empty noisy table): the pseudo-inverse gives the minimum-norm least-squares
            # solution instead of failing the charged run. Post-processing only.
            solved = np.matmul(np.linalg.pinv(normal, hermitian=True), g)
        return solved.reshape(batch, *sizes, levels)
    operator = _NormalOperator(weights, lam, levels)
    inverse_diagonal = 1.0 / operator.diagonal()
    x = np.zeros_like(g)
    r = g.copy()
    z = r * inverse_diagonal
    p = z.copy()
    ap = np.empty_like(g)
    rz = _batched_dot(r, z)
    stop = (_CG_TOL**2) * _batched_dot(g, g)
    for _ in range(_CG_MAX_ITER):
        if np.all(_batched_dot(r, r) <= stop):
            break
        operator(p, ap)
        pap = _batched_dot(p, ap)
        alpha = np.divide(rz, pap, out=np.zeros_like(rz), where=pap > 0)
        x += alpha * p
        r -= alpha * ap
        np.multiply(r, inverse_diagonal, out=z)
        rz_new = _batched_dot(r, z)
        beta = np.divide(rz_new, rz, out=np.zeros_like(rz), where=rz > 0)
        p *= beta
        p += z
        rz = rz_new
    return x.reshape(batch, *sizes, levels)


# ---------------------------------------------------------------------------------------------
# The stepwise reconstruction
# ---------------------------------------------------------------------------------------------


def _binomials(p: int) -> IntArray:
    """binom[n, k] = C(n, k) for 0 ≤ n, k ≤ p (0 when k > n)."""
    table = np.zeros((p + 1, p + 2), dtype=np.int64)
    for n_ in range(p + 1):
        for k in range(n_ + 1):
            table[n_, k] = math.comb(n_, k)
    return table


def _colex_rank(combos: IntArray, binom: IntArray) -> IntArray:
    """Rank of each sorted combination (rows of ``combos``) in colexicographic order:
    Σ_k C(c_k, k + 1), a bijection onto 0 .. C(p, j) − 1."""
    k = combos.shape[1]
    ranks: IntArray = binom[combos, np.arange(1, k + 1)].sum(axis=1)
    return ranks


class _Level:
    """Every j-subset's table, stored in blocks of same-shaped tables for batched gathers.

    ``combos[rank]`` is the subset (sorted attribute indices) of colex rank ``rank``; its table
    is ``blocks[block_of[rank]][row_of[rank]]`` with one axis per attribute, in index order.
    """

    def __init__(self, sizes: Sequence[int], j: int, binom: IntArray) -> None:
        p = len(sizes)
        combos = np.array(list(itertools.combinations(range(p), j)), dtype=np.int64)
        combos = combos.reshape(-1, j)
        order = np.argsort(_colex_rank(combos, binom), kind="stable")
        self.combos: IntArray = combos[order]
        shapes = np.asarray(sizes, dtype=np.int64)[self.combos]
        unique, block_of = np.unique(shapes, axis=0, return_inverse=True)
        self.block_of: IntArray = block_of.reshape(-1).astype(np.int64)
        self.keys: list[tuple[int, ...]] = [tuple(int(v) for v in row) for row in unique]
        self.key_index = {key: b for b, key in enumerate(self.keys)}
        self.row_of: IntArray = np.zeros(len(self.combos), dtype=np.int64)
        self.blocks: list[FloatArray] = []
        for b, key in enumerate(self.keys):
            members = np.flatnonzero(self.block_of == b)
            self.row_of[members] = np.arange(members.size)
            self.blocks.append(np.zeros((members.size, *key)))

    def put(self, ranks: IntArray, tables: FloatArray) -> None:
        """Store ``tables`` (one per rank, all of one block) at ``ranks``."""
        block = int(self.block_of[ranks[0]])
        self.blocks[block][self.row_of[ranks]] = tables

    def gather(self, key: tuple[int, ...], ranks: IntArray) -> FloatArray:
        """The tables at ``ranks``, all of shape ``key``."""
        return self.blocks[self.key_index[key]][self.row_of[ranks]]


def _one_way_marginals(
    sizes: Sequence[int], tables: Mapping[tuple[int, ...], FloatArray]
) -> list[FloatArray]:
    """Each attribute's one-way distribution: the average of its marginalisations from every
    table that contains it (notes A.1.4's closure rule), clipped at 0 and normalised (uniform if
    nothing is left). Used only as the fallback conditional of empty cells."""
    sums = [np.zeros(k) for k in sizes]
    counts = [0] * len(sizes)
    for attrs, table in tables.items():
        for axis, a in enumerate(attrs):
            other = tuple(i for i in range(len(attrs)) if i != axis)
            sums[a] += table.sum(axis=other) if other else table
            counts[a] += 1
    out = []
    for k, total, count in zip(sizes, sums, counts, strict=True):
        clipped = np.maximum(total / max(count, 1), 0.0)
        mass = clipped.sum()
        out.append(clipped / mass if mass > 0 else np.full(k, 1.0 / k))
    return out


def _clip_floor(tables: FloatArray) -> FloatArray:
    """Clip each table (axis 0 is the batch) at ``FLOOR`` and renormalise it to sum 1."""
    clipped = np.maximum(tables, FLOOR)
    axes = tuple(range(1, tables.ndim))
    normalised: FloatArray = clipped / clipped.sum(axis=axes, keepdims=True)
    return normalised


def _marginals_by_size(marginals: Sequence[FloatArray]) -> dict[int, FloatArray]:
    """For each attribute size K, a (p, K) array whose row a is attribute a's one-way marginal
    (zeros for attributes of another size), for vectorised fallbacks."""
    out: dict[int, FloatArray] = {}
    for size in {m.size for m in marginals}:
        out[size] = np.stack([m if m.size == size else np.zeros(size) for m in marginals])
    return out


def _fallback(
    by_size: Mapping[int, FloatArray], attrs: IntArray, size: int, ndim: int, axis: int
) -> FloatArray:
    """The one-way marginals of ``attrs`` (one per batch row, all of ``size`` values) shaped to
    broadcast along ``axis`` of a (B, …) array with ``ndim`` dimensions."""
    shape = [1] * ndim
    shape[0] = attrs.shape[0]
    shape[axis] = size
    out: FloatArray = by_size[size][attrs].reshape(shape)
    return out


class _Piece:
    """Some same-shaped subsets of one level with the same target position, and their system
    with R's axes permuted so that their sizes are ascending (the canonical order that lets
    subsets of different size patterns share one batched solve)."""

    def __init__(
        self,
        prev: _Level,
        ranks: IntArray,
        combos: IntArray,
        ranks_prev: Callable[[IntArray], IntArray],
        tau: int,
        sizes_s: tuple[int, ...],
        by_size: Mapping[int, FloatArray],
    ) -> None:
        self.ranks = ranks
        self.tau = tau
        k_t = sizes_s[tau]
        sizes_r = sizes_s[:tau] + sizes_s[tau + 1 :]
        m = len(sizes_r)

        def sub(i: int) -> FloatArray:
            key = sizes_s[:i] + sizes_s[i + 1 :]
            return prev.gather(key, ranks_prev(np.delete(combos, i, axis=1)))

        self.p_r = sub(tau)  # (B, *sizes_r)
        r_attrs = np.delete(combos, tau, axis=1)
        weights: list[FloatArray] = []
        rhs: list[FloatArray] = []
        t_fallback = _fallback(by_size, combos[:, tau], k_t, m + 1, m)
        for k in range(m):
            i = k if k < tau else k + 1  # position of x_k in S
            fallback = _fallback(by_size, r_attrs[:, k], sizes_r[k], m + 1, 1 + k)
            weights.append(_conditional(self.p_r, 1 + k, fallback)[..., None])
            # P(O_k ∪ {t}) with t moved last: axes (B, *sizes_r without k, K_t).
            table = np.moveaxis(sub(i), 1 + (tau if tau < i else tau - 1), -1)
            cond = _conditional(table, m, t_fallback)
            rhs.append(np.expand_dims(cond[..., : k_t - 1], 1 + k))
        perm = sorted(range(m), key=lambda k: sizes_r[k])
        axes = (0, *(1 + a for a in perm), m + 1)
        self.weights = [np.transpose(weights[a], axes) for a in perm]
        self.rhs = [np.transpose(rhs[a], axes) for a in perm]
        inverse = np.argsort(perm)
        self.back = (0, *(1 + int(a) for a in inverse), m + 1)
        self.key = (tuple(sizes_r[a] for a in perm), k_t)

    def joint(self, z_canonical: FloatArray) -> FloatArray:
        """P(S) = [z, 1 − Σz]·P(R) from this piece's share of the batched solution, as
        (B, *sizes_s) tables with the axes in attribute order."""
        z = np.transpose(z_canonical, self.back)
        last = 1.0 - z.sum(axis=-1, keepdims=True)
        joint = np.concatenate([z, last], axis=-1) * self.p_r[..., None]
        out: FloatArray = np.moveaxis(joint, -1, 1 + self.tau)
        return out


def _solve_pieces(pieces: Sequence[_Piece], lam: float) -> list[FloatArray]:
    """Solve every piece's systems in one batch (they share the canonical shape)."""
    m = len(pieces[0].weights)
    if len(pieces) == 1:
        z = solve_ridge_batch(pieces[0].weights, pieces[0].rhs, lam)
        return [pieces[0].joint(z)]
    weights = [np.concatenate([piece.weights[k] for piece in pieces]) for k in range(m)]
    rhs = [np.concatenate([piece.rhs[k] for piece in pieces]) for k in range(m)]
    z = solve_ridge_batch(weights, rhs, lam)
    bounds = np.cumsum([0] + [piece.ranks.size for piece in pieces])
    return [
        piece.joint(z[lo:hi]) for piece, lo, hi in zip(pieces, bounds[:-1], bounds[1:], strict=True)
    ]


def _chunked(
    parts: Sequence[tuple[int, tuple[int, ...], IntArray]], size: int
) -> Iterator[list[tuple[int, tuple[int, ...], IntArray]]]:
    """``parts`` (target position, sizes, ranks) cut and regrouped into lists of at most
    ``size`` subsets in total."""
    pending: list[tuple[int, tuple[int, ...], IntArray]] = []
    count = 0
    for tau, sizes_s, ranks in parts:
        start = 0
        while start < ranks.size:
            take = min(size - count, ranks.size - start)
            pending.append((tau, sizes_s, ranks[start : start + take]))
            count += take
            start += take
            if count == size:
                yield pending
                pending, count = [], 0
    if pending:
        yield pending


def _prepare(table: FloatArray, clip_mid: bool) -> FloatArray:
    """A measured (or given) table as a distribution for the reconstruction."""
    as_float: FloatArray = np.asarray(table, dtype=np.float64)
    if not clip_mid:
        return as_float
    clipped: FloatArray = _clip_floor(as_float[None])[0]
    return clipped


def _final(joint: FloatArray) -> FloatArray:
    """The paper's last step: clip negatives at 0 and normalise (uniform if nothing is left)."""
    clipped = np.maximum(np.nan_to_num(joint, nan=0.0, posinf=0.0, neginf=0.0), 0.0)
    mass = float(clipped.sum())
    if not mass > 0:
        return np.full(joint.shape, 1.0 / joint.size)
    out: FloatArray = clipped / mass
    return out


def reconstruct(
    sizes: Sequence[int],
    tables: Mapping[tuple[int, ...], FloatArray],
    *,
    lam: float = 1e-3,
    clip_mid: bool = True,
    target: Literal["random", "largest"] = "random",
    rng: np.random.Generator | None = None,
    progress: Callable[[float], None] | None = None,
) -> FloatArray:
    """CIPHER's generate step (notes A.1.4/A.1.7): the full joint over attributes 0..p−1.

    ``tables`` maps every p0-subset (sorted attribute indices) to its distribution (axes in index
    order, summing to 1; with ``clip_mid=False`` it may hold negatives, as noisy tables
    normalised by their noisy totals do). For j = p0+1 … p, every j-subset S gets a target t
    (``target``; ``rng`` draws it for "random"), and P(S) = [z, 1 − Σz]·P(R) from the ridge
    solve of :func:`solve_ridge_batch`. With ``clip_mid`` every table is clipped at ``FLOOR`` and
    renormalised before it is used (a deviation the notes recommend); otherwise only the
    returned joint is corrected. Returns the joint (non-negative, summing to 1).
    ``progress(f)`` is called with the fraction of the reconstruction done.
    """
    p = len(sizes)
    orders = {len(attrs) for attrs in tables}
    if len(orders) != 1:
        raise ValueError("tables must all have the same order")
    p0 = orders.pop()
    if not 1 <= p0 <= p or set(tables) != set(itertools.combinations(range(p), p0)):
        raise ValueError("tables must hold exactly every p0-subset of the attributes, sorted")
    prepared: dict[tuple[int, ...], FloatArray] = {}
    for attrs, table in tables.items():
        if np.shape(table) != tuple(sizes[a] for a in attrs):
            raise ValueError(f"table {attrs} has shape {np.shape(table)}")
        prepared[attrs] = _prepare(table, clip_mid)
    if p0 == p:
        return _final(prepared[tuple(range(p))])
    if target == "random" and rng is None:
        raise ValueError("a random target needs rng")

    binom = _binomials(p)
    by_size = _marginals_by_size(_one_way_marginals(sizes, prepared))
    level = _Level(sizes, p0, binom)
    for rank, combo in enumerate(level.combos):
        level.put(np.array([rank]), prepared[tuple(int(a) for a in combo)][None])

    def ranks_prev(combos: IntArray) -> IntArray:
        return _colex_rank(combos, binom)

    total = max(reconstructed_cells(sizes, p0), 1)
    done = 0
    size_array = np.asarray(sizes, dtype=np.int64)
    for j in range(p0 + 1, p + 1):
        nxt = _Level(sizes, j, binom)
        if target == "random":
            assert rng is not None
            taus = rng.integers(0, j, size=len(nxt.combos))
        else:
            taus = np.argmax(size_array[nxt.combos], axis=1)
        groups = nxt.block_of * j + taus
        # Subsets sharing (sorted sizes of R, K_t) are solved together, whatever their pattern.
        batches: dict[tuple[tuple[int, ...], int], list[tuple[int, tuple[int, ...], IntArray]]]
        batches = {}
        for group in np.unique(groups):
            sizes_s = nxt.keys[int(group) // j]
            tau = int(group) % j
            key = (tuple(sorted(sizes_s[:tau] + sizes_s[tau + 1 :])), sizes_s[tau])
            batches.setdefault(key, []).append((tau, sizes_s, np.flatnonzero(groups == group)))
        for (sizes_r, k_t), parts in batches.items():
            cells_r = math.prod(sizes_r)
            cells_s = cells_r * k_t
            per_subset = max(cells_s * j, cells_r * cells_r if cells_r <= _DENSE_UNKNOWNS else 0)
            for chunk in _chunked(parts, max(1, _CHUNK_ELEMENTS // per_subset)):
                pieces = [
                    _Piece(level, ranks, nxt.combos[ranks], ranks_prev, tau, sizes_s, by_size)
                    for tau, sizes_s, ranks in chunk
                ]
                for piece, out in zip(pieces, _solve_pieces(pieces, lam), strict=True):
                    if clip_mid:
                        out = _clip_floor(out)
                    else:
                        out = np.nan_to_num(out, nan=0.0, posinf=0.0, neginf=0.0)
                    nxt.put(piece.ranks, out)
                    done += piece.ranks.size * cells_s
                if progress is not None:
                    progress(min(done / total, 1.0))
        level = nxt
    return _final(level.blocks[0][0])


# ---------------------------------------------------------------------------------------------
# The mechanism
# ---------------------------------------------------------------------------------------------


class CIPHERMechanism(Mechanism):
    """CIPHER (Eugenio & Liu, SAND2021-0088 C / arXiv:1812.05671): measure every ``order``-way
    marginal, rebuild the full joint by stepwise l2-regularised linear solves, sample rows.

    Per privacy unit (at most k rows after truncation; ``run(..., contribution_bound=k)``): the
    run below is made at the row-level budget ρ/k² and each release is stated with sensitivity
    k·Δ and ρ k²·ρ_i, σ² unchanged, so the charges add up to ρ per unit (engine/privacy_unit/
    group.py: k rows move a statistic of per-row sensitivity Δ by at most kΔ; for a count k is
    attained, all of a unit's rows in one cell, so no tighter bound holds).

    Privacy (add/remove one row, ρ-zCDP). Q = every ``order``-way marginal of the attributes
    with more than one value (the whole table over them if there are at most ``order``; the
    one-cell table of the first attribute if there are none). Q is fixed by the public domain
    and the params, so choosing it costs nothing. ρ is split exactly and equally over Q
    (``split_rho``); each table is released by ``measure_marginal``: L2 sensitivity 1 (one row
    moves one cell by 1), discrete Gaussian noise with σ² = |Q|/(2ρ) from the CSPRNG, i.e.
    ρ/|Q|-zCDP (Canonne, Kamath, Steinke 2020, Theorem 14). Sequential composition (Bun &
    Steinke 2016, Lemma 2.3) gives exactly ρ. Everything after is post-processing of the noisy
    tables: each is normalised by its own noisy total (never the private n), the reconstruction,
    the target choice (seeded ``rng``, independent of the data), the row count (the
    precision-weighted noisy total) and the sampling.

    Deviations from the paper, all in the generate step (post-processing):
    * **Noise**: discrete Gaussian (zCDP) instead of Laplace; the paper allows any ε-DP
      mechanism. The Laplace variant is not offered: its ε²/2 zCDP charge would need a new charge
      type in the ledger's result, and discrete Gaussian is the better fit for ρ anyway.
    * **Q** is all ``order``-way marginals (the paper lets a domain expert choose Q; no selection
      here, so no budget for it). m = 1 release.
    * **clip_mid** (default on; notes A.1.6/A.8.8): intermediate tables are clipped at a
      1e-9 floor and renormalised, so conditionals never divide by empty or negative mass.
      The paper corrects negatives only at the end (``clip_mid=False``), which the notes'
      toy runs show blowing up at small n·ε.
    * **Empty conditioning cells** (only without clip_mid: mass ≤ 1e-12, including negative)
      take the variable's one-way marginal (averaged from Q) as their conditional.
    * The paper's loop index, "Diag{A_k}", and Laplace-scale typos are resolved as in notes
      A.8.1–A.8.5 (every non-target variable gives an equation group; groups are stacked; the
      system is block-diagonal over target levels); the last target level is 1 − Σz (A.8.9).
    * ``target="largest"`` is an optional deterministic choice (A.8.11); the paper draws it.
    * Rows: the noisy total by default, by controlled rounding (``synthesis="round"``) or
      i.i.d. draws (``"sample"``).
    * **Refusal**: the full joint and every subset above the measured order are materialised,
      so domains above ``max_cells`` or ``max_reconstructed_cells`` are refused up front
      (:class:`DomainRefused`) from the declared sizes only.
    """

    name = "cipher"
    description = (
        "CIPHER (Eugenio & Liu): noisy order-way marginals, then the full joint distribution by "
        "stepwise ridge-regularised linear solves; refuses domains whose full joint is too large."
    )
    Params = CIPHERParams
    resamplable = True
    milestones = (
        Milestone("measure_marginals", 0.0),
        Milestone("reconstruct", 0.1),
        Milestone("sample", 0.9),
    )

    def check_domain(self, domain: Domain, params: BaseModel) -> None:
        """Refuse a domain whose full joint or reconstruction exceeds the caps (public sizes)."""
        if not isinstance(params, CIPHERParams):
            raise TypeError("params must be CIPHERParams")
        cells = domain.cells()
        if cells > params.max_cells:
            raise DomainRefused(
                f"CIPHER builds the full joint distribution: this domain has {cells} cells, "
                f"above max_cells = {params.max_cells} (raise max_cells or choose another method)"
            )
        work = reconstructed_cells(domain.sizes, params.order)
        if work > params.max_reconstructed_cells:
            raise DomainRefused(
                f"CIPHER solves for every attribute subset above order {params.order}: this "
                f"domain needs {work} reconstructed cells, above max_reconstructed_cells = "
                f"{params.max_reconstructed_cells} (raise max_reconstructed_cells, raise order "
                "or choose another method)"
            )

    def smallest_release_rho(self, domain: Domain, params: BaseModel, rho: Fraction) -> Fraction:
        """ρ split equally over the measured ``order``-way marginals."""
        if not isinstance(params, CIPHERParams):
            raise TypeError("params must be CIPHERParams")
        kept = sum(1 for size in domain.sizes if size > 1)
        queries = math.comb(kept, params.order) if 0 < params.order < kept else 1
        return rho / queries

    def estimate_resources(self, domain: Domain, params: BaseModel, rows: int) -> ResourceEstimate:
        """The full joint (a few float64 copies: solve, correction, sampling) and every
        reconstructed subset table held at once; each reconstructed cell solved once."""
        if not isinstance(params, CIPHERParams):
            raise TypeError("params must be CIPHERParams")
        joint = domain.cells()
        work = reconstructed_cells(domain.sizes, params.order)
        return resource_estimate(
            domain, rows, table_cells=4 * joint + work, extra_work=_CG_MAX_ITER * work
        )

    def first_noise(
        self, domain: Domain, params: BaseModel, rho: Fraction
    ) -> tuple[NoisePreview, ...]:
        """Every marginal CIPHER measures (:func:`measured_queries`), at equal parts of ρ."""
        if not isinstance(params, CIPHERParams):
            raise TypeError("params must be CIPHERParams")
        kept, queries = measured_queries(domain, params)
        shares = split_rho(rho, [1] * len(queries))
        names = [domain.attributes[i] for i in kept] if kept else [domain.attributes[0]]
        return tuple(
            marginal_preview([names[i] for i in query], share)
            for query, share in zip(queries, shares, strict=True)
        )

    def _synthesize_counts(
        self,
        data: CountingEngine,
        rho: Fraction,
        params: BaseModel,
        *,
        rng: np.random.Generator,
        rows: int | None,
        max_rows: int | None,
        progress: ProgressReporter,
        noise_source: random.Random | None,
    ) -> SynthesisResult:
        # Reads the data only through measure_marginal's counts: runs on any counting engine.
        assert isinstance(params, CIPHERParams)
        domain = data.domain
        kept, queries = measured_queries(domain, params)
        names = [domain.attributes[i] for i in kept]
        kept_sizes = [domain.sizes[i] for i in kept]

        progress.milestone("measure_marginals")
        progress(0.0, "measure")
        measurements: list[Measurement] = []
        shares = split_rho(rho, [1] * len(queries))
        for q, (query, share) in enumerate(zip(queries, shares, strict=True)):
            attrs = [names[i] for i in query] if kept else [domain.attributes[0]]
            measurements.append(measure_marginal(data, attrs, share, noise_source))
            progress(0.1 * (q + 1) / len(queries), "measure")
        total = estimate_total(tuple(measurements))

        progress.milestone("reconstruct")
        progress(0.1, "reconstruct")
        if kept:
            tables: dict[tuple[int, ...], FloatArray] = {}
            for query, measurement in zip(queries, measurements, strict=True):
                counts = measurement.noisy_counts.astype(np.float64)
                if params.clip_mid:
                    counts = np.maximum(counts, 0.0)
                    mass = float(counts.sum())
                    tables[query] = counts / mass if mass > 0 else np.ones_like(counts)
                else:  # the paper: normalise by the noisy total, negatives and all
                    tables[query] = counts / max(float(counts.sum()), 1.0)
            joint = reconstruct(
                kept_sizes,
                tables,
                lam=params.lam,
                clip_mid=params.clip_mid,
                target=params.target,
                rng=rng,
                progress=lambda f: progress(0.1 + 0.8 * f, "reconstruct"),
            )
        else:
            joint = np.ones(1)
        progress(0.9, "reconstruct")

        progress.milestone("sample")
        progress(0.9, "sample")
        n_out = resolve_rows(rows, total, max_rows)
        model = FittedModel(
            method=self.name,
            domain=domain,
            estimated_total=total,
            body=JointModel(tuple(names) if kept else (), joint, params.synthesis),
        )
        codes = model.sample(n_out, rng)
        progress(1.0, "sample")
        return SynthesisResult(
            codes=codes,
            measurements=tuple(measurements),
            rho_used=sum((m.rho for m in measurements), Fraction(0)),
            estimated_total=total,
            model=model,
        )
