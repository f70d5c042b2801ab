"""Resize / Upsample compiled by jitort against onnxruntime (one-node models through
``jitort.compile``; nothing may be interpreted)."""
import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

import jitort

_rng = np.random.default_rng(0)
X4 = _rng.standard_normal((1, 3, 5, 6)).astype(np.float32)
X5 = _rng.standard_normal((2, 3, 4, 5, 6)).astype(np.float32)
X3 = _rng.standard_normal((2, 3, 9)).astype(np.float32)


def _model(x, op, opset, scales, sizes, roi, attrs):
    inits, ins = [], ['x']
    if op == 'Upsample' and opset < 9:
        attrs = dict(attrs, scales=[float(s) for s in scales])
    elif op == 'Upsample' or opset < 11:
        inits.append(helper.make_tensor('sc', TP.FLOAT, [len(scales)], scales))
        ins.append('sc')
    else:
        if roi is not None:
            inits.append(helper.make_tensor('roi', TP.FLOAT, [len(roi)], roi))
            ins.append('roi')
        elif opset < 13:
            inits.append(helper.make_tensor('roi', TP.FLOAT, [0], []))
            ins.append('roi')
        else:
            ins.append('')
        if scales is not None:
            inits.append(helper.make_tensor('sc', TP.FLOAT, [len(scales)], scales))
            ins.append('sc')
        else:
            ins.append('')
            inits.append(helper.make_tensor('sz', TP.INT64, [len(sizes)], sizes))
            ins.append('sz')
    et = helper.np_dtype_to_tensor_dtype(x.dtype)
    g = helper.make_graph([helper.make_node(op, ins, ['y'], **attrs)], 'g',
                          [helper.make_tensor_value_info('x', et, x.shape)],
                          [helper.make_tensor_value_info('y', et, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', opset)])
    m.ir_version = 8
    return m


def _check(x, opset=19, scales=None, sizes=None, roi=None, op='Resize', **attrs):
    import onnxruntime as ort
    m = _model(x, op, opset, scales, sizes, roi, attrs)
    sess = ort.InferenceSession(m.SerializeToString(), providers=['CPUExecutionProvider'])
    ref = sess.run(None, {'x': x})[0]
    cm = jitort.compile(m)
    assert cm.fallback_nodes() == []
    got = cm.run(None, {'x': x})[0]
    assert got.shape == ref.shape and got.dtype == ref.dtype
    if np.issubdtype(x.dtype, np.floating):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    else:
        np.testing.assert_array_equal(got, ref)


COORDS = ['half_pixel', 'half_pixel_symmetric', 'pytorch_half_pixel', 'align_corners',
          'asymmetric']


NEAREST = ['round_prefer_floor', 'round_prefer_ceil', 'floor', 'ceil']


@pytest.mark.parametrize('coord,nearest',
                         [(c, m) for c in ('half_pixel', 'asymmetric') for m in NEAREST]
                         + [(c, 'round_prefer_ceil') for c in COORDS[1:4]])
def test_nearest_modes(coord, nearest):
    # up on H, down on W: ties and the downscale side of every rounding
    _check(X4, scales=[1, 1, 1.5, 0.7], mode='nearest', coordinate_transformation_mode=coord,
           nearest_mode=nearest)


@pytest.mark.parametrize('coord', COORDS)
@pytest.mark.parametrize('mode', ['linear', 'cubic'])
def test_linear_cubic_modes(coord, mode):
    _check(X4, scales=[1, 1, 1.5, 0.7], mode=mode, coordinate_transformation_mode=coord)


@pytest.mark.parametrize('mode', ['nearest', 'linear', 'cubic'])
def test_tf_crop_and_resize(mode):
    _check(X4, sizes=[1, 3, 7, 4], roi=[0, 0, 0.1, 0.2, 1, 1, 0.9, 1.3], mode=mode,
           coordinate_transformation_mode='tf_crop_and_resize', extrapolation_value=-3.0)


def test_tf_crop_and_resize_roi_input():
    """roi fed at run time (a graph input, as BackendTest does): its values key the compiled
    plan, so a second crop box on the same model gives that box's output, not the first's."""
    import onnxruntime as ort
    g = helper.make_graph(
        [helper.make_node('Resize', ['x', 'roi', '', 'sz'], ['y'], mode='linear',
                          coordinate_transformation_mode='tf_crop_and_resize',
                          extrapolation_value=-3.0)], 'g',
        [helper.make_tensor_value_info('x', TP.FLOAT, X4.shape),
         helper.make_tensor_value_info('roi', TP.FLOAT, [8])],
        [helper.make_tensor_value_info('y', TP.FLOAT, None)],
        [helper.make_tensor('sz', TP.INT64, [4], [1, 3, 7, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 19)])
    m.ir_version = 8
    sess = ort.InferenceSession(m.SerializeToString(), providers=['CPUExecutionProvider'])
    cm = jitort.compile(m, strict=True)
    for roi in ([0, 0, 0.1, 0.2, 1, 1, 0.9, 1.3], [0, 0, 0.4, -0.1, 1, 1, 0.6, 0.8]):
        feeds = {'x': X4, 'roi': np.asarray(roi, np.float32)}
        got, ref = cm.run(None, feeds)[0], sess.run(None, feeds)[0]
        assert got.shape == ref.shape == (1, 3, 7, 4)
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    assert cm.fallback_nodes() == []


def test_cubic_attrs():
    _check(X4, scales=[1, 1, 1.7, 2.3], mode='cubic', exclude_outside=1, cubic_coeff_a=-0.5)
    _check(X4, scales=[1, 1, 0.6, 0.5], mode='cubic', exclude_outside=1)


def test_x2_nchw(nthreads):
    """The real-model cases: nearest x2 floor/asymmetric, bilinear align_corners / half_pixel."""
    x = _rng.standard_normal((1, 4, 64, 64)).astype(np.float32)  # x2: the prange path (64K)
    _check(x, scales=[1, 1, 2, 2], mode='nearest', coordinate_transformation_mode='asymmetric',
           nearest_mode='floor')
    _check(x, scales=[1, 1, 2, 2], mode='linear', coordinate_transformation_mode='align_corners')
    _check(x, sizes=[1, 4, 150, 111], mode='linear')
    _check(x[:1, :1], scales=[1, 1, 4, 4], mode='linear')  # one plane: its rows split
    big = _rng.standard_normal((1, 2, 1024, 1024)).astype(np.float32)  # nearest's prange (4M)
    _check(big, scales=[1, 1, 1.5, 1.5], mode='nearest')


@pytest.mark.parametrize('opset', [10, 11, 13, 18])
@pytest.mark.parametrize('mode', ['nearest', 'linear'])
def test_opsets(opset, mode):
    _check(X4, opset=opset, scales=[1, 1, 2.5, 0.6], mode=mode)


@pytest.mark.parametrize('opset', [7, 9])
@pytest.mark.parametrize('mode', ['nearest', 'linear'])
def test_upsample(opset, mode):
    _check(X4, op='Upsample', opset=opset, scales=[1, 1, 2.5, 1.6], mode=mode)


def test_nd_and_axes(nthreads):
    _check(X5, scales=[1, 1, 1.5, 2, 0.5], mode='linear')  # trilinear
    _check(X5, scales=[1, 1, 1.5, 2, 0.5], mode='nearest')
    _check(X5, scales=[2.0, 0.5], axes=[2, 4], mode='nearest')  # axes with a gap
    _check(X4, scales=[2.0], axes=[-1], mode='linear')  # one axis, innermost
    _check(X4, scales=[2.0], axes=[2], mode='cubic')  # one axis, rows
    _check(X3, scales=[1, 1, 2.0], mode='linear')  # 1-D linear


def test_int_and_empty():
    _check((X4 * 10).astype(np.int32), scales=[1, 2, 0.5, 3], mode='nearest')
    _check(np.zeros((1, 3, 0, 4), np.float32), scales=[1, 1, 2, 2], mode='linear')
    _check(X4, scales=[1, 1, 1, 1], mode='linear')  # nothing resized: a copy


@pytest.mark.parametrize('policy', ['not_larger', 'not_smaller'])
def test_keep_aspect_ratio(policy):
    _check(X4, sizes=[9, 9], axes=[2, 3], keep_aspect_ratio_policy=policy, mode='nearest')
    _check(X4, sizes=[9, 9], axes=[2, 3], keep_aspect_ratio_policy=policy, mode='linear')


@pytest.mark.parametrize('mode', ['linear', 'cubic'])
def test_antialias(mode):
    for sc in ([1, 1, 0.5, 0.34], [1, 1, 0.7, 1.6]):
        _check(X4, scales=sc, mode=mode, antialias=1)
        _check(X4, scales=sc, mode=mode, antialias=1, exclude_outside=1)
    _check(X4, scales=[1, 1, 0.5, 0.34], mode=mode, antialias=1,
           coordinate_transformation_mode='align_corners')
    _check(X4, sizes=[1, 3, 3, 2], roi=[0, 0, 0.1, 0.2, 1, 1, 0.9, 1.3], mode=mode, antialias=1,
           coordinate_transformation_mode='tf_crop_and_resize', extrapolation_value=-3.0)
    if mode == 'linear':
        _check(X5, scales=[1, 1, 0.5, 0.4, 0.5], mode=mode, antialias=1)
        _check(X3, scales=[1, 1, 0.45], mode=mode, antialias=1)


@pytest.mark.parametrize('nearest', ['round_prefer_floor', 'round_prefer_ceil', 'floor', 'ceil'])
def test_tf_half_pixel_for_nn(nearest):
    """Opset 11's mode (index = round((i + 0.5) / scale), clamped), compiled and interpreted,
    against onnxruntime; an axis of scale 1 keeps its positions (a ceil rounding would move
    them by the formula, not in onnxruntime). onnx.reference rejects the mode: the
    interpreter's fix implements it."""
    import onnxruntime as ort
    from onnx.reference import ReferenceEvaluator
    from jitort.interpreter.reference_fixes import FIXED_OPS
    for scales in ([1, 1, 1.5, 0.7], [1, 1, 2, 2]):
        m = _model(X4, 'Resize', 11, scales, None, None,
                   dict(mode='nearest', coordinate_transformation_mode='tf_half_pixel_for_nn',
                        nearest_mode=nearest))
        want = ort.InferenceSession(m.SerializeToString(),
                                    providers=['CPUExecutionProvider']).run(None, {'x': X4})[0]
        cm = jitort.compile(m)
        np.testing.assert_array_equal(cm.run(None, {'x': X4})[0], want)
        assert cm.fallback_nodes() == []
        interpreted = ReferenceEvaluator(m, new_ops=FIXED_OPS).run(None, {'x': X4})[0]
        np.testing.assert_array_equal(interpreted, want)


def _run_both(nodes_model, feeds):
    import onnxruntime as ort
    ref = ort.InferenceSession(nodes_model.SerializeToString(),
                               providers=['CPUExecutionProvider']).run(None, feeds)[0]
    cm = jitort.compile(nodes_model)
    assert cm.fallback_nodes() == []
    got = cm.run(None, feeds)[0]
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


def _gs_model(xshape, gshape, opset, **attrs):
    g = helper.make_graph([helper.make_node('GridSample', ['x', 'g'], ['y'], **attrs)], 'g',
                          [helper.make_tensor_value_info('x', TP.FLOAT, xshape),
                           helper.make_tensor_value_info('g', TP.FLOAT, gshape)],
                          [helper.make_tensor_value_info('y', TP.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', opset)])
    m.ir_version = 8
    return m


GS_X = _rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
GS_G = (_rng.random((2, 4, 7, 2)) * 2.6 - 1.3).astype(np.float32)  # reaches outside [-1, 1]


@pytest.mark.parametrize('mode', ['linear', 'nearest', 'cubic'])
@pytest.mark.parametrize('pad', ['zeros', 'border', 'reflection'])
@pytest.mark.parametrize('align', [0, 1])
def test_gridsample_2d(mode, pad, align):
    m = _gs_model(GS_X.shape, GS_G.shape, 20, mode=mode, padding_mode=pad, align_corners=align)
    _run_both(m, {'x': GS_X, 'g': GS_G})


@pytest.mark.parametrize('mode', ['bilinear', 'nearest', 'bicubic'])
def test_gridsample_opset16(mode):
    m = _gs_model(GS_X.shape, GS_G.shape, 16, mode=mode, padding_mode='border')
    _run_both(m, {'x': GS_X, 'g': GS_G})


@pytest.mark.parametrize('mode', ['linear', 'nearest'])
def test_gridsample_3d(mode, nthreads):
    x = _rng.standard_normal((2, 3, 4, 5, 6)).astype(np.float32)
    g = (_rng.random((2, 3, 4, 5, 3)) * 2.6 - 1.3).astype(np.float32)
    for pad, align in (('zeros', 0), ('reflection', 1)):
        m = _gs_model(x.shape, g.shape, 20, mode=mode, padding_mode=pad, align_corners=align)
        _run_both(m, {'x': x, 'g': g})


def test_gridsample_1d():
    """1-D sampling (onnxruntime runs only 2-D/3-D): with border padding it equals the 2-D
    sampling of a height-1 image at y = 0, which onnxruntime runs. (onnx.reference differs
    from onnxruntime for cubic/border outside the image; jitort follows onnxruntime.)"""
    import onnxruntime as ort
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 7)).astype(np.float32)
    g = (rng.random((2, 5, 1)) * 2.6 - 1.3).astype(np.float32)
    g2 = np.concatenate([g, np.zeros_like(g)], axis=-1)[:, None]  # (2, 1, 5, 2)
    for mode in ('linear', 'nearest', 'cubic'):
        m = _gs_model(x.shape, g.shape, 20, mode=mode, padding_mode='border')
        cm = jitort.compile(m)
        assert cm.fallback_nodes() == []
        m2 = _gs_model((2, 3, 1, 7), g2.shape, 20, mode=mode, padding_mode='border')
        ref = ort.InferenceSession(m2.SerializeToString(), providers=['CPUExecutionProvider']).run(
            None, {'x': x[:, :, None], 'g': g2})[0][:, :, 0]
        np.testing.assert_allclose(cm.run(None, {'x': x, 'g': g})[0], ref, rtol=1e-4, atol=1e-5)


def test_gridsample_big(nthreads):
    """Enough output for the prange variant."""
    x = _rng.standard_normal((1, 16, 32, 32)).astype(np.float32)
    g = (_rng.random((1, 64, 64, 2)) * 2.2 - 1.1).astype(np.float32)
    _run_both(_gs_model(x.shape, g.shape, 20), {'x': x, 'g': g})


@pytest.mark.parametrize('align', [0, 1])
def test_affine_grid(align):
    for tshape, size in (((2, 2, 3), [2, 3, 5, 6]), ((2, 3, 4), [2, 3, 4, 5, 6]),
                         ((1, 2, 3), [1, 1, 1, 6])):
        g = helper.make_graph(
            [helper.make_node('AffineGrid', ['t', 's'], ['y'], align_corners=align)], 'g',
            [helper.make_tensor_value_info('t', TP.FLOAT, tshape)],
            [helper.make_tensor_value_info('y', TP.FLOAT, None)],
            [helper.make_tensor('s', TP.INT64, [len(size)], size)])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 20)])
        m.ir_version = 8
        _run_both(m, {'t': _rng.standard_normal(tshape).astype(np.float32)})


@pytest.mark.parametrize('align', [0, 1])
def test_affine_grid_rows_split(align, nthreads):
    """A 2-D grid of >= resize._AG_PAR_POINTS points: rows in prange chunks (3 x 97 rows of
    230, not a multiple of the 64 chunks)."""
    from jitort.kernels.cpu import resize as RZ
    size = [3, 1, 97, 230]
    assert 3 * 97 * 230 >= RZ._AG_PAR_POINTS
    g = helper.make_graph(
        [helper.make_node('AffineGrid', ['t', 's'], ['y'], align_corners=align)], 'g',
        [helper.make_tensor_value_info('t', TP.FLOAT, (3, 2, 3))],
        [helper.make_tensor_value_info('y', TP.FLOAT, None)],
        [helper.make_tensor('s', TP.INT64, [4], size)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 20)])
    m.ir_version = 8
    _run_both(m, {'t': _rng.standard_normal((3, 2, 3)).astype(np.float32)})
