"""A small GPT-style decoder with a KV cache, built with onnx.helper (random weights).

Inputs: ``input_ids`` int64 [B, S] and, per layer, ``past_key_<l>`` / ``past_value_<l>``
float32 [B, H, P, D] with P the dynamic past length; outputs ``logits`` [B, S, vocab] and
``present_key_<l>`` / ``present_value_<l>`` [B, H, P + S, D]. Positions and the causal mask are
computed in the graph from P, as exporters write them: ``Shape(past_key_0)[2]`` gives P, the
query positions are ``Range(P, P + S)``, the key positions ``Range(0, P + S)`` and a key is
visible when its position is at most the query's. Reshapes take their targets from ``Shape``
of the activations (B and S are dynamic), as an exported graph's do.

Used by tests/test_decoding.py and benchmarks/test_bench_decode.py.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

LAYERS, HIDDEN, HEADS, VOCAB, FFN = 4, 256, 4, 4096, 1024


class _Builder:
    def __init__(self, rng):
        self.rng = rng
        self.nodes, self.inits = [], []
        self.n = 0

    def name(self, base):
        self.n += 1
        return f"{base}_{self.n}"

    def const(self, base, array):
        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(self, base, shape, scale=0.08):
        return self.const(base, (self.rng.standard_normal(shape) * scale).astype(np.float32))

    def op(self, op_type, inputs, n_out=1, **attrs):
        outs = [self.name(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, **attrs))
        return outs[0] if n_out == 1 else outs

    def layer_norm(self, x):
        g = self.const("ln_g", (1 + 0.1 * self.rng.standard_normal(HIDDEN)).astype(np.float32))
        b = self.weight("ln_b", (HIDDEN,), 0.1)
        return self.op("LayerNormalization", [x, g, b], axis=-1, epsilon=1e-5)

    def linear(self, x, n_in, n_out):
        y = self.op("MatMul", [x, self.weight("w", (n_in, n_out))])
        return self.op("Add", [y, self.weight("b", (n_out,), 0.02)])


def _attention(g: _Builder, x, layer, bs, mask):
    """Self-attention of one layer: q from x, k/v appended to the layer's past."""
    head = HIDDEN // HEADS
    qkv = g.linear(x, HIDDEN, 3 * HIDDEN)
    q, k, v = g.op("Split", [qkv, g.const("split", np.array([HIDDEN] * 3, np.int64))], 3, axis=-1)
    heads_shape = g.op("Concat", [bs, g.const("hd", np.array([HEADS, head], np.int64))], axis=0)

    def split_heads(t):
        return g.op("Transpose", [g.op("Reshape", [t, heads_shape])], perm=[0, 2, 1, 3])

    present_k = g.op("Concat", [f"past_key_{layer}", split_heads(k)], axis=2)
    present_v = g.op("Concat", [f"past_value_{layer}", split_heads(v)], axis=2)
    g.nodes.append(helper.make_node("Identity", [present_k], [f"present_key_{layer}"]))
    g.nodes.append(helper.make_node("Identity", [present_v], [f"present_value_{layer}"]))
    scores = g.op("MatMul", [split_heads(q), g.op("Transpose", [present_k], perm=[0, 1, 3, 2])])
    scores = g.op("Mul", [scores, g.const("scale", np.array(head ** -0.5, np.float32))])
    scores = g.op("Where", [mask, scores, g.const("neg", np.array(-1e4, np.float32))])
    ctx = g.op("MatMul", [g.op("Softmax", [scores], axis=-1), present_v])
    ctx = g.op("Transpose", [ctx], perm=[0, 2, 1, 3])
    merged = g.op("Reshape", [ctx, g.op("Concat", [bs, g.const("h", np.array([HIDDEN], np.int64))],
                                        axis=0)])
    return g.linear(merged, HIDDEN, HIDDEN)


