"""Kernels of the ops whose output shape depends on the input values: NonZero, Compress,
Unique, NonMaxSuppression.

Their caller (a *dynamic step*, ``jitort/dynamic_ops.py``) cannot plan the output ahead, so
each op runs in two phases: a kernel that counts (or fills an upper-bound buffer and returns
the count), then a fill into an array allocated for that count.

Data is moved as bytes: :func:`take_axis` copies slices of a ``(outer, n, inner * itemsize)``
uint8 view, so one compiled kernel serves every element type (float16 / bfloat16 included).
Comparisons run on the element type itself; 16-bit floats are widened to float32 first
(:func:`half_to_f32`, exact).
"""
import numpy as np
from numba import njit

from .halfprec import bf16_to_f32, f16_to_f32

_FLAGS = dict(cache=True, error_model='numpy')


# --- NonZero -----------------------------------------------------------------------------------

@njit(**_FLAGS)
def count_nonzero(x):
    """The number of elements of ``x`` (flat) that are not zero."""
    n = 0
    for i in range(x.size):
        if x[i] != 0:
            n += 1
    return n


@njit(**_FLAGS)
def nonzero_fill(x, shape, out):
    """out (rank, nnz) int64 = the indices of the non-zero elements of ``x`` (flat, of
    ``shape``), in row-major order: column k holds the k-th non-zero element's index."""
    rank = shape.size
    k = 0
    for i in range(x.size):
        if x[i] != 0:
            r = i
            for d in range(rank - 1, -1, -1):
                out[d, k] = r % shape[d]
                r //= shape[d]
            k += 1


@njit(**_FLAGS)
def half_to_f32(bits, bf16, out):
    """out (flat float32) = the float16 (``bf16`` False) or bfloat16 words ``bits`` widened;
    exact, so comparisons (zero, order, NaN) are those of the 16-bit values."""
    if bf16:
        for i in range(bits.size):
            out[i] = bf16_to_f32(bits[i])
    else:
        for i in range(bits.size):
            out[i] = f16_to_f32(bits[i])


# --- slices along an axis (Compress, Unique's Y) ----------------------------------------------

@njit(**_FLAGS)
def true_positions(cond, n):
    """The positions of the true entries of ``cond`` (bool, 1-D) among its first ``n``, as
    int64; -1 as the only entry when an entry at ``n`` or beyond is true (out of range)."""
    k = 0
    for i in range(cond.size):
        if cond[i]:
            if i >= n:
                return np.full(1, -1, np.int64)
            k += 1
    idx = np.empty(k, np.int64)
    k = 0
    for i in range(min(cond.size, n)):
        if cond[i]:
            idx[k] = i
            k += 1
    return idx


@njit(**_FLAGS)
def take_axis(x, idx, out):
    """out (outer, len(idx), w) = x (outer, n, w)[:, idx, :], bytes (uint8)."""
    outer, _, w = x.shape
    for o in range(outer):
        for k in range(idx.size):
            src = idx[k]
            for j in range(w):
                out[o, k, j] = x[o, src, j]


# --- Unique ------------------------------------------------------------------------------------

@njit(**_FLAGS)
def axis_rows(x, keys):
    """keys (n, outer * inner) = x (outer, n, inner) with the axis moved first: row i is the
    slice x[:, i, :] in row-major order (what Unique compares along an axis)."""
    outer, n, inner = x.shape
    for i in range(n):
        for o in range(outer):
            for j in range(inner):
                keys[i, o * inner + j] = x[o, i, j]


@njit(inline='always')
def _elem_less(a, b):
    """a < b with NaN after every number (numpy's sort order)."""
    return a < b or (b != b and a == a)


@njit(**_FLAGS)
def _row_less(keys, a, b):
    """Row a before row b: lexicographic, NaN after numbers."""
    for j in range(keys.shape[1]):
        u = keys[a, j]
        v = keys[b, j]
        if _elem_less(u, v):
            return True
        if _elem_less(v, u):
            return False
    return False


@njit(**_FLAGS)
def _row_equal(keys, a, b, nan_equal):
    for j in range(keys.shape[1]):
        u = keys[a, j]
        v = keys[b, j]
        if not (u == v or (nan_equal and u != u and v != v)):
            return False
    return True


@njit(**_FLAGS)
def stable_row_order(keys):
    """The permutation that sorts the rows of ``keys`` (n, m), stably (equal rows keep their
    order): a bottom-up merge sort."""
    n = keys.shape[0]
    perm = np.arange(n)
    tmp = np.empty(n, np.int64)
    width = 1
    while width < n:
        for lo in range(0, n, 2 * width):
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            i, j, k = lo, mid, lo
            while i < mid and j < hi:
                if _row_less(keys, perm[j], perm[i]):  # strictly before: stability
                    tmp[k] = perm[j]
                    j += 1
                else:
                    tmp[k] = perm[i]
                    i += 1
                k += 1
            while i < mid:
                tmp[k] = perm[i]
                i += 1
                k += 1
            while j < hi:
                tmp[k] = perm[j]
                j += 1
                k += 1
        perm, tmp = tmp, perm
        width *= 2
    return perm


