"""Det, NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss, BitCast, TensorScatter and
DeformConv compiled by jitort (jitort/codegen/lowerings/misc.py) against onnxruntime on the same
inputs, in strict mode (nothing interpreted)."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper
from onnx.helper import np_dtype_to_tensor_dtype as tt

import jitort


def _model(op, inputs, n_out, attrs, opset, consts=()):
    names, vis = [], []
    for i, a in enumerate(inputs):
        if a is None:
            names.append('')
            continue
        names.append(f'i{i}')
        vis.append(helper.make_tensor_value_info(f'i{i}', tt(a.dtype), a.shape))
    inits = []
    for i, a in consts:
        names[i] = f'c{i}'
        inits.append(numpy_helper.from_array(np.asarray(a), f'c{i}'))
    outs = [f'o{k}' for k in range(n_out)]
    node = helper.make_node(op, names, outs, **attrs)
    g = helper.make_graph([node], 'g', vis, [onnx.ValueInfoProto(name=o) for o in outs], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', opset)])
    m.ir_version = 10
    inf = {v.name: v for v in onnx.shape_inference.infer_shapes(m).graph.value_info}
    for o in m.graph.output:
        o.CopyFrom(inf.get(o.name, o))
    return m


def _check(op, inputs, attrs=None, opset=22, n_out=1, threads=1, ref=None, consts=(),
           rtol=1e-4, atol=1e-4):
    m = _model(op, inputs, n_out, attrs or {}, opset, consts)
    feeds = {f'i{i}': a for i, a in enumerate(inputs) if a is not None}
    cm = jitort.compile(m, threads=threads, strict=True)
    got = cm.run(None, feeds)
    if ref is None:
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.log_severity_level = 3
        ref = ort.InferenceSession(m.SerializeToString(), so,
                                   providers=['CPUExecutionProvider']).run(None, feeds)
    for g, r in zip(got, ref):
        assert g.shape == r.shape and g.dtype == r.dtype, (g.shape, r.shape, g.dtype, r.dtype)
        np.testing.assert_allclose(g, r, rtol=rtol, atol=atol)
    assert cm.fallback_nodes() == []
    return cm, got


def _r(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# --- Det ------------------------------------------------------------------------------------
@pytest.mark.parametrize('shape', [(3, 3), (4, 5, 5), (2, 3, 1, 1), (2, 0, 4, 4), (3, 0, 0)])
def test_det(shape):
    _check('Det', [_r(*shape)], opset=22, rtol=1e-3, atol=1e-4)


def test_det_singular_and_pivoting():
    a = np.array([[[0, 1, 2], [1, 0, 3], [4, -3, 8]],      # zero leading pivot
                  [[1, 2, 3], [2, 4, 6], [7, 8, 9]],       # singular
                  [[2, 0, 0], [0, 3, 0], [0, 0, 4]]], np.float32)
    _check('Det', [a], opset=11)


def test_det_float64():
    # onnxruntime has no float64 Det: numpy is the reference
    a = _r(3, 6, 6, dtype=np.float64)
    _check('Det', [a], ref=[np.linalg.det(a)], rtol=1e-10, atol=1e-12)


# --- losses ----------------------------------------------------------------------------------
def _labels(shape, c, seed=1, dtype=np.int64):
    return np.random.default_rng(seed).integers(0, c, shape).astype(dtype)


@pytest.mark.parametrize('op', ['NegativeLogLikelihoodLoss', 'SoftmaxCrossEntropyLoss'])
@pytest.mark.parametrize('xshape,red,weighted,ignore', [
    ((6, 5), 'mean', False, None),
    ((6, 5), 'sum', True, None),
    ((6, 5), 'none', True, 2),
    ((3, 4, 2, 3), 'mean', True, 1),          # (N, C, d1, d2)
    ((3, 4, 5), 'none', False, None),
    ((3, 4, 5), 'mean', False, 0),
])
def test_losses(op, xshape, red, weighted, ignore):
    x = _r(*xshape)
    t = _labels((xshape[0],) + xshape[2:], xshape[1])
    w = np.abs(_r(xshape[1], seed=2)) + 0.1 if weighted else None
    attrs = {'reduction': red}
    if ignore is not None:
        attrs['ignore_index'] = ignore
    _check(op, [x, t, w], attrs, opset=13 if op[0] == 'N' else 22)


def test_sce_log_prob_output_int32_labels():
    x = _r(4, 7, 3)
    t = _labels((4, 3), 7, dtype=np.int32)
    _check('SoftmaxCrossEntropyLoss', [x, t], {'reduction': 'none'}, n_out=2)
    _check('SoftmaxCrossEntropyLoss', [x, t, None], {'reduction': 'mean', 'ignore_index': -1},
           n_out=2, opset=13)


def test_nll_float64_and_out_of_range_target():
    x = _r(5, 4, dtype=np.float64)
    t = _labels((5,), 4)
    cm, _ = _check('NegativeLogLikelihoodLoss', [x, t], {'reduction': 'sum'})
    with pytest.raises(jitort.JitortError if hasattr(jitort, 'JitortError') else Exception):
        cm.run(None, {'i0': x, 'i1': np.array([0, 1, 2, 3, 4], np.int64)})


def test_sce_threads(nthreads):
    x = _r(64, 1100)  # big enough for the parallel log-softmax
    t = _labels((64,), 1100)
    _check('SoftmaxCrossEntropyLoss', [x, t], {'reduction': 'mean'}, n_out=2, threads=nthreads)


# --- BitCast ---------------------------------------------------------------------------------
@pytest.mark.parametrize('src,to', [(np.float32, np.int32), (np.int32, np.float32),
                                    (np.float64, np.int64), (np.uint8, np.int8),
                                    (np.int64, np.uint64)])
def test_bitcast(src, to):
    x = (_r(3, 5) * 100).astype(src)
    _check('BitCast', [x], {'to': int(tt(np.dtype(to)))}, opset=26)


def test_bitcast_bool():
    x = np.array([0, 1, 1, 0], np.uint8)
    # onnxruntime has no bool BitCast: numpy's view is the reference
    _check('BitCast', [x], {'to': int(tt(np.dtype(bool)))}, opset=26, ref=[x.view(bool)])


# --- TensorScatter ---------------------------------------------------------------------------
@pytest.mark.parametrize('ps,us,axis,mode,idx', [
    ((2, 3, 8, 4), (2, 3, 2, 4), -2, 'linear', [1, 5]),
    ((2, 3, 8, 4), (2, 3, 3, 4), -2, 'circular', [6, 2]),
    ((2, 8, 3, 4), (2, 1, 3, 4), 1, 'linear', [7, 0]),
    ((2, 3, 8, 4), (2, 3, 8, 4), -2, 'linear', None),           # prefill, no indices
    ((2, 3, 8), (2, 3, 0), -1, 'linear', [3, 3]),               # empty update
])
def test_tensor_scatter(ps, us, axis, mode, idx):
    ins = [_r(*ps), _r(*us, seed=1)] + ([np.array(idx, np.int64)] if idx is not None else [])
    _check('TensorScatter', ins, {'axis': axis, 'mode': mode}, opset=24)


def test_tensor_scatter_int64_and_bad_index():
    ins = [np.arange(24, dtype=np.int64).reshape(1, 2, 6, 2),
           -np.ones((1, 2, 2, 2), np.int64), np.array([3], np.int64)]
    cm, _ = _check('TensorScatter', ins, {}, opset=24)
    with pytest.raises(Exception):
        cm.run(None, {'i0': ins[0], 'i1': ins[1], 'i2': np.array([5], np.int64)})


# --- DeformConv ------------------------------------------------------------------------------
@pytest.mark.parametrize('n,c,h,w,oc,k,attrs,mask,bias', [
    (1, 4, 7, 7, 6, 3, {}, False, False),
    (2, 4, 9, 8, 6, 3, {'pads': [1, 1, 1, 1]}, True, True),
    (1, 4, 9, 9, 4, 3, {'strides': [2, 2], 'dilations': [2, 1], 'pads': [2, 1, 2, 1]}, True,
     False),
    (2, 4, 6, 6, 6, 2, {'group': 2, 'offset_group': 2}, True, True),
    (1, 2, 5, 5, 2, 1, {}, False, True),
])
def test_deform_conv(n, c, h, w, oc, k, attrs, mask, bias, nthreads=1):
    g = attrs.get('group', 1)
    og = attrs.get('offset_group', 1)
    x = _r(n, c, h, w)
    wt = _r(oc, c // g, k, k, seed=1)
    s, d = attrs.get('strides', [1, 1]), attrs.get('dilations', [1, 1])
    p = attrs.get('pads', [0, 0, 0, 0])
    oh = (h + p[0] + p[2] - d[0] * (k - 1) - 1) // s[0] + 1
    ow = (w + p[1] + p[3] - d[1] * (k - 1) - 1) // s[1] + 1
    off = _r(n, og * 2 * k * k, oh, ow, seed=2) * 2.0
    ins = [x, wt, off, _r(oc, seed=3) if bias else None,
           np.random.default_rng(4).random((n, og * k * k, oh, ow)).astype(np.float32)
           if mask else None]
    while ins[-1] is None:
        ins.pop()
    _check('DeformConv', ins, dict(attrs, kernel_shape=[k, k]), opset=19, threads=nthreads)


def test_deform_conv_threads(nthreads):
    # enough work for (image, pixel block) tasks in parallel
    test_deform_conv(2, 8, 16, 16, 16, 3, {'pads': [1, 1, 1, 1]}, True, True, nthreads)


# --- CausalConvWithState (opset 27) ----------------------------------------------------------
@pytest.mark.parametrize('b,c,length,k,bias,past,act', [
    (2, 4, 8, 3, True, True, 'silu'),
    (1, 4, 1, 4, True, True, 'none'),      # decode step: one token, state carried
    (2, 3, 2, 4, False, False, 'swish'),   # input shorter than k - 1: zero padding in state
    (1, 2, 5, 1, False, True, 'none'),     # k = 1: empty state
])
def test_causal_conv_with_state(b, c, length, k, bias, past, act):
    ins = [_r(b, c, length), _r(c, 1, k, seed=1), _r(c, seed=2) if bias else None,
           _r(b, c, k - 1, seed=3) if past else None]
    while ins[-1] is None:
        ins.pop()
    _check('CausalConvWithState', ins, {'activation': act}, opset=27, n_out=2)


def test_causal_conv_threads(nthreads):
    ins = [_r(2, 64, 300), _r(64, 1, 4, seed=1), _r(64, seed=2), _r(2, 64, 3, seed=3)]
    _check('CausalConvWithState', ins, {'activation': 'silu'}, opset=27, n_out=2,
           threads=nthreads)


# --- LinearAttention (opset 27) --------------------------------------------------------------
@pytest.mark.parametrize('rule,b,t,hq,hkv,dk,dv,past,dec_dk,beta1,scale', [
    ('gated_delta', 2, 5, 4, 2, 8, 6, True, False, False, 0.0),     # GQA, per-head decay
    ('gated_delta', 1, 3, 2, 2, 4, 4, False, True, True, 0.5),      # per-key decay, shared beta
    ('linear', 2, 4, 2, 1, 4, 3, True, False, False, 0.0),          # multi-query
    ('gated', 1, 6, 2, 2, 4, 5, False, False, False, 0.0),
    ('delta', 1, 1, 3, 3, 4, 4, True, False, False, 0.0),           # decode step
])
def test_linear_attention(rule, b, t, hq, hkv, dk, dv, past, dec_dk, beta1, scale):
    gating, delta = rule in ('gated', 'gated_delta'), rule in ('delta', 'gated_delta')
    ins = [_r(b, t, hq * dk), _r(b, t, hkv * dk, seed=1) * 0.3, _r(b, t, hkv * dv, seed=2),
           _r(b, hkv, dk, dv, seed=3) if past else None,
           -np.abs(_r(b, t, hkv * dk if dec_dk else hkv, seed=4)) if gating else None,
           np.random.default_rng(5).random((b, t, 1 if beta1 else hkv)).astype(np.float32)
           if delta else None]
    while ins[-1] is None:
        ins.pop()
    _check('LinearAttention', ins, {'q_num_heads': hq, 'kv_num_heads': hkv, 'update_rule': rule,
                                    'scale': scale}, opset=27, n_out=2)


def test_linear_attention_threads(nthreads):
    ins = [_r(2, 32, 4 * 16), _r(2, 32, 2 * 16, seed=1) * 0.3, _r(2, 32, 2 * 16, seed=2), None,
           -np.abs(_r(2, 32, 2, seed=4)),
           np.random.default_rng(5).random((2, 32, 2)).astype(np.float32)]
    _check('LinearAttention', ins, {'q_num_heads': 4, 'kv_num_heads': 2}, opset=27, n_out=2,
           threads=nthreads)
