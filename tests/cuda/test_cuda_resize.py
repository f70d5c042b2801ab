"""Pad and Resize on the CUDA backend (simulator in CI) against onnxruntime: Pad's modes with
asymmetric and cropping pads, Resize nearest (each nearest_mode, each coordinate mode) and
bilinear, by scales and by sizes, up and down; the refused cases stay on the CPU backend.

Tensors are tiny: the simulator runs a Python thread per CUDA thread.
"""
import numpy as np
import pytest
from onnx import helper

import jitort
from tests.helpers import F32, I64, called_names, make_model

RNG = np.random.default_rng(11)
X = RNG.standard_normal((1, 2, 3, 4)).astype(np.float32)


def _ort(model, feeds):
    import onnxruntime as ort
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _check(m, x, op, where="cuda", kernel=None):
    """``m`` on the CUDA backend matches onnxruntime and runs ``op`` on ``where`` (by the
    library's ``kernel``, when named)."""
    cm = jitort.compile(m, device="cuda")
    got = cm(x)[0]
    want = _ort(m, {"x": x})[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    ops = {n.op_type for n in cm.graph.nodes}
    assert op in ops
    assert cm.placement_counts() == {where: len(cm.graph.nodes)}, cm.summary()
    if kernel is not None:
        assert f"cuda.resize.{kernel}" in called_names(cm)
    return cm


# --- Pad ---------------------------------------------------------------------------------------

def pad_model(mode, pads, value=None, elem=F32, opset=17):
    inits = {"pads": np.array(pads, np.int64)}
    ins = ["x", "pads"]
    if value is not None:
        inits["cv"] = np.array(value, helper.tensor_dtype_to_np_dtype(elem))
        ins.append("cv")
    node = helper.make_node("Pad", ins, ["y"], mode=mode)
    return make_model([node], [("x", elem, [1, 2, 3, 4])], [("y", elem, None)], inits, opset)


@pytest.mark.parametrize("mode, pads, value", [
    ("constant", [0, 1, 1, 2, 0, 0, 2, 1], 1.5),
    ("constant", [0, 0, -1, 2, 0, 1, 1, -2], -2.0),   # negative pads crop
    ("reflect", [0, 0, 2, 1, 0, 0, 1, 3], None),
    ("edge", [0, 1, 1, 0, 0, 0, 2, 3], None),
    ("reflect", [0, 0, 1, -1, 0, 0, 0, 2], None),    # crop, then reflect the rest
])
def test_pad_matches_onnxruntime(cuda, mode, pads, value):
    _check(pad_model(mode, pads, value), X, "Pad", kernel="pad_nd")


def test_pad_wrap_and_int64_constant(cuda):
    _check(pad_model("wrap", [0, 0, 2, 1, 0, 0, 1, 5], opset=19), X, "Pad", kernel="pad_nd")
    xi = RNG.integers(-50, 50, (1, 2, 3, 4)).astype(np.int64)
    _check(pad_model("constant", [0, 0, 1, 1, 0, 0, 1, 2], 7, elem=I64), xi, "Pad",
           kernel="pad_nd")
    _check(pad_model("constant", [1, 0, 0, 1, 0, 0, 2, 0], elem=I64), xi, "Pad",  # value 0
           kernel="pad_nd")


# --- Resize ------------------------------------------------------------------------------------

def resize_model(scales=None, sizes=None, x_shape=(1, 2, 3, 4), opset=13, roi=(), **attrs):
    inits = {"roi": np.array(roi, np.float32)}
    ins = ["x", "roi"]
    if scales is not None:
        inits["scales"] = np.array(scales, np.float32)
        ins.append("scales")
    else:
        inits["scales"] = np.zeros(0, np.float32)
        inits["sizes"] = np.array(sizes, np.int64)
        ins += ["scales", "sizes"]
    node = helper.make_node("Resize", ins, ["y"], **attrs)
    return make_model([node], [("x", F32, list(x_shape))], [("y", F32, None)], inits, opset)


@pytest.mark.parametrize("nearest, coord", [
    ("round_prefer_floor", "half_pixel"),
    ("round_prefer_ceil", "asymmetric"),
    ("floor", "align_corners"),
    ("ceil", "pytorch_half_pixel"),
])
def test_resize_nearest_upsample_x2(cuda, nearest, coord):
    m = resize_model([1, 1, 2, 2], mode="nearest", nearest_mode=nearest,
                     coordinate_transformation_mode=coord)
    _check(m, X, "Resize", kernel="resize_nearest")


@pytest.mark.parametrize("kw", [
    dict(sizes=[1, 2, 2, 3]),                                    # downsample, by sizes
    dict(scales=[1, 1.5, 0.75, 1.6], nearest_mode="ceil"),        # every axis, the C axis too
    dict(sizes=[1, 2, 5, 7], coordinate_transformation_mode="align_corners"),
    dict(scales=[1, 1, 1.5, 0.7], coordinate_transformation_mode="tf_half_pixel_for_nn",
         opset=11),
    dict(scales=[1, 1, 2, 1], nearest_mode="round_prefer_ceil", opset=11,
         coordinate_transformation_mode="tf_half_pixel_for_nn"),  # W (scale 1) stays put
    dict(scales=[1, 1, 1, 1]),                                    # the identity: a copy
])
def test_resize_nearest_other_sizes(cuda, kw):
    copy = kw.get("scales") == [1, 1, 1, 1]
    _check(resize_model(mode="nearest", **kw), X, "Resize",
           kernel="resize_nearest" if not copy else None)


@pytest.mark.parametrize("coord, kw", [
    ("half_pixel", dict(scales=[1, 1, 2, 2])),
    ("half_pixel", dict(sizes=[1, 2, 2, 3])),                     # downsample
    ("align_corners", dict(sizes=[1, 2, 5, 7])),
    ("align_corners", dict(scales=[1, 1, 2, 2])),
    ("asymmetric", dict(scales=[1, 1, 1.5, 0.5])),
    ("asymmetric", dict(sizes=[1, 2, 6, 8])),
    ("pytorch_half_pixel", dict(sizes=[1, 2, 1, 6])),             # one output row
    ("half_pixel", dict(scales=[1, 1, 1, 2.5])),                  # W only: H maps i to i
])
def test_resize_linear(cuda, coord, kw):
    m = resize_model(mode="linear", coordinate_transformation_mode=coord, **kw)
    _check(m, X, "Resize", kernel="resize_linear2d")


def test_resize_linear_nhwc_and_3d(cuda):
    """Two adjacent axes anywhere: NHWC's H and W (scales [1, s, s, 1]), a 3-D input's last."""
    xh = RNG.standard_normal((1, 3, 4, 2)).astype(np.float32)
    m = resize_model([1, 2, 1.5, 1], x_shape=xh.shape, mode="linear")
    _check(m, xh, "Resize", kernel="resize_linear2d")
    x3 = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    m = resize_model(sizes=[2, 5, 3], x_shape=x3.shape, mode="linear",
                     coordinate_transformation_mode="align_corners")
    _check(m, x3, "Resize", kernel="resize_linear2d")


def test_resize_linear_opset18_and_half_pixel_symmetric(cuda):
    m = resize_model([1, 1, 1.7, 0.6], opset=19, mode="linear",
                     coordinate_transformation_mode="half_pixel_symmetric")
    _check(m, X, "Resize", kernel="resize_linear2d")
    m = resize_model(sizes=[1, 2, 4, 5], opset=18, mode="linear")
    _check(m, X, "Resize", kernel="resize_linear2d")


@pytest.mark.parametrize("kw", [
    dict(scales=[1, 1, 2, 2], mode="cubic"),                      # refused statically
    dict(scales=[1, 1, 2, 2], coordinate_transformation_mode="tf_crop_and_resize",
         roi=[0, 0, 0.1, 0, 1, 1, 0.9, 1]),
    dict(scales=[1, 1, 0.5, 0.5], mode="linear", antialias=1, opset=18),
    dict(sizes=[1, 2, 6, 6], keep_aspect_ratio_policy="not_larger", opset=18),
    dict(scales=[1, 1, 2, 1.5, 2], x_shape=(1, 1, 2, 3, 4), mode="linear"),  # at plan time
])
def test_refused_resize_stays_on_cpu(cuda, kw):
    """Refused by the predicate (kept on the CPU by partition) or, trilinear, by the lowering
    (the node moves to the CPU at its first call)."""
    x = RNG.standard_normal(kw.get("x_shape", X.shape)).astype(np.float32)
    _check(resize_model(**kw), x, "Resize", where="cpu")


def test_resize_between_device_ops_needs_no_copies(cuda):
    """Relu -> Resize -> Pad -> Relu is one CUDA segment: one copy in, one out."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Resize", ["r", "", "scales"], ["u"], mode="linear"),
             helper.make_node("Pad", ["u", "pads"], ["p"], mode="reflect"),
             helper.make_node("Neg", ["p"], ["y"])]
    m = make_model(nodes, [("x", F32, [1, 2, 3, 4])], [("y", F32, None)],
                   {"scales": np.array([1, 1, 2, 2], np.float32),
                    "pads": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)})
    cm = _check(m, X, "Resize")
    assert cm.transfer_plan() == [("x", "h2d"), ("y", "d2h")]
    assert [k for k in called_names(cm) if k.startswith("cuda.resize.")] == [
        "cuda.resize.resize_linear2d", "cuda.resize.pad_nd"]
