"""Concat / Split copies (kernels/cpu/data.py) against numpy, on the (outer, axis, inner)
views the compiler passes, including size-0 parts and the last axis (inner == 1)."""
import numpy as np
import pytest

from jitort.kernels.cpu import data as D

SHAPES = [  # (outer, [axis lengths of the parts], inner)
    (128, [256, 256, 256], 1),      # gpt2's qkv Split on the last axis
    (1, [3, 5], 7),
    (4, [1, 0, 2], 3),              # a size-0 part
    (0, [2, 3], 4),                 # size-0 outer
    (3, [2, 2], 0),                 # size-0 inner
    (5, [7], 1),
    (2, [9, 1, 4], 33),
]


@pytest.mark.parametrize('outer,parts,inner', SHAPES)
@pytest.mark.parametrize('dtype', [np.float32, np.int64])
def test_split_and_concat(outer, parts, inner, dtype):
    rng = np.random.default_rng(0)
    total = sum(parts)
    x = (rng.standard_normal((outer, total, inner)) * 100).astype(dtype)
    offs = np.cumsum([0] + parts)
    outs = []
    for a, off in zip(parts, offs):
        y = np.full((outer, a, inner), -1, dtype)
        D.copy3_from(x, y, off)
        np.testing.assert_array_equal(y, x[:, off:off + a, :])
        outs.append(y)
    back = np.full_like(x, -7)
    for y, off in zip(outs, offs):
        D.copy3_into(y, back, off)
    np.testing.assert_array_equal(back, x)


def test_concat_leaves_other_parts_alone():
    out = np.zeros((3, 6, 2), np.float32)
    part = np.ones((3, 2, 2), np.float32)
    D.copy3_into(part, out, 3)
    ref = np.zeros_like(out)
    ref[:, 3:5, :] = 1
    np.testing.assert_array_equal(out, ref)
