"""Conv + bias + residual + activation epilogues (split from test_conv.py to keep each
file's cold Numba compile time short)."""
import numpy as np
import pytest

from test_conv import CASES, DTYPES, _close, _ref, _run


@pytest.mark.parametrize('dtype', DTYPES)
# depthwise: channel blocks (37), flat stencils (4, 18, 19; 18x33x32 once added the bias
# twice before Relu)
# direct (an image head: 16 -> 3 channels, 7x7)
@pytest.mark.parametrize('case', [CASES[0], CASES[4], CASES[7]]
                         + [c for c in CASES if c[1] in (37, 18, 19)]
                         + [c for c in CASES if c[5] == 7])
@pytest.mark.parametrize('act,alpha,beta', [(1, 0, 0), (6, 0.0, 0.5), (5, 0.2, 0), (3, 0, 0)])
def test_conv2d_act_residual(dtype, case, act, alpha, beta, ort_node):
    n, c, h, w, m, kh, kw, stride, pads, dil, group = case
    for res in (False, True):
        x, wt, b, r, out = _run(dtype, n, c, h, w, m, kh, kw, stride, pads, dil, group,
                                True, act, alpha, beta, res)
        ref = _ref(ort_node, x, wt, b, stride, pads, dil, group) + (r if res else 0)
        if act == 1:
            ref = np.maximum(ref, 0)
        elif act == 6:
            ref = np.clip(ref, alpha, beta)
        elif act == 5:
            ref = np.where(ref < 0, ref * alpha, ref)
        elif act == 3:
            ref = 1 / (1 + np.exp(-ref))
        _close(out, ref, dtype)
