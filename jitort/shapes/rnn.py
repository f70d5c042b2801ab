"""Shape functions: recurrent and signal ops."""
from __future__ import annotations

from .core import (_axis, _fail, _get, _ints, _need, _present, _prod, _str, register)


_RNN_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


@register("RNN", "GRU", "LSTM")
def _rnn(node, shapes, values):
    x, w, r = shapes[0], shapes[1], shapes[2]
    if len(x) != 3 or len(w) != 3 or len(r) != 3:
        raise _fail(node, "X, W and R must be 3-D", shapes)
    at = node.attrs
    gates = _RNN_GATES[node.op_type]
    hidden = at.get("hidden_size") or r[-1]
    direction = _str(at.get("direction"), "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise _fail(node, f"direction {direction!r}", shapes)
    nd = 2 if direction == "bidirectional" else 1
    if r[0] != nd:
        raise _fail(node, f"R has {r[0]} directions, expected {nd}", shapes)
    if tuple(w) != (nd, gates * hidden, x[2]) or tuple(r) != (nd, gates * hidden, hidden):
        raise _fail(node, f"W must be {(nd, gates * hidden, x[2])} and R "
                          f"{(nd, gates * hidden, hidden)}", shapes)
    if at.get("layout", 0):
        batch, seq = x[0], x[1]
        y, yh = (batch, seq, nd, hidden), (batch, nd, hidden)
    else:
        seq, batch = x[0], x[1]
        y, yh = (seq, nd, batch, hidden), (nd, batch, hidden)
    want = {3: (nd, 2 * gates * hidden), 4: (batch,), 5: yh}
    if node.op_type == "LSTM":
        want.update({6: yh, 7: (nd, 3 * hidden)})
    for i, shape in want.items():
        s = _get(shapes, i)
        if s is not None and tuple(s) != shape:
            raise _fail(node, f"input {i} must have shape {shape}", shapes)
    return [y] + [yh] * (len(node.outputs) - 1)


@register("Col2Im", values=(1, 2))
def _col2im(node, shapes, values):
    x = shapes[0]
    image = _ints(_need(node, values, 1))
    block = _ints(_need(node, values, 2))
    if len(x) != 3 or len(image) != len(block):
        raise _fail(node, "input must be 3-D and image_shape/block_shape of equal length",
                    shapes)
    bp = _prod(block)
    if bp == 0 or x[1] % bp:
        raise _fail(node, f"dim 1 ({x[1]}) not divisible by prod(block_shape)={bp}", shapes)
    return [(x[0], x[1] // bp, *image)]


@register("AffineGrid", values=(1,))
def _affine_grid(node, shapes, values):
    size = _ints(_need(node, values, 1))
    if len(size) == 4:
        return [(size[0], size[2], size[3], 2)]
    if len(size) == 5:
        return [(size[0], size[2], size[3], size[4], 3)]
    raise _fail(node, f"size {size} must have 4 or 5 entries", shapes)


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