def _positions(g: _Builder):
    """(query positions [S], causal mask [S, P + S] as bool, the [B, S] shape) from the past."""
    i64 = {"to": TensorProto.INT64}
    zero, one = g.const("zero", np.array(0, np.int64)), g.const("one", np.array(1, np.int64))
    past = g.op("Gather", [g.op("Shape", ["past_key_0"]), g.const("two", np.array(2, np.int64))],
                axis=0)
    ids_shape = g.op("Shape", ["input_ids"])
    seq = g.op("Gather", [ids_shape, one], axis=0)
    total = g.op("Add", [past, seq])
    q_pos = g.op("Cast", [g.op("Range", [past, total, one])], **i64)
    k_pos = g.op("Range", [zero, total, one])
    mask = g.op("LessOrEqual", [g.op("Unsqueeze", [k_pos, zero]),
                                g.op("Unsqueeze", [q_pos, one])])
    bs = g.op("Slice", [ids_shape, g.const("s0", np.array([0], np.int64)),
                        g.const("s2", np.array([2], np.int64))])
    return q_pos, mask, bs


def build(seed: int = 0, layers: int = LAYERS) -> onnx.ModelProto:
    """The decoder as an ONNX model (opset 17), weights drawn from ``seed``."""
    g = _Builder(np.random.default_rng(seed))
    q_pos, mask, bs = _positions(g)
    wte = g.weight("wte", (VOCAB, HIDDEN), 0.5)
    h = g.op("Add", [g.op("Gather", [wte, "input_ids"], axis=0),
                     g.op("Gather", [g.weight("wpe", (1024, HIDDEN), 0.1), q_pos], axis=0)])
    for layer in range(layers):
        h = g.op("Add", [h, _attention(g, g.layer_norm(h), layer, bs, mask)])
        ff = g.linear(g.layer_norm(h), HIDDEN, FFN)
        ff = g.op("Mul", [ff, g.op("Sigmoid", [g.op("Mul", [ff, g.const("a", np.array(
            1.702, np.float32))])])])  # the sigmoid approximation of GELU
        h = g.op("Add", [h, g.linear(ff, FFN, HIDDEN)])
    logits = g.op("MatMul", [g.layer_norm(h), g.op("Transpose", [wte], perm=[1, 0])])
    g.nodes.append(helper.make_node("Identity", [logits], ["logits"]))
    kv = [TensorProto.FLOAT, ["B", HEADS, "P", HIDDEN // HEADS]]
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["B", "S"])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["B", "S", VOCAB])]
    present = [TensorProto.FLOAT, ["B", HEADS, "T", HIDDEN // HEADS]]
    for layer in range(layers):
        inputs += [helper.make_tensor_value_info(f"past_{t}_{layer}", *kv) for t in ("key", "value")]
        outputs += [helper.make_tensor_value_info(f"present_{t}_{layer}", *present)
                    for t in ("key", "value")]
    graph = helper.make_graph(g.nodes, "gpt_decoder", inputs, outputs, g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def empty_past(layers: int = LAYERS, batch: int = 1) -> dict:
    """Past inputs of length 0 (the prompt step)."""
    z = np.zeros((batch, HEADS, 0, HIDDEN // HEADS), np.float32)
    return {f"past_{t}_{layer}": z for layer in range(layers) for t in ("key", "value")}


def next_past(outputs: list, layers: int = LAYERS) -> dict:
    """The past inputs of the next step from a step's outputs (logits, then the presents)."""
    return {f"past_{t}_{layer}": outputs[1 + 2 * layer + k]
            for layer in range(layers) for k, t in enumerate(("key", "value"))}


def tokens(n: int, seed: int = 1, batch: int = 1) -> np.ndarray:
    """Token ids to feed (teacher forcing: both runtimes see the same sequence)."""
    return np.random.default_rng(seed).integers(0, VOCAB, (batch, n), dtype=np.int64)


def decode(run, ids: np.ndarray, prompt: int, layers: int = LAYERS):
    """Feed ``ids[:, :prompt]`` on an empty past, then one token per step with the KV cache.

    ``run(feeds) -> outputs`` (jitort's or onnxruntime's ``run(None, feeds)``). Yields each
    step's outputs.
    """
    past = empty_past(layers, ids.shape[0])
    pos = 0
    while pos < ids.shape[1]:
        n = prompt if pos == 0 else 1
        outs = run({"input_ids": np.ascontiguousarray(ids[:, pos:pos + n]), **past})
        yield outs
        past = next_past(outs, layers)
        pos += n
