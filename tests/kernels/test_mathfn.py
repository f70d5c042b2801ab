import math
import platform
import re

import numpy as np
import pytest
from numba import njit

from jitort.kernels.cpu import mathfn as M


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _map_exp(x, out):
    for i in range(x.shape[0]):
        out[i] = M.exp32(x[i])


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _map_expneg(x, out):
    for i in range(x.shape[0]):
        out[i] = M.expneg32(x[i])


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _map_sigmoid(x, out):
    for i in range(x.shape[0]):
        out[i] = M.sigmoid32(x[i])


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _map_tanh(x, out):
    for i in range(x.shape[0]):
        out[i] = M.tanh32(x[i])


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _map_erf(x, out):
    for i in range(x.shape[0]):
        out[i] = M.erf32(x[i])


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _map_log(x, out):
    for i in range(x.shape[0]):
        out[i] = M.log32(x[i])


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _map_generic(x, out, which):
    for i in range(x.shape[0]):
        v = x[i]
        if which == 0:
            out[i] = M.fexp(v)
        elif which == 1:
            out[i] = M.fsigmoid(v)
        elif which == 2:
            out[i] = M.ftanh(v)
        elif which == 3:
            out[i] = M.ferf(v)
        else:
            out[i] = M.flog(v)


SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-38, -1e-38,
                     88.72, 88.73, -87.3, -103.0, -104.5, 3.4e38, -3.4e38, 1.0, -1.0],
                    np.float32)


def _grid(lo, hi, n=1_000_000):
    return np.concatenate([np.linspace(lo, hi, n, dtype=np.float32), SPECIALS])


def _run(fn, x):
    out = np.empty_like(x)
    fn(x, out)
    return out


def _max_rel(got, ref, tiny=1.2e-38):
    """Max relative error where the float32-rounded reference is finite and normal."""
    with np.errstate(over='ignore'):
        ref32 = ref.astype(np.float32)
    m = np.isfinite(ref32) & (np.abs(ref) >= tiny)
    return np.max(np.abs(got[m].astype(np.float64) - ref[m]) / np.abs(ref[m]))


def _same_specials(got, ref):
    """Inf/NaN pattern must match the float32-rounded reference."""
    with np.errstate(over='ignore'):
        ref32 = ref.astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref32))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(ref32))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(ref32))


_erf64 = np.vectorize(math.erf, otypes=[np.float64])


def test_exp32():
    x = _grid(-110, 95)
    with np.errstate(all='ignore'):
        ref = np.exp(x.astype(np.float64))
    got = _run(_map_exp, x)
    assert _max_rel(got, ref) < 1e-6
    _same_specials(got, ref)
    den = (ref > 0) & (ref < 1.2e-38)
    assert np.max(np.abs(got[den] - ref[den])) < 3e-45      # smooth denormal underflow
    assert got[x == -np.inf][0] == 0 and got[x == np.inf][0] == np.inf


def test_expneg32():
    """softmax's exp: exp32's accuracy for x in [-87.3, 88]; below, where the result is
    about 2**-126 or less, exactly 0 (never denormal)."""
    x = np.concatenate([_grid(-110, 0), np.array([np.nan, -np.inf, -3.4e38, -87.3, -87.31,
                                                  -87.34, 5.0, 88.0], np.float32)])
    with np.errstate(all='ignore'):
        ref = np.exp(x.astype(np.float64))
    got = _run(_map_expneg, x)
    normal = (x >= np.float32(-87.3)) & (x <= 88)
    assert _max_rel(got[normal], ref[normal]) < 1e-6
    assert (got[x < np.float32(-87.3)] == 0).all()
    assert np.isnan(got[np.isnan(x)]).all()
    assert not ((got > 0) & (got < 2.0 ** -126)).any()


def test_sigmoid32():
    x = _grid(-100, 100)
    with np.errstate(all='ignore'):
        ref = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
    got = _run(_map_sigmoid, x)
    assert _max_rel(got, ref, tiny=1e-37) < 1e-6
    _same_specials(got, ref)
    assert got[x == -np.inf][0] == 0 and got[x == np.inf][0] == 1
    assert got[x == 3.4e38][0] == 1 and got[x == -3.4e38][0] == 0


def test_tanh32():
    x = np.concatenate([_grid(-12, 12), np.logspace(-30, 1, 100_000, dtype=np.float32)])
    x = np.concatenate([x, -x])
    ref = np.tanh(x.astype(np.float64))
    got = _run(_map_tanh, x)
    assert _max_rel(got, ref) < 1e-6
    _same_specials(got, ref)
    assert got[x == np.inf][0] == 1 and got[x == -np.inf][0] == -1
    assert np.signbit(got[(x == 0) & np.signbit(x)]).all()


