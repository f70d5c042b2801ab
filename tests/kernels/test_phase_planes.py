"""``quant.phase_planes`` (the zero-padded stride-phase planes the implicit-gemm convolutions
read: float32 for conv_implicit / conv_cvec, bytes for QLinearConv) against a numpy reference:
strides 1-3 (1 and 2 through the masked-vector row copies, 3 element by element), pads on
either side and past the input, dilations, rows longer than one vector, a fill value."""
import numpy as np
import pytest

from jitort.kernels.cpu.conv_implicit import _geom
from jitort.kernels.cpu.phases import _phases_used, phase_planes


def _reference(src, nc, h, w, sh, sw, ph, pw, dh, dw, kh, kw, hq, wq, fill, out):
    x = src.reshape(nc, h, w)
    for ae in _phases_used(sh, sw, dh, dw, kh, kw):
        a, e = ae // sw, ae % sw
        for i in range(nc):
            plane = np.full((hq, wq), fill, out.dtype)
            for y in range(hq):
                r = y * sh + a - ph
                if not 0 <= r < h:
                    continue
                for xx in range(wq):
                    c = xx * sw + e - pw
                    if 0 <= c < w:
                        plane[y, xx] = x[i, r, c]
            o = (i * sh * sw + ae) * hq * wq
            out[o:o + hq * wq] = plane.reshape(-1)
    return out


@pytest.mark.parametrize('dtype', [np.float32, np.uint8, np.float64])
@pytest.mark.parametrize('geo', [
    # (h, w, kh, kw, sh, sw, ph, pw, dh, dw, pad_end)
    (14, 14, 3, 3, 1, 1, 1, 1, 1, 1, 1), (14, 14, 3, 3, 2, 2, 1, 1, 1, 1, 1),
    (7, 9, 3, 3, 2, 2, 0, 0, 1, 1, 0), (15, 13, 5, 5, 2, 2, 2, 2, 1, 1, 2),
    (9, 70, 3, 3, 1, 1, 1, 1, 1, 1, 1), (9, 70, 3, 3, 2, 2, 1, 1, 1, 1, 1),
    (6, 131, 7, 7, 2, 2, 3, 3, 1, 1, 3), (10, 10, 3, 3, 1, 2, 2, 2, 2, 2, 2),
    (11, 12, 3, 3, 3, 3, 1, 1, 1, 1, 1), (5, 5, 1, 1, 2, 2, 0, 0, 1, 1, 0),
    (4, 4, 3, 3, 1, 1, 3, 3, 1, 1, 3),      # pads wider than the kernel reaches
])
def test_phase_planes_match_reference(dtype, geo):
    h, w, kh, kw, sh, sw, ph, pw, dh, dw, pe = geo
    oh = (h + ph + pe - dh * (kh - 1) - 1) // sh + 1
    ow = (w + pw + pe - dw * (kw - 1) - 1) // sw + 1
    hq, wq = _geom(h, w, oh, ow, kh, kw, sh, sw, dh, dw)
    nc = 3
    rng = np.random.default_rng(0)
    src = (rng.integers(1, 200, nc * h * w)).astype(dtype)
    fill = dtype(7)
    size = nc * sh * sw * hq * wq
    got = np.full(size + 64, 99, dtype)
    phase_planes(src, got, fill, nc, h, w, sh, sw, ph, pw, dh, dw, kh, kw, hq, wq)
    want = _reference(src, nc, h, w, sh, sw, ph, pw, dh, dw, kh, kw, hq, wq, fill,
                      np.full(size + 64, 99, dtype))
    np.testing.assert_array_equal(got, want)   # the unused phases and the slack untouched