@njit(**_FLAGS)
def unique_rows(keys, nan_equal, sort):
    """Unique rows of ``keys`` (n, m) as numpy.unique / onnx's Unique: returns
    ``(indices, inverse, counts)``, int64: the first occurrence of each distinct row, each row's
    position among the distinct rows, and how many times each occurs. ``sort``: distinct rows in
    ascending (lexicographic, NaN last) order, else in order of first occurrence. ``nan_equal``:
    NaNs compare equal (numpy's unique without an axis), else a row holding a NaN is unique."""
    n = keys.shape[0]
    perm = stable_row_order(keys)
    first = np.empty(n, np.int64)
    counts = np.zeros(n, np.int64)
    inverse = np.empty(n, np.int64)
    g = -1
    for t in range(n):
        r = perm[t]
        if g < 0 or not _row_equal(keys, perm[t - 1], r, nan_equal):
            g += 1
            first[g] = r  # stable: the group's first row in sorted order is its first occurrence
        counts[g] += 1
        inverse[r] = g
    ng = g + 1
    first = first[:ng].copy()
    counts = counts[:ng].copy()
    if not sort:
        order = np.argsort(first)  # the first occurrences are distinct
        rank = np.empty(ng, np.int64)
        for k in range(ng):
            rank[order[k]] = k
        first = first[order]
        counts = counts[order]
        for i in range(n):
            inverse[i] = rank[inverse[i]]
    return first, inverse, counts


# --- NonMaxSuppression -------------------------------------------------------------------------

@njit(**_FLAGS)
def _corners(boxes, center):
    """(N, 4) [x_min, x_max, y_min, y_max] of boxes (N, 4), as onnx's reference computes them:
    [y1, x1, y2, x2] in either corner order, or [x_center, y_center, width, height]."""
    n = boxes.shape[0]
    c = np.empty((n, 4), boxes.dtype)
    half = np.float32(0.5)  # exact: x * 0.5 == x / 2, kept in float32 for float32 boxes
    for i in range(n):
        if center:
            hw = boxes[i, 2] * half
            hh = boxes[i, 3] * half
            c[i, 0] = boxes[i, 0] - hw
            c[i, 1] = boxes[i, 0] + hw
            c[i, 2] = boxes[i, 1] - hh
            c[i, 3] = boxes[i, 1] + hh
        else:
            c[i, 0] = min(boxes[i, 1], boxes[i, 3])
            c[i, 1] = max(boxes[i, 1], boxes[i, 3])
            c[i, 2] = min(boxes[i, 0], boxes[i, 2])
            c[i, 3] = max(boxes[i, 0], boxes[i, 2])
    return c


@njit(**_FLAGS)
def _suppresses(c, a, b, iou_threshold):
    """Whether boxes a and b of corners ``c`` overlap by an IoU above the threshold (strictly),
    in the boxes' precision, with the reference's degenerate-box rules."""
    ix0 = max(c[a, 0], c[b, 0])
    ix1 = min(c[a, 1], c[b, 1])
    if ix1 <= ix0:
        return False
    iy0 = max(c[a, 2], c[b, 2])
    iy1 = min(c[a, 3], c[b, 3])
    if iy1 <= iy0:
        return False
    inter = (ix1 - ix0) * (iy1 - iy0)
    if inter <= 0:
        return False
    area_a = (c[a, 1] - c[a, 0]) * (c[a, 3] - c[a, 2])
    area_b = (c[b, 1] - c[b, 0]) * (c[b, 3] - c[b, 2])
    union = area_a + area_b - inter
    if area_a <= 0 or area_b <= 0 or union <= 0:
        return False
    return inter / union > iou_threshold


@njit(**_FLAGS)
def nms(boxes, scores, max_out, iou_threshold, score_threshold, use_score, center, out):
    """Greedy non-maximum suppression (onnx's NonMaxSuppression). boxes (B, N, 4), scores
    (B, C, N), both float32; ``max_out`` boxes at most per batch and class; boxes scoring
    above ``score_threshold`` (strictly, when ``use_score``) are visited by score, highest
    first (ties: lower box index first), and kept unless one kept before overlaps it by an IoU
    above ``iou_threshold``. Writes [batch, class, box] rows into ``out`` (B*C*min(N, max_out),
    3) in (batch, class, selection) order and returns how many."""
    nb, nc, nbox = scores.shape
    keep = np.empty(min(nbox, max_out), np.int64)
    rows = 0
    for b in range(nb):
        c = _corners(boxes[b], center)
        for k in range(nc):
            s = scores[b, k]
            cand = np.empty(nbox, np.int64)
            m = 0
            for i in range(nbox):
                if not use_score or s[i] > score_threshold:
                    cand[m] = i
                    m += 1
            neg = np.empty(m, s.dtype)
            for t in range(m):
                neg[t] = -s[cand[t]]
            order = np.argsort(neg, kind='mergesort')  # stable: equal scores by box index
            kept = 0
            for t in range(m):
                if kept >= max_out:
                    break
                i = cand[order[t]]
                ok = True
                for q in range(kept):
                    if _suppresses(c, i, keep[q], iou_threshold):
                        ok = False
                        break
                if ok:
                    keep[kept] = i
                    kept += 1
                    out[rows, 0] = b
                    out[rows, 1] = k
                    out[rows, 2] = i
                    rows += 1
    return rows
