"""ai.onnx.ml kernels other than the tree ensembles (kernels/cpu/trees.py): linear models,
Scaler, Normalizer. Float64 sums, written in the output dtype; post transforms as
onnxruntime's (``trees.transform_row``)."""

import math

import numpy as np
from numba import njit

from .trees import transform_row


@njit(cache=True, error_model='numpy')
def linear(x, w, b, post, z):
    """z (rows, targets) = x (rows, feats) @ w (targets, feats).T + b, then ``post`` per row."""
    n, f = x.shape
    nt = w.shape[0]
    s = np.empty(nt, np.float64)
    for r in range(n):
        for j in range(nt):
            a = b[j]
            for k in range(f):
                a += np.float64(x[r, k]) * w[j, k]
            s[j] = np.float32(a)
        transform_row(s, nt, post)
        for j in range(nt):
            z[r, j] = s[j]


@njit(cache=True, error_model='numpy')
def linear_classifier(x, w, b, post, labels, z, y):
    """LinearClassifier with two or more coefficient rows: label of the first greatest raw
    score, scores through ``post``."""
    n, f = x.shape
    nt = w.shape[0]
    s = np.empty(nt, np.float64)
    for r in range(n):
        best = 0
        for j in range(nt):
            a = b[j]
            for k in range(f):
                a += np.float64(x[r, k]) * w[j, k]
            s[j] = np.float32(a)
            if s[j] > s[best]:
                best = j
        y[r] = labels[best]
        transform_row(s, nt, post)
        for j in range(nt):
            z[r, j] = s[j]


@njit(cache=True, error_model='numpy')
def scaler(x, offset, scale, y):
    """y = (x - offset) * scale, per feature (one value broadcast when of length 1)."""
    n, f = x.shape
    no, ns = offset.shape[0], scale.shape[0]
    for r in range(n):
        for k in range(f):
            o = offset[0] if no == 1 else offset[k]
            c = scale[0] if ns == 1 else scale[k]
            y[r, k] = (np.float64(x[r, k]) - o) * c


@njit(cache=True, error_model='numpy')
def normalizer(x, norm, y):
    """Rows divided by their max (0), L1 (1) or L2 (2) norm."""
    n, f = x.shape
    for r in range(n):
        if norm == 0:
            d = -np.inf
            for k in range(f):
                d = max(d, np.float64(x[r, k]))
        elif norm == 1:
            d = 0.0
            for k in range(f):
                d += abs(np.float64(x[r, k]))
        else:
            d = 0.0
            for k in range(f):
                d += np.float64(x[r, k]) * np.float64(x[r, k])
            d = math.sqrt(d)
        for k in range(f):
            y[r, k] = np.float64(x[r, k]) / d


@njit(cache=True, error_model='numpy')
def take_columns(x, idx, y):
    """y[r, j] = x[r, idx[j]] (ArrayFeatureExtractor over the last axis)."""
    for r in range(x.shape[0]):
        for j in range(idx.shape[0]):
            y[r, j] = x[r, idx[j]]
