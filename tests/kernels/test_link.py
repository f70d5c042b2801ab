"""Big library functions are compiled once and called by reference (kernels/_link.py).

A caller's cached object then needs its callees' compiled code loaded first: these tests run
fresh processes on one temporary kernel cache and check that a cached caller loads with no
compilation, also against another process's build of its callee, and that a caller whose
callee's cache entry went away is compiled again (never loaded with an unresolved symbol,
which would end the process).
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jitort.kernels import _link

ROOT = Path(__file__).resolve().parents[2]

# _maxpool_ser (small, serial) calls _maxpool_plane (~2,000 LLVM instructions), which calls
# _pad_plane and _flat_rows (both over MIN_INSTRUCTIONS)
CHILD = r"""
import numpy as np
from numba.core import event
n = [0]
class Count(event.Listener):
    def on_start(self, ev): n[0] += 1
    def on_end(self, ev): pass
event.register("numba:compile", Count())
from jitort.kernels import _link
from jitort.kernels.cpu import pool
x = np.random.default_rng(0).standard_normal((6, 9, 11)).astype(np.float32)
out = np.full((6, 7, 9), np.nan, np.float32)
pool._maxpool_ser(x, out, 3, 3, 1, 1, 0, 0, 1, 1)
ref = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(1, 2)).max(axis=(-1, -2))
np.testing.assert_array_equal(out, ref)
(cres,) = pool._maxpool_ser.overloads.values()
refs = [_link._split(m)[1]
        for m in _link.needs(cres.library._get_module_for_linking(), cres.fndesc.mangled_name)]
print("refs", sorted(refs))
print("compiles", n[0])
"""


def _run(cache: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, JITORT_KERNEL_CACHE_DIR=str(cache), NUMBA_CACHE_DIR=str(cache))
    env.pop("JITORT_KERNEL_LINK", None)
    p = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                       text=True, cwd="/", timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    return p


def _compiles(p) -> int:
    return int(p.stdout.split("compiles")[-1])


def test_split_reads_module_and_function_of_a_mangled_name():
    name = ("_ZN6jitort7kernels3cpu8winograd10_wino_taskB3v57B152c8tJTC_2fWQAliW1xhDEoY6EEMEUOE"
            "5ArrayIfLi4E1C7mutable7alignedExxb")
    assert _link._split(name) == ("jitort.kernels.cpu.winograd", "_wino_task")
    assert _link._split("cfunc._ZN6jitort7kernels3cpu4pool1fB2v1Ex") is None
    # a closure (escaped qualname) names no module-level dispatcher
    assert _link._dispatcher("_ZN6jitort7kernels3cpu4pool1f12_3clocals_3e1gB2v1Ex") is None
    assert _link._split("_ZN6jitort7kernels3cpu8winograd9_wino_taskB3v57Ex") is None  # bad length
    assert _link._split("memcpy") is None


def test_an_unknown_callee_is_a_stale_link_not_a_crash():
    with pytest.raises(_link.StaleLink):
        _link.ensure("_ZN6jitort7kernels3cpu4pool14_maxpool_planeB6v99999Ex")
    with pytest.raises(_link.StaleLink):
        _link.ensure("_ZN6jitort7kernels3cpu4pool12no_such_funcB2v1Ex")


def test_cached_callers_load_their_callees_and_a_stale_one_is_compiled_again(tmp_path):
    cache = tmp_path / "cache"
    first = _run(cache)
    assert _compiles(first) > 0
    # the caller's object calls the big callee instead of containing a copy of it
    assert "'_maxpool_plane'" in first.stdout, first.stdout
    again = _run(cache)
    assert _compiles(again) == 0, again.stdout + again.stderr
    assert "'_maxpool_plane'" in again.stdout
    # another process's build of the callee (from nothing, in its own cache) replaces this
    # one's: the cached caller names the same symbol and loads against it
    other = _run(tmp_path / "other")
    assert _compiles(other) > 0
    for f in cache.rglob("pool._maxpool_plane-*"):
        f.unlink()
    for f in (tmp_path / "other").rglob("pool._maxpool_plane-*"):
        shutil.copy(f, next(cache.rglob("pool-*")) / f.name)
    rebuilt = _run(cache)
    assert _compiles(rebuilt) == 0, rebuilt.stdout + rebuilt.stderr
    # the callee's cache entry goes: the cached caller is compiled again, nothing crashes
    (index,) = cache.rglob("pool._maxpool_plane-*.nbi")
    index.unlink()
    stale = _run(cache)
    assert _compiles(stale) >= 2, stale.stdout  # the callee and the caller
    assert "CacheWarning" not in stale.stderr, stale.stderr
    healed = _run(cache)
    assert _compiles(healed) == 0, healed.stdout + healed.stderr


LSR_CHILD = r"""
import llvmlite.binding as ll
import numpy as np
from numba import njit
from jitort.kernels import _link
from jitort.kernels.cpu import pool
calls = []
set_option = ll.set_option
def record(name, option):
    calls.append(option)
    set_option(name, option)
ll.set_option = record

@njit
def user_loop(a):
    s = 0.0
    for i in range(a.size):
        s += a[i]
    return s

user_loop(np.ones(4))
print("user", calls)
del calls[:]
x = np.zeros((2, 5, 5), np.float32)
pool._maxpool_ser(x, np.zeros((2, 3, 3), np.float32), 3, 3, 1, 1, 0, 0, 1, 1)
print("kernel", sorted(set(calls)), len(calls) % 2)
print("mode", _link.mode())
"""


@pytest.mark.parametrize("lsr", ["", "1"])
def test_loop_strength_reduction_is_off_only_for_jitort_code(tmp_path, lsr):
    """jitort's code is emitted without LLVM's loop strength reduction (set for that emission
    and reset after it), a user's own Numba function in the same process with it; with
    ``JITORT_KERNEL_LSR=1`` never touched; the setting is part of the cache key."""
    env = dict(os.environ, JITORT_KERNEL_CACHE_DIR=str(tmp_path), NUMBA_CACHE_DIR=str(tmp_path),
               JITORT_KERNEL_LSR=lsr)
    env.pop("JITORT_KERNEL_LINK", None)
    p = subprocess.run([sys.executable, "-c", LSR_CHILD], env=env, capture_output=True,
                       text=True, cwd="/", timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    out = dict(line.split(" ", 1) for line in p.stdout.splitlines())
    assert out["user"] == "[]"
    if lsr:
        assert out["kernel"] == "[] 0" and out["mode"] == "link 2"
    else:  # set and reset around each emission of a library function
        assert out["kernel"] == "['-disable-lsr=false', '-disable-lsr=true'] 0"
        assert out["mode"] == "link 2 nolsr"


def test_install_is_idempotent_and_checks_the_numba_version(monkeypatch):
    import numba
    from numba.core import caching, codegen

    import jitort.kernels as kernels
    kernels.install()
    kernels.install()
    assert kernels._installed and _link._installed
    if not _link.mode().startswith("copy"):
        assert caching.Cache._load_overload is _link._load_overload
        assert codegen.CPUCodeLibrary._get_module_for_linking is _link._module_for_linking
    lo, hi = _link.CHECKED
    for outside in (f"{lo[0]}.{lo[1] - 1}.0", f"{hi[0]}.{hi[1] + 1}.0rc1"):
        monkeypatch.setattr(numba, "__version__", outside)
        with pytest.warns(RuntimeWarning, match="checked against Numba"):
            assert not _link.check_numba("test")
