"""CPU kernels: ONNX ``Attention`` (opsets 23-25) and ``RotaryEmbedding`` (23). Imports nothing
from jitort.

Attention runs one task per (batch, query head): ``S = scale * Q_h @ K_g^T`` by BLAS into a
per-worker scratch block (the query head's key/value head ``g = h // (Hq // Hkv)``: grouped-query
attention without repeating K and V), softcap, the additive bias (mask, causal frontier, sliding
window, per-batch key padding: computed per element, never materialized), a softmax per row
(fully masked rows give zeros), then ``Y_h = P @ V_g`` by BLAS. Q, K, V and Y are flat arrays
addressed by (batch, head, row) strides, so the 3-D ``(B, S, H * D)`` layout needs no transpose.
A decoding step of grouped-query attention (one query row, Hq > Hkv, the same keys visible to
every head) runs one task per (batch, key/value head) instead: the group's Hq / Hkv query heads
are the rows of one block (their row stride is the head stride), so K_g and V_g are read once
per group, by gemms of Hq / Hkv rows rather than matrix-vector products.
"""
import numpy as np
from numba import njit, prange

from .gemm import num_threads, ogemm, scratch_workers
from .mathfn import fexpneg, ftanh, wide_vectors
from .softmax import row_max2

_FM = {'reassoc', 'contract', 'arcp'}
#: query rows per block when the keys a row sees vary by row (``_task``): bigger blocks make
#: fewer, larger gemms, smaller ones skip more masked keys
_ROW_BLOCK = 64


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _visible(i, tk, offset, left, right, causal, kv_valid):
    """[lo, hi): the keys query row i may see -- the causal frontier, the sliding window and the
    key padding are all intervals (a query at absolute position p = i + offset)."""
    p = i + offset
    lo, hi = 0, min(tk, kv_valid)
    if causal:
        hi = min(hi, p + 1)
    if left >= 0:
        lo = max(lo, p - left)
    if right >= 0:
        hi = min(hi, p + right + 1)
    return lo, max(lo, hi)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _task(t, q, k, v, mask, y, qk, s, hq, hkv, sq, tk, d, dv, qs, ks, vs, ys, has_mask,
          mask_bool, scale, softcap, causal, offset, left, right, nonpad, has_nonpad, mode):
    """One (batch, query head) task ``t``; ``s`` is this worker's (sq, tk) scratch. When the
    keys a query row sees vary by row (causal, sliding window, key padding) and no score
    output is wanted, rows go in blocks of _ROW_BLOCK whose scores and ``P @ V`` cover only
    the keys some row of the block sees (a causal 128 x 128 head: 3/4 of the work)."""
    wide_vectors()
    b = t // hq
    h = t - b * hq
    g = h // (hq // hkv)
    kv_valid = tk
    off = offset
    if has_nonpad:
        kv_valid = min(tk, nonpad[b])
        if causal or left >= 0 or right >= 0:
            off = nonpad[b] - sq
    ranged = (causal or left >= 0 or right >= 0 or has_nonpad) and qk.size == 0
    rb = _ROW_BLOCK if ranged else max(1, sq)
    for i0 in range(0, sq, rb):
        i1 = min(sq, i0 + rb)
        # the block's keys: each row's [lo, hi) moves right with the row (never left)
        lo_b, hi_b = 0, tk
        if ranged:
            lo_b = _visible(i0, tk, off, left, right, causal, kv_valid)[0]
            hi_b = max(lo_b, _visible(i1 - 1, tk, off, left, right, causal, kv_valid)[1])
        _block(i0, i1, lo_b, hi_b, b, h, g, q, k, v, mask, y, qk, s, tk, d, dv, qs, ks, vs,
               ys, has_mask, mask_bool, scale, softcap, causal, off, left, right, kv_valid,
               mode)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _block(i0, i1, lo_b, hi_b, b, h, g, q, k, v, mask, y, qk, s, tk, d, dv, qs, ks, vs, ys,
           has_mask, mask_bool, scale, softcap, causal, off, left, right, kv_valid, mode):
    """Query rows [i0, i1) of a ``_task`` (batch b, query head h, key/value head g) against
    keys [lo_b, hi_b) (every key a row of the block sees): their scores, bias and softmax in
    s's rows (the other columns set to -inf and then 0), then their output rows."""
    dt = s.dtype.type
    neg = dt(-np.inf)
    mb = b if mask.shape[0] > 1 else 0
    mh = h if mask.shape[1] > 1 else 0
    mt = mask.shape[3]
    want_qk = qk.size > 0
    nk = hi_b - lo_b
    if nk > 0:
        ogemm(0, 1, i1 - i0, nk, d, scale, q, b * qs[0] + h * qs[1] + i0 * qs[2], qs[2],
              k, b * ks[0] + g * ks[1] + lo_b * ks[2], ks[2], 0.0, s, i0 * tk + lo_b, tk)
    for i in range(i0, i1):
        mi = i if mask.shape[2] > 1 else 0
        if softcap > 0:
            for j in range(lo_b, hi_b):
                s[i, j] = dt(softcap) * ftanh(s[i, j] / dt(softcap))
        if mode == 1 and want_qk:
            for j in range(tk):
                qk[b, h, i, j] = s[i, j]
        lo, hi = _visible(i, tk, off, left, right, causal, kv_valid)
        # (columns as lo + an unsigned offset: a signed index not provably >= 0 keeps Numba's
        # negative-index wraparound and the loop scalar, and a row slice costs ~100 ns a row)
        u0 = np.uint64(lo)
        if has_mask:
            hi2 = min(hi, mt)  # a mask shorter than the keys: the rest is masked
            if hi2 < hi:
                hi = max(lo, hi2)
            if mask_bool:
                for j in range(hi - lo):
                    if not mask[mb, mh, mi, u0 + np.uint64(j)]:
                        s[i, u0 + np.uint64(j)] = neg
            else:
                for j in range(hi - lo):
                    s[i, u0 + np.uint64(j)] += dt(mask[mb, mh, mi, u0 + np.uint64(j)])
        for j in range(lo):
            s[i, j] = neg
        for j in range(hi - lo, tk - lo):
            s[i, u0 + np.uint64(j)] = neg
        if mode == 2 and want_qk:
            for j in range(tk):
                qk[b, h, i, j] = s[i, j]
        # a row whose bias is -inf everywhere has no visible key: zeros (the spec's convention)
        visible = hi > lo
        if visible and has_mask:
            visible = False
            for j in range(hi - lo):
                mv = mask[mb, mh, mi, u0 + np.uint64(j)]
                if (mask_bool and mv) or (not mask_bool and mv != neg):
                    visible = True
                    break
        if not visible:
            for j in range(tk):
                s[i, j] = 0.0
        else:
            m = row_max2(s, i)
            tot = dt(0.0)
            for j in range(hi - lo):
                e = fexpneg(s[i, u0 + np.uint64(j)] - m)
                s[i, u0 + np.uint64(j)] = e
                tot += e
            inv = dt(1.0) / tot
            for j in range(hi - lo):
                s[i, u0 + np.uint64(j)] *= inv
            for j in range(lo):
                s[i, j] = 0.0
            for j in range(hi - lo, tk - lo):
                s[i, u0 + np.uint64(j)] = 0.0
        if mode == 3 and want_qk:
            for j in range(tk):
                qk[b, h, i, j] = s[i, j]
    if nk == 0:   # no key seen by any row of the block: zeros
        for i in range(i0, i1):
            for j in range(dv):
                y[b * ys[0] + h * ys[1] + i * ys[2] + j] = 0.0
        return
    ogemm(0, 0, i1 - i0, dv, nk, 1.0, s, i0 * tk + lo_b, tk, v,
          b * vs[0] + g * vs[1] + lo_b * vs[2], vs[2], 0.0, y,
          b * ys[0] + h * ys[1] + i0 * ys[2], ys[2])


