"""The choices the CUDA launchers make while a plan's work is recorded, as calibration decided.

A launcher that has several ways to do its work (cuBLAS or jitort's own kernel for a product;
cuDNN, cuBLAS over im2col columns, the tiled implicit GEMM or the direct kernel for a
convolution)
asks :func:`decide` with the problem's *bucket* (shape classes, below), the candidates that can
run it and its default rule's pick. :data:`PICKS` holds what calibration measured on this GPU
(``jitort tune --device cuda``; ``jitort.tuning_cuda`` writes it here, as ``jitort.tuning``
writes ``kernels.cpu.tunables`` for the CPU's kernels); a bucket it holds no pick for follows
the default rule. The decision is taken when a plan's work is recorded (once per plan and
thread), so it costs nothing per call and a new calibration applies to plans bound after it.
Calibration measures float32 problems; the launchers consult it for float32 only (float16 runs
on tensor cores, float64 at another rate: both keep the default rules).

This module imports nothing from numba at import: the bucket classes are plain Python, shared
with the choices' definitions in jitort (the kernel library never imports jitort).
"""
from bisect import bisect_left

#: the candidates of each choice, in the launchers' order of preference
GEMM_ALGORITHMS = ("cublas", "tiled")
CONV_ALGORITHMS = ("cudnn", "cublas", "tiled", "direct")

#: choice name -> {bucket: candidate name}, measured on this GPU
PICKS: dict = {}
#: choice name -> candidates calibration found far slower than the best in most buckets: the
#: default rule does not pick them where nothing was measured
DEMOTED: dict = {}

# Representatives of the shape classes: a bucket is a tuple of them, so a bucket is also the
# problem calibration measures for it.
ROWS = (1, 4, 16, 64, 256, 2048)     # rows of a product: 1, 2-7, 8-31, 32-127, 128-1023, more
_ROW_BOUNDS = (1, 7, 31, 127, 1023)
DIMS = (64, 256, 1024, 4096)         # K, N: up to 128, 512, 2048, more
_DIM_BOUNDS = (128, 512, 2048)
BATCHES = (1, 16)                    # products per call: one, several (attention's heads)
KERNELS = (1, 3, 7)                  # a convolution's kernel side: 1, 2-4, more
# channels per group: 1 (depthwise), up to 8, 22, 45, 90, 181, more
CHANNELS = (1, 4, 16, 32, 64, 128, 256)
_CHANNEL_BOUNDS = (1, 8, 22, 45, 90, 181)
POSITIONS = (49, 196, 784, 3136, 12544, 50176)  # images x output plane: up to 64, 256, ...
_POSITION_BOUNDS = (64, 256, 1024, 4096, 16384)
GROUPS = (1, 4, 32)                  # 1, 2-7, 8 or more


def _klass(value: int, bounds: tuple, reps: tuple) -> int:
    return reps[bisect_left(bounds, value)]


def gemm_bucket(nb: int, m: int, n: int, k: int) -> tuple:
    """(rows, K, N, batch) classes of ``nb`` products of (m, k) @ (k, n)."""
    return (_klass(m, _ROW_BOUNDS, ROWS), _klass(k, _DIM_BOUNDS, DIMS),
            _klass(n, _DIM_BOUNDS, DIMS), BATCHES[nb > 1])


def conv_bucket(n: int, c: int, kout: int, kh: int, kw: int, oh: int, ow: int, sh: int,
                group: int) -> tuple:
    """(kernel side, stride, input and output channels per group, images x output plane,
    groups) classes of a convolution."""
    side = max(kh, kw)
    return (KERNELS[(side > 1) + (side > 4)], 1 if sh <= 1 else 2,
            _klass(c // group, _CHANNEL_BOUNDS, CHANNELS),
            _klass(kout // group, _CHANNEL_BOUNDS, CHANNELS),
            _klass(n * oh * ow, _POSITION_BOUNDS, POSITIONS), GROUPS[(group > 1) + (group > 7)])


def decide(choice: str, bucket: tuple, applicable: tuple, default: str) -> str:
    """The candidate a launcher runs: the calibrated pick of ``bucket`` where it can run the
    problem (``applicable``), else ``default`` -- unless calibration demoted that one, then
    the first applicable candidate it did not demote."""
    pick = PICKS.get(choice, {}).get(bucket)
    if pick in applicable:
        return pick
    demoted = DEMOTED.get(choice, ())
    if default in demoted:
        for name in applicable:
            if name not in demoted:
                return name
    return default


def set_decisions(choice: str, picks: dict, demoted=()) -> None:
    """Replace ``choice``'s calibrated picks ({bucket tuple: candidate}) and demotions."""
    PICKS[choice] = dict(picks)
    DEMOTED[choice] = frozenset(demoted)


def gpu_identity() -> dict | None:
    """What calibration's decisions hold for: the GPU's name, compute capability,
    multiprocessors and memory, the driver, whether cuBLAS serves (CuPy's version), cuDNN's
    version (None: not used) and whether float32 products may use TF32 -- each can change
    which candidate wins. None where numba's CUDA target cannot run; the simulator is a device
    of its own (its decisions never reach a GPU)."""
    try:
        from numba import cuda
        if not cuda.is_available():
            return None
        dev = cuda.current_context().device
    except Exception:  # noqa: BLE001 - no CUDA here: the launchers follow their rules
        return None
    from . import blas, dnn
    name = getattr(dev, "name", None) or "numba CUDA simulator"
    ident = {"gpu": name.decode() if isinstance(name, bytes) else str(name),
             "cc": list(getattr(dev, "compute_capability", (0, 0))), "cublas": None,
             "tf32": blas.tf32()}
    if "simulator" not in type(dev).__module__:
        ident["sms"] = int(dev.MULTIPROCESSOR_COUNT)
        ident["memory"] = int(cuda.current_context().get_memory_info()[1])
        try:
            from numba.cuda.cudadrv.driver import driver
            ident["driver"] = list(driver.get_version())
        except Exception:  # noqa: BLE001 - a numba-cuda without it: the rest still identifies
            ident["driver"] = None
        if blas.library() is not None:
            ident["cublas"] = blas._cupy.__version__
        lib = dnn.library()
        ident["cudnn"] = None if lib is None else lib.version()
    return ident
