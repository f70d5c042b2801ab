"""Shape functions: signal processing (DFT, STFT, the windows, MelWeightMatrix)."""
from __future__ import annotations

from .core import _axis, _fail, _get, _ints, _need, _present, register


def _dft_values(node):
    return _present(node, 1, 2) if node.since_version >= 20 else _present(node, 1)


@register("DFT", values=_dft_values)
def _dft(node, shapes, values):
    x = shapes[0]
    r = len(x)
    if r < 2 or x[-1] not in (1, 2):
        raise _fail(node, "input must end with a dim of 1 (real) or 2 (complex)", shapes)
    at = node.attrs
    if node.since_version >= 20:
        axis = _ints(_need(node, values, 2))[0] if _get(shapes, 2) is not None else -2
        if axis < -r or axis >= r - 1 or axis == -1:
            raise _fail(node, f"axis {axis} out of range", shapes)
        axis = axis + r if axis < 0 else axis
    else:
        a = at.get("axis", 1)  # a negative axis counts from the full rank, as onnxruntime
        axis = _axis(node, a + r if a < 0 else a, r - 1, shapes)
    onesided, inverse = at.get("onesided", 0), at.get("inverse", 0)
    if _get(shapes, 1) is not None:
        n = _ints(_need(node, values, 1))[0]
        if n < 0:
            raise _fail(node, f"negative dft_length {n}", shapes)
    else:
        n = 2 * (x[axis] - 1) if onesided and inverse else x[axis]
    out = list(x)
    if onesided and not inverse:
        n = n // 2 + 1
    out[axis] = n
    out[-1] = 1 if onesided and inverse else 2  # inverse one-sided (irfft) gives real output
    return [tuple(out)]


@register("STFT", values=lambda n: (1,) + _present(n, 3))
def _stft(node, shapes, values):
    x = shapes[0]
    if len(x) != 3:
        raise _fail(node, "signal must be 3-D", shapes)
    step = _ints(_need(node, values, 1))[0]
    if _get(shapes, 3) is not None:
        flen = _ints(_need(node, values, 3))[0]
    elif _get(shapes, 2) is not None:
        flen = shapes[2][0]
    else:
        raise _fail(node, "STFT needs a window or frame_length", shapes)
    if step <= 0 or flen <= 0 or flen > x[1]:
        raise _fail(node, f"bad frame_step {step} / frame_length {flen}", shapes)
    frames = (x[1] - flen) // step + 1
    bins = flen // 2 + 1 if node.attrs.get("onesided", 1) else flen
    return [(x[0], frames, bins, 2)]


@register("HannWindow", "HammingWindow", "BlackmanWindow", values=(0,))
def _window(node, shapes, values):
    n = _ints(_need(node, values, 0))[0]
    if n < 0:
        raise _fail(node, f"negative window size {n}", shapes)
    return [(n,)]


@register("MelWeightMatrix", values=(0, 1))
def _mel_weight_matrix(node, shapes, values):
    nmel = _ints(_need(node, values, 0))[0]
    dft = _ints(_need(node, values, 1))[0]
    if nmel < 0 or dft < 0:
        raise _fail(node, f"negative num_mel_bins {nmel} or dft_length {dft}", shapes)
    return [(dft // 2 + 1, nmel)]