@njit(cache=True, parallel=True, error_model='numpy', fastmath=_FM)
def _attention_par(nw, q, k, v, mask, y, qk, scr, hq, hkv, sq, tk, d, dv, qs, ks, vs, ys,
                   has_mask, mask_bool, scale, softcap, causal, offset, left, right, nonpad,
                   has_nonpad, mode, ntask):
    for w in prange(nw):
        s = scr[w * sq * tk:(w + 1) * sq * tk].reshape((sq, tk))
        for t in range(w, ntask, nw):
            _task(t, q, k, v, mask, y, qk, s, hq, hkv, sq, tk, d, dv, qs, ks, vs, ys, has_mask,
                  mask_bool, scale, softcap, causal, offset, left, right, nonpad, has_nonpad,
                  mode)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def attention(q, k, v, mask, y, qk, scr, b, hq, hkv, sq, tk, d, dv, qs, ks, vs, ys, has_mask,
              mask_bool, scale, softcap, causal, offset, left, right, nonpad, has_nonpad, mode):
    """Y = softmax(softcap(scale * Q K^T) + bias) V over flat arrays.

    q, k, v, y: flat; qs/ks/vs/ys: (batch, head, row) strides in elements (the last axis is
    contiguous). mask: 4-D (Mb, Mh, Mq, Mt) bool or float, each of the first three 1 or full;
    keys j >= Mt are masked. qk: (B, Hq, sq, tk) output of ``mode`` 0-3 (``qk.size == 0``: not
    wanted; mode 0 is written by the caller's separate pass, see ``qk_scores``). scr: scratch of
    at least sq * tk elements per worker. nonpad: int64 (B,) valid key counts (has_nonpad).
    """
    ntask = b * hq
    if ntask == 0 or sq == 0 or dv == 0:
        return
    if nonpad.size and has_nonpad:
        for i in range(b):
            if nonpad[i] < 0:
                raise ValueError("Attention: nonpad_kv_seqlen must not be negative")
    r = hq // hkv
    if (sq == 1 and r > 1 and qk.size == 0 and not causal and left < 0 and right < 0
            and not has_nonpad and mask.shape[1] == 1 and scr.size >= r * tk):
        _grouped_decode(q, k, v, mask, y, scr, b, hq, hkv, tk, d, dv, qs, ks, vs, ys, has_mask,
                        mask_bool, scale, softcap, offset)
        return
    per = max(1, sq * tk)
    nw = max(1, min(num_threads(), ntask, scr.size // per))
    if nw == 1 or 2.0 * sq * tk * (d + dv) * ntask < 2e5:
        s = scr[:sq * tk].reshape((sq, tk))
        for t in range(ntask):
            _task(t, q, k, v, mask, y, qk, s, hq, hkv, sq, tk, d, dv, qs, ks, vs, ys, has_mask,
                  mask_bool, scale, softcap, causal, offset, left, right, nonpad, has_nonpad,
                  mode)
    else:
        _attention_par(nw, q, k, v, mask, y, qk, scr, hq, hkv, sq, tk, d, dv, qs, ks, vs, ys,
                       has_mask, mask_bool, scale, softcap, causal, offset, left, right, nonpad,
                       has_nonpad, mode, ntask)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _group_task(t, q, k, v, mask, y, s, hq, hkv, tk, d, dv, qs, ks, vs, ys, has_mask, mask_bool,
                scale, softcap, offset):
    """Task t = (batch, key/value head g) of ``_grouped_decode``: the group's query heads
    h0 .. h0 + r - 1 as rows 0 .. r - 1 of one block (row stride = head stride)."""
    r = hq // hkv
    b = t // hkv
    g = t - b * hkv
    _block(0, r, 0, tk, b, g * r, g, q, k, v, mask, y, np.empty((0, 1, 1, 1), s.dtype), s, tk,
           d, dv, (qs[0], qs[1], qs[1]), ks, vs, (ys[0], ys[1], ys[1]), has_mask, mask_bool,
           scale, softcap, False, offset, -1, -1, tk, 0)


@njit(cache=True, parallel=True, error_model='numpy', fastmath=_FM)
def _grouped_par(nw, q, k, v, mask, y, scr, hq, hkv, tk, d, dv, qs, ks, vs, ys, has_mask,
                 mask_bool, scale, softcap, offset, ntask):
    r = hq // hkv
    for w in prange(nw):
        s = scr[w * r * tk:(w + 1) * r * tk].reshape((r, tk))
        for t in range(w, ntask, nw):
            _group_task(t, q, k, v, mask, y, s, hq, hkv, tk, d, dv, qs, ks, vs, ys, has_mask,
                        mask_bool, scale, softcap, offset)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _grouped_decode(q, k, v, mask, y, scr, b, hq, hkv, tk, d, dv, qs, ks, vs, ys, has_mask,
                    mask_bool, scale, softcap, offset):
    """One query row per head, Hq / Hkv heads per key/value head, every head seeing the same
    keys (no causal frontier, window or key padding; a mask without a head axis): one task per
    (batch, key/value head), its query heads the rows of one ``_block``."""
    r = hq // hkv
    ntask = b * hkv
    nw = max(1, min(num_threads(), ntask, scr.size // (r * tk)))
    if nw == 1 or 2.0 * r * tk * (d + dv) * ntask < 2e5:
        s = scr[:r * tk].reshape((r, tk))
        for t in range(ntask):
            _group_task(t, q, k, v, mask, y, s, hq, hkv, tk, d, dv, qs, ks, vs, ys, has_mask,
                        mask_bool, scale, softcap, offset)
    else:
        _grouped_par(nw, q, k, v, mask, y, scr, hq, hkv, tk, d, dv, qs, ks, vs, ys, has_mask,
                     mask_bool, scale, softcap, offset, ntask)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def qk_scores(q, k, qk, hq, hkv, d, qs, ks, scale):
    """qk (B, Hq, sq, tk) = scale * Q K^T (Attention's qk_matmul_output, mode 0)."""
    b, _, sq, tk = qk.shape
    if sq == 0 or tk == 0:
        return
    flat = qk.reshape(qk.size)
    for t in range(b * hq):
        bb = t // hq
        h = t - bb * hq
        g = h // (hq // hkv)
        ogemm(0, 1, sq, tk, d, scale, q, bb * qs[0] + h * qs[1], qs[2],
              k, bb * ks[0] + g * ks[1], ks[2], 0.0, flat, t * sq * tk, tk)


@njit(cache=True, error_model='numpy')
def concat_cache(past, x, xs, out):
    """out (B, H, P + S, D) = concat(past (B, H, P, D), X) over the sequence; X flat with
    (batch, head, row) strides xs (3-D or 4-D layout)."""
    bsz, nh, tot, dd = out.shape
    p = past.shape[2]
    for b in range(bsz):
        for h in range(nh):
            for i in range(p):
                for j in range(dd):
                    out[b, h, i, j] = past[b, h, i, j]
            base = b * xs[0] + h * xs[1]
            for i in range(tot - p):
                r = base + i * xs[2]
                for j in range(dd):
                    out[b, h, p + i, j] = x[r + j]


@njit(cache=True, error_model='numpy', fastmath=_FM)
def rotary(x, cos, sin, pos, y, has_pos, interleaved, rot):
    """ONNX RotaryEmbedding on x (B, S, H, D): 3-D inputs are viewed so; a 4-D (B, H, S, D)
    input is passed as (B * H, S, 1, D) rows with positions (B * H, S) made per row, so it
    is read in place.

    cos/sin: (P, rot/2) indexed by pos (B, S) when has_pos, else (B, S, rot/2). The first
    ``rot`` features of each head rotate, the rest pass through."""
    bsz, sl, nh, dd = x.shape
    half = rot // 2
    npos = cos.shape[0]
    for b in range(bsz):
        for s_ in range(sl):
            if has_pos:
                p = pos[b, s_]
                if p < 0 or p >= npos:
                    raise IndexError("RotaryEmbedding: position id out of the cache's range")
            for h in range(nh):
                for j in range(half):
                    if has_pos:
                        c = cos[p, j]
                        sn = sin[p, j]
                    else:
                        c = cos[b * sl + s_, j]
                        sn = sin[b * sl + s_, j]
                    if interleaved:
                        a0 = x[b, s_, h, 2 * j]
                        a1 = x[b, s_, h, 2 * j + 1]
                        y[b, s_, h, 2 * j] = a0 * c - a1 * sn
                        y[b, s_, h, 2 * j + 1] = a0 * sn + a1 * c
                    else:
                        a0 = x[b, s_, h, j]
                        a1 = x[b, s_, h, j + half]
                        y[b, s_, h, j] = a0 * c - a1 * sn
                        y[b, s_, h, j + half] = a0 * sn + a1 * c
                for j in range(rot, dd):
                    y[b, s_, h, j] = x[b, s_, h, j]


def attention_scratch_elems(sq, tk, ntask, threads, group=1):
    """Scratch elements ``attention`` uses: one (sq, tk) block per worker, (group, tk) for a
    single query row of grouped-query attention (``group`` = Hq / Hkv query heads per key/value
    head: ``_grouped_decode``) (plain Python)."""
    nt = scratch_workers(threads)
    rows = group if sq == 1 and group > 1 else sq
    return max(1, rows * tk * max(1, min(nt, ntask)))

