"""Shape functions: ops of the signal / remaining-numeric family not covered elsewhere
(DFT and STFT live in :mod:`.rnn`, Det and the losses in :mod:`.shape_ops`)."""
from __future__ import annotations

from .core import _fail, register


@register("BitCast")
def _bitcast(node, shapes, values):
    if shapes[0] is None:
        raise _fail(node, "input 0 is missing", shapes)
    return [shapes[0]]


@register("CausalConvWithState")
def _causal_conv(node, shapes, values):
    x, w = shapes[0], shapes[1]
    if x is None or w is None or len(x) != 3 or len(w) != 3:
        raise _fail(node, "input and weight must be rank 3", shapes)
    if w[0] != x[1] or w[1] != 1 or w[2] < 1:
        raise _fail(node, f"weight must have shape ({x[1]}, 1, k)", shapes)
    state = (x[0], x[1], w[2] - 1)
    if len(shapes) > 2 and shapes[2] is not None and tuple(shapes[2]) != (x[1],):
        raise _fail(node, f"bias must have shape ({x[1]},)", shapes)
    if len(shapes) > 3 and shapes[3] is not None and tuple(shapes[3]) != state:
        raise _fail(node, f"past_state must have shape {state}", shapes)
    return [tuple(x), state][:len(node.outputs)]
