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


@pytest.fixture
def cublas(cuda, monkeypatch):
    """The cuBLAS binding jitort calls, its calls listed: the stand-in on the simulator (device
    addresses are the simulator arrays' host memory), CuPy's on a GPU."""
    from jitort.kernels.cuda import blas
    from tests.cuda.standin_cublas import Listed, StandInCublas
    if SIMULATOR:
        lib = StandInCublas()
        monkeypatch.setattr(blas, "address",
                            lambda arr, off: arr._ary.ctypes.data + off * arr._ary.itemsize)
    else:
        lib = blas._load()
        if lib is None:
            pytest.skip("cuBLAS cannot run here (CuPy missing, or JITORT_CUDA_BLAS=own)")
    listed = Listed(lib)
    monkeypatch.setattr(blas, "_lib", listed)
    monkeypatch.setattr(blas, "_local", type(blas._local)())  # a new handle: its mode is listed
    return listed
