"""CUDA tests run on numba's CUDA simulator unless ``JITORT_TEST_CUDA=gpu``.

The simulator must be chosen before ``numba.cuda`` is first imported; jitort's CPU path never
imports it, so setting it here (collection of this directory) is early enough in a normal
``python -m pytest`` run. Tests skip with a reason when numba's CUDA target is missing or was
already imported without the simulator.
"""
import os
import sys

import pytest

SIMULATOR = os.environ.get("JITORT_TEST_CUDA", "sim") != "gpu"
if SIMULATOR and "numba.cuda" not in sys.modules:
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    from numba.core import config as _config

    _config.ENABLE_CUDASIM = 1  # numba read its environment when jitort imported it


@pytest.fixture(scope="session")
def cuda():
    """``numba.cuda`` (simulated unless JITORT_TEST_CUDA=gpu), or skip."""
    from jitort.cuda_runtime import CudaUnavailable, cuda_module
    try:
        mod = cuda_module()
    except CudaUnavailable as e:
        pytest.skip(f"CUDA unavailable: {e}")
    if SIMULATOR and "simulator" not in type(mod.device_array(1, "f4")).__module__:
        pytest.skip("numba.cuda was imported without the simulator before these tests")
    return mod


def _listed(monkeypatch, module, standin, listed, why):
    """``module``'s library binding (its ``_lib``) replaced by ``listed`` over the stand-in on
    the simulator or the library on a GPU (skip with ``why`` where it cannot load), with thread
    state (handles) of its own."""
    if SIMULATOR:
        lib = standin()
    else:
        lib = module._load()
        if lib is None:
            pytest.skip(why)
    out = listed(lib)
    monkeypatch.setattr(module, "_lib", out)
    monkeypatch.setattr(module, "_local", type(module._local)())  # new handles: modes listed
    return out


@pytest.fixture
def cublas(cuda, monkeypatch):
    """The cuBLAS binding jitort calls, its calls listed: the stand-in on the simulator (device
    addresses are the simulator arrays' host memory), CuPy's on a GPU. Convolutions take the
    cuBLAS path: cuDNN (preferred where it serves) only with the ``cudnn`` fixture."""
    from jitort.kernels.cuda import blas, dnn
    from tests.cuda.standin_cublas import Listed, StandInCublas
    if SIMULATOR:
        monkeypatch.setattr(blas, "address",
                            lambda arr, off: arr._ary.ctypes.data + off * arr._ary.itemsize)
    listed = _listed(monkeypatch, blas, StandInCublas, Listed,
                     "cuBLAS cannot run here (CuPy missing, or JITORT_CUDA_BLAS=own)")
    monkeypatch.setattr(dnn, "_lib", None)
    return listed


@pytest.fixture
def cudnn(cublas, monkeypatch):
    """The cuDNN binding jitort calls, its convolutions listed: the stand-in on the simulator
    (heuristics answering one FMA algorithm; a test may set ``cudnn.lib.ranked``), the library
    on a GPU. cuBLAS is the ``cublas`` fixture's, as a GPU has both."""
    from jitort.kernels.cuda import dnn
    from tests.cuda.standin_cudnn import Listed, StandInCudnn
    return _listed(monkeypatch, dnn, StandInCudnn, Listed,
                   "cuDNN cannot run here (not installed, or JITORT_CUDA_DNN=off)")
