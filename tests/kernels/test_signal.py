"""DFT and STFT compiled by jitort (jitort/codegen/lowerings/signal.py: a real GEMM against a
twiddle matrix) against onnxruntime on the same inputs, in strict mode (nothing interpreted);
window generators and MelWeightMatrix folded on the host in a log-mel front-end."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.helper import np_dtype_to_tensor_dtype as tt

import jitort


def _model(op, x, consts, attrs, opset, dyn=False):
    ins, inits = ['x'], []
    for name, val in consts:
        if val is None:
            ins.append('')
            continue
        ins.append(name)
        inits.append(numpy_helper.from_array(np.asarray(val), name))
    node = helper.make_node(op, ins, ['y'], **attrs)
    g = helper.make_graph([node], 'g', [helper.make_tensor_value_info(
        'x', tt(x.dtype), ['b', 'l'] + list(x.shape[2:]) if dyn else x.shape)],
                          [helper.make_tensor_value_info('y', tt(x.dtype), None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', opset)])
    m.ir_version = 9
    return m


def _check(op, x, consts, attrs, opset, threads=1, xs=None):
    m = _model(op, x, consts, attrs, opset, dyn=bool(xs))
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=['CPUExecutionProvider'])
    cm = jitort.compile(m, threads=threads, strict=True)
    for a in [x] + list(xs or []):
        ref = sess.run(None, {'x': a})[0]
        got = cm.run(None, {'x': a})[0]
        assert got.shape == ref.shape and got.dtype == ref.dtype, (got.shape, ref.shape)
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(ref).max(initial=0)))
    assert cm.fallback_nodes() == []
    return got


def _r(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


N = None
I64 = np.int64


@pytest.mark.parametrize('shape,consts,attrs,opset', [
    ((2, 6, 1), [], {}, 20),                                           # real -> complex
    ((2, 6, 1), [], {'onesided': 1}, 20),                              # rfft
    ((2, 7, 1), [], {'onesided': 1}, 17),                              # odd length
    ((2, 6, 2), [], {}, 20),                                           # complex
    ((2, 6, 2), [], {'inverse': 1}, 20),
    ((2, 5, 1), [], {'inverse': 1}, 17),                               # inverse of a real input
    ((2, 6, 2), [], {'inverse': 1, 'onesided': 1}, 20),                # irfft, length 10
    ((2, 6, 2), [('n', I64(11))], {'inverse': 1, 'onesided': 1}, 20),  # irfft, odd length 11
    ((2, 6, 2), [('n', I64(8))], {'inverse': 1, 'onesided': 1}, 20),   # irfft, cropped bins
    ((2, 6, 1), [('n', I64(4))], {}, 20),                              # dft_length truncates
    ((2, 6, 1), [('n', I64(9))], {'onesided': 1}, 20),                 # dft_length pads
    ((2, 6, 2), [('n', np.int32(9))], {'inverse': 1}, 20),
    ((3, 5, 4, 2), [('n', N), ('a', I64(0))], {}, 20),                 # axis input, outer axis
    ((3, 5, 4, 1), [('n', N), ('a', I64(1))], {'onesided': 1}, 20),
    ((3, 5, 4, 2), [('n', I64(7)), ('a', I64(-3))], {'inverse': 1}, 20),
    ((3, 5, 4, 2), [], {'axis': 1}, 17),                               # axis attribute
    ((3, 5, 4, 1), [], {'axis': -2, 'onesided': 1}, 17),
    ((2, 0, 1), [], {}, 20),                                           # empty
    ((0, 6, 2), [], {'inverse': 1}, 20),
])
def test_dft(shape, consts, attrs, opset):
    _check('DFT', _r(*shape), consts, attrs, opset)


def test_dft_float64_and_new_shapes():
    # one compiled model serves several batch sizes; float64 through the same kernels
    _check('DFT', _r(2, 16, 1, dtype=np.float64), [], {'onesided': 1}, 17,
           xs=[_r(5, 16, 1, seed=1, dtype=np.float64), _r(1, 16, 1, seed=2, dtype=np.float64)])


def test_dft_many_rows_threads(nthreads):
    # big enough to split the work over threads: FFT (power of two) and GEMM
    _check('DFT', _r(300, 256, 1), [], {'onesided': 1}, 20, threads=nthreads)
    _check('DFT', _r(300, 200, 2), [], {'inverse': 1}, 20, threads=nthreads)


def test_dft_matches_numpy():
    x = _r(3, 12, 2)
    got = _check('DFT', x, [], {}, 20)
    np.testing.assert_allclose(got[..., 0] + 1j * got[..., 1],
                               np.fft.fft(x[..., 0] + 1j * x[..., 1], axis=1), atol=1e-4)


@pytest.mark.parametrize('siglen,c,consts,attrs', [
    (100, 1, [('s', I64(8)), ('w', np.hanning(16).astype(np.float32))], {}),
    (100, 1, [('s', I64(8)), ('w', N), ('l', I64(16))], {'onesided': 0}),     # no window
    (64, 2, [('s', I64(5)), ('w', np.hamming(12).astype(np.float32))], {'onesided': 0}),
    (100, 1, [('s', I64(10)), ('w', np.hanning(20).astype(np.float32)), ('l', I64(20))], {}),
    (16, 1, [('s', I64(4)), ('w', np.ones(16, np.float32))], {}),              # one frame
])
def test_stft(siglen, c, consts, attrs):
    x = _r(2, siglen, c)
    _check('STFT', x, consts, attrs, 17, xs=[_r(1, siglen + 7, c, seed=3)])


def test_stft_threads(nthreads):
    _check('STFT', _r(1, 16000, 1), [('s', I64(160)), ('w', np.hanning(400).astype(np.float32))],
           {}, 17, threads=nthreads)


def test_log_mel_front_end():
    """HannWindow -> STFT -> power -> MelWeightMatrix: the generators fold on the host."""
    nodes = [helper.make_node('HannWindow', ['n'], ['w'], periodic=1),
             helper.make_node('STFT', ['x', 's', 'w'], ['st'], onesided=1),
             helper.make_node('MelWeightMatrix', ['nm', 'nd', 'sr', 'lo', 'hi'], ['mel']),
             helper.make_node('Mul', ['st', 'st'], ['sq']),
             helper.make_node('ReduceSum', ['sq', 'ax'], ['pw'], keepdims=0),
             helper.make_node('MatMul', ['pw', 'mel'], ['y'])]
    vals = {'n': np.array(64, I64), 's': np.array(16, I64), 'nm': np.array(20, I64),
            'nd': np.array(64, I64), 'sr': np.array(16000, I64), 'lo': np.array(0., np.float32),
            'hi': np.array(8000., np.float32), 'ax': np.array([-1], I64)}
    g = helper.make_graph(nodes, 'g', [helper.make_tensor_value_info('x', TensorProto.FLOAT,
                                                                     [1, 'L', 1])],
                          [helper.make_tensor_value_info('y', TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(v, k) for k, v in vals.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)])
    m.ir_version = 8
    x = _r(1, 1000, 1)
    ref = ort.InferenceSession(m.SerializeToString(),
                               providers=['CPUExecutionProvider']).run(None, {'x': x})[0]
    cm = jitort.compile(m, strict=True)
    got = cm.run(None, {'x': x})[0]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
    assert cm.fallback_nodes() == []


def _run_generators(nodes, feeds, outs):
    vis = [helper.make_tensor_value_info(k, tt(v.dtype), []) for k, v in feeds.items()]
    g = helper.make_graph(nodes, 'g', vis,
                          [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None)
                           for o in outs])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)])
    m.ir_version = 8
    for o in m.graph.output:  # output types as onnx infers them
        o.ClearField('type')
    ref = ort.InferenceSession(m.SerializeToString(),
                               providers=['CPUExecutionProvider']).run(None, feeds)
    cm = jitort.compile(m, strict=True)
    got = cm.run(None, feeds)
    for a, b in zip(got, ref):
        assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert cm.fallback_nodes() == []


def test_windows_and_mel_with_runtime_sizes():
    """Window sizes and mel parameters fed at run time: the generators run compiled."""
    nodes = [helper.make_node('HannWindow', ['n'], ['hann']),
             helper.make_node('HammingWindow', ['n'], ['hamming'], periodic=0),
             helper.make_node('BlackmanWindow', ['n'], ['blackman'], output_datatype=11),
             helper.make_node('HannWindow', ['n'], ['hann_sym'], periodic=0, output_datatype=11),
             helper.make_node('MelWeightMatrix', ['nm', 'nd', 'sr', 'lo', 'hi'], ['mel'])]
    feeds = {'n': np.array(16, I64), 'nm': np.array(10, I64), 'nd': np.array(64, I64),
             'sr': np.array(16000, I64), 'lo': np.array(20., np.float32),
             'hi': np.array(7000., np.float32)}
    _run_generators(nodes, feeds, ['hann', 'hamming', 'blackman', 'hann_sym', 'mel'])
