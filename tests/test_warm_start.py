"""Start-up on warm caches: what a fresh process finds on disk instead of compiling again.

- The worker pool's machine code (kernels/cpu/workers.py) is cached under the kernel cache
  root, keyed by its LLVM text, Numba's target (CPU name and features) and versions: a second
  process loads it, a damaged entry is compiled again, another option compiles another entry.

Every test runs fresh processes against empty temporary caches.
"""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# A parallel region run on the pool: the sum of a prange loop, and the pool's job counter
POOL_CHILD = """
import numba, numpy as np
import jitort.kernels.cpu  # installs the pool
from jitort.kernels.cpu import workers

@numba.njit(parallel=True)
def total(x):
    s = 0.0
    for i in numba.prange(x.shape[0]):
        s += x[i]
    return s

x = np.arange(100_000, dtype=np.float64)
assert workers.installed()
before = int(workers.state()[workers.EPOCH]) >> 8
print("sum", total(x), "regions", (int(workers.state()[workers.EPOCH]) >> 8) - before)
"""


def _run(code: str, env: dict) -> str:
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def _pool_env(tmp_path: Path, **extra) -> dict:
    env = dict(os.environ, JITORT_KERNEL_CACHE_DIR=str(tmp_path / "kernels"),
               NUMBA_NUM_THREADS="2", **extra)
    env.pop("JITORT_THREAD_POOL", None)
    return env


def _entries(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "kernels" / "workers").glob("*.pkl"))


def test_pool_code_cached_reloaded_repaired_keyed(tmp_path):
    """Compiled and written once; loaded by the next process (the entry left as it was); a
    damaged entry compiled again and rewritten; JITORT_SPIN_PAUSE=0 (other code) another entry."""
    env = _pool_env(tmp_path)
    want = f"sum {float(sum(range(100_000)))} regions 1"
    assert want in _run(POOL_CHILD, env)
    (entry,) = _entries(tmp_path)
    stamp = entry.stat().st_mtime_ns
    assert want in _run(POOL_CHILD, env)
    assert _entries(tmp_path) == [entry] and entry.stat().st_mtime_ns == stamp
    entry.write_bytes(b"not a pickle")
    assert want in _run(POOL_CHILD, env)
    assert entry.read_bytes() != b"not a pickle"
    assert want in _run(POOL_CHILD, _pool_env(tmp_path, JITORT_SPIN_PAUSE="0"))
    assert len(_entries(tmp_path)) == 2