def test_erf32():
    x = np.concatenate([_grid(-6, 6), np.logspace(-30, 1, 100_000, dtype=np.float32)])
    x = np.concatenate([x, -x])
    ref = _erf64(x.astype(np.float64))
    got = _run(_map_erf, x)
    assert _max_rel(got, ref) < 1e-6
    _same_specials(got, ref)
    assert got[x == np.inf][0] == 1 and got[x == -np.inf][0] == -1


def test_log32():
    x = np.concatenate([np.logspace(-45.5, 38.5, 1_000_000).astype(np.float32),
                        np.linspace(0.5, 2, 100_000, dtype=np.float32), SPECIALS])
    with np.errstate(all='ignore'):
        ref = np.log(x.astype(np.float64))
    got = _run(_map_log, x)
    near1 = (x > 0.5) & (x < 2)
    assert np.max(np.abs(got[near1] - ref[near1])) < 1e-7   # absolute near log(1) = 0
    assert _max_rel(got[~near1], ref[~near1]) < 1e-6
    _same_specials(got, ref)


@pytest.mark.parametrize('which', range(5))
def test_generic_wrappers(which):
    x32 = np.concatenate([np.linspace(-20, 20, 10_001, dtype=np.float32), SPECIALS])
    if which == 4:
        x32 = np.abs(x32)
    x64 = x32.astype(np.float64)
    ref_fn = [np.exp, lambda v: 1 / (1 + np.exp(-v)), np.tanh, _erf64, np.log][which]
    with np.errstate(all='ignore'):
        ref = ref_fn(x64)
        o32, o64 = np.empty_like(x32), np.empty_like(x64)
        _map_generic(x32, o32, which)
        _map_generic(x64, o64, which)
        ref32 = ref.astype(np.float32)
    # atol: sigmoid32 flushes results below ~1e-38 (e.g. sigmoid(-103)) to 0
    np.testing.assert_allclose(o32, ref32, rtol=1e-6, atol=1e-38)
    np.testing.assert_allclose(o64, ref, rtol=1e-14, atol=0)     # libm path


def _asm(fn) -> str:
    return "".join(fn.inspect_asm().values())


def _host_has_avx512() -> bool:
    import llvmlite.binding as llb
    from numba.core import config
    if config.CPU_NAME or config.CPU_FEATURES:   # a target forced by the user: not the host's
        return False
    return bool(llb.get_host_cpu_features().get('avx512f'))


_FM = {'reassoc', 'contract', 'arcp'}


@njit(error_model='numpy', fastmath=_FM)   # not cached: the asm is read back
def _silu(x, out):
    for i in range(x.shape[0]):
        v = x[i]
        out[i] = v * M.sigmoid32(v)


@njit(error_model='numpy', fastmath=_FM)
def _silu_wide(x, out):
    for i in range(x.shape[0]):
        M.wide_vectors()
        v = x[i]
        out[i] = v * M.sigmoid32(v)


@pytest.mark.skipif(platform.machine() not in ('x86_64', 'AMD64'), reason='x86 vector registers')
def test_polynomial_functions_compile_to_packed_vector_code():
    """The reason these helpers exist: a loop over exp32 vectorizes (libm's exp is a scalar
    call per element). Their speed is measured by benchmarks/test_bench_ops.py."""
    x = np.linspace(-10, 10, 1001, dtype=np.float32)
    out = np.empty_like(x)
    _silu(x, out)
    assert re.search(r'vfmadd\w+ps\s+%[yz]mm', _asm(_silu))


def test_wide_vectors_takes_512_bit_registers_where_the_cpu_has_them():
    x = np.random.default_rng(0).standard_normal(4099).astype(np.float32)
    want, got = np.empty_like(x), np.empty_like(x)
    _silu(x, want)
    _silu_wide(x, got)
    np.testing.assert_array_equal(got, want)   # same arithmetic, wider registers
    if platform.machine() not in ('x86_64', 'AMD64') or not _host_has_avx512():
        pytest.skip('no AVX-512 on this CPU: only the results are compared')
    # Only the wide variant is asserted: whether LLVM's default already takes zmm registers is
    # its per-CPU tuning choice (256-bit on Skylake-X and Zen 4; the CI's Zen 5 host takes 512).
    assert re.search(r'vfmadd\w+ps\s+%zmm', _asm(_silu_wide))