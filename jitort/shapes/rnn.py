"""Shape functions: the recurrent ops (RNN, GRU, LSTM)."""
from __future__ import annotations

from .core import _fail, _get, _str, register


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
