import math
import time

import numpy as np
import pytest
from numba import njit

from jitort.kernels.cpu import mathfn as M


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _map_exp(x, out):
    for i in range(x.shape[0]):
        out[i] = M.exp32(x[i])


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


@njit(cache=True, error_model='numpy', fastmath={'reassoc', 'contract', 'arcp'})
def _map_np_exp(x, out):
    for i in range(x.shape[0]):
        out[i] = np.exp(x[i])


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


def test_exp32_speed_smoke():
    """Printed, not asserted: vectorized exp32 vs scalar libm np.exp inside njit."""
    x = np.linspace(-10, 10, 16 * 1024 * 1024, dtype=np.float32)
    out = np.empty_like(x)
    times = {}
    for name, fn in (('exp32', _map_exp), ('np.exp', _map_np_exp)):
        fn(x, out)          # compile + first-touch the pages
        t0 = time.perf_counter()
        fn(x, out)
        times[name] = time.perf_counter() - t0
    print(f"\n16M float32 exp: exp32 {times['exp32'] * 1e3:.1f} ms, "
          f"np.exp-in-njit {times['np.exp'] * 1e3:.1f} ms "
          f"({times['np.exp'] / times['exp32']:.1f}x)")
