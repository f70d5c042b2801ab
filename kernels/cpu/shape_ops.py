"""CPU kernels: Pad (constant, reflect, edge, wrap), Tile, DepthToSpace, SpaceToDepth, Trilu, EyeLike, Range, ConstantOfShape, CenterCropPad, ReverseSequence. Imports nothing from jitort."""
import numpy as np
from numba import njit


# --- Pad ---------------------------------------------------------------------------------------
# The lowering generates one loop nest per canonical rank (jitort/codegen/lowerings/shape_ops.py)
# and calls these two helpers for the index mapping and the rows of the last axis.
# Modes: 0 constant, 1 reflect, 2 edge, 3 wrap.

@njit(cache=True, error_model='numpy', inline='always')
def pad_src(i, n, mode):
    """Input index of the (possibly out-of-range) index ``i`` along an axis of ``n`` > 0
    elements: reflect (period 2n - 2, the edge not repeated), edge (clamped) or wrap. Pads
    shorter than the axis take no integer division (~40 cycles each)."""
    if mode == 2:
        return 0 if i < 0 else (n - 1 if i >= n else i)
    if mode == 1:
        if n == 1:
            return 0
        if i < 0:
            i = -i
        if i >= n:
            i = 2 * n - 2 - i
            if i < 0:  # pads longer than the axis: the reflection is periodic
                p = 2 * n - 2
                i = (2 * n - 2 - i) % p
                i = p - i if i >= n else i
        return i
    if i < 0:
        i += n
        if i < 0:
            i = i % n
    elif i >= n:
        i -= n
        if i >= n:
            i = i % n
    return i


@njit(cache=True, error_model='numpy', inline='always')
def pad_row(yr, xr, c, b, nl, yl, inner, val, mode):
    """One row of a Pad: ``yr`` holds ``yl`` blocks of ``inner`` elements, ``xr`` the input
    row, of which blocks c .. c + nl - 1 are left after cropping. Output block o takes that
    part's block o - b (b >= 0; the interior is one contiguous run), border blocks the constant
    ``val`` (mode 0) or the block ``pad_src`` names. Both rows C-contiguous; unsigned indices
    spare the interior copy Numba's negative-index check, which keeps it from vectorizing.
    Inlined into the generated loop nests: as a call per row it cost 2-3.5x the whole pad."""
    lo = min(b, yl)
    hi = max(min(yl, b + nl), lo)
    d0 = np.uint64(lo * inner)
    s0 = np.uint64((lo - b + c) * inner)
    for t in range(np.uint64((hi - lo) * inner)):
        yr[d0 + t] = xr[s0 + t]
    if mode == 0:
        for t in range(np.uint64(lo * inner)):
            yr[t] = val
        for t in range(np.uint64(hi * inner), np.uint64(yl * inner)):
            yr[t] = val
        return
    if inner == 1:
        for o in range(lo):
            yr[o] = xr[pad_src(o - b, nl, mode) + c]
        for o in range(hi, yl):
            yr[o] = xr[pad_src(o - b, nl, mode) + c]
        return
    for o in range(lo):
        d = np.uint64(o * inner)
        s = np.uint64((pad_src(o - b, nl, mode) + c) * inner)
        for t in range(np.uint64(inner)):
            yr[d + t] = xr[s + t]
    for o in range(hi, yl):
        d = np.uint64(o * inner)
        s = np.uint64((pad_src(o - b, nl, mode) + c) * inner)
        for t in range(np.uint64(inner)):
            yr[d + t] = xr[s + t]
