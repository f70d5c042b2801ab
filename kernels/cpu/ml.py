"""ai.onnx.ml kernels other than the tree ensembles (kernels/cpu/trees.py): linear models,
Scaler, Normalizer, Binarizer, Imputer, OneHotEncoder, LabelEncoder, FeatureVectorizer and
the support vector machines. Float64 sums, written in the output dtype; post transforms as
onnxruntime's (``trees.transform_row``); the SVMs' kernel values, decision values and
probability coupling in float32 where onnxruntime computes in float32."""

import math

import numpy as np
from numba import njit, prange

from .linear_tile import TW, scores_tiles
from .mathfn import exp32, expneg32, sigmoid32
from .ptr import eptr
from .trees import _probit, transform_row


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


@njit(cache=True, inline='always', error_model='numpy')
def _normalized(v, d, norm):
    """``v`` (float32) of a row whose max (0), L1 (1) or sum of squares (2) is ``d``, as
    onnxruntime's Normalizer: ``v / d``, or ``sign(v) * sqrt(v * v / d)`` under L2; the row
    as it is where ``d`` is 0."""
    if d == 0:
        return v
    if norm == 2:
        r = np.float32(math.sqrt(v * v / d))
        return -r if v < 0 else r
    return v / d


@njit(cache=True, error_model='numpy')
def normalizer(x, norm, y):
    """Rows normalized by their max (0), L1 (1) or L2 (2) norm in float32 (:func:`_normalized`)."""
    n, f = x.shape
    for r in range(n):
        d = np.float32(x[r, 0]) if norm == 0 and f else np.float32(0.0)
        for k in range(f):
            v = np.float32(x[r, k])
            if norm == 0:
                d = v if v > d else d
            elif norm == 1:
                d += abs(v)
            else:
                d += v * v
        for k in range(f):
            y[r, k] = _normalized(np.float32(x[r, k]), d, norm)


@njit(cache=True, error_model='numpy')
def take_columns(x, idx, y):
    """y[r, j] = x[r, idx[j]] (ArrayFeatureExtractor over the last axis)."""
    for r in range(x.shape[0]):
        for j in range(idx.shape[0]):
            y[r, j] = x[r, idx[j]]


@njit(cache=True, error_model='numpy')
def binarizer(x, threshold, y):
    """y = 1 where x > threshold else 0 (flat); a NaN is an error, as in onnxruntime."""
    t = threshold[0]
    for i in range(x.shape[0]):
        v = x[i]
        if v != v:
            raise ValueError("Binarizer: the input holds a NaN")
        y[i] = 1 if v > t else 0


@njit(cache=True, error_model='numpy')
def imputer(x, replaced, imputed, stride, y):
    """Imputer (flat): values equal to ``replaced[0]`` (or NaN where it is NaN) become
    ``imputed[i % stride]`` when there is one per feature, else ``imputed[0]``."""
    rep = replaced[0]
    nan = rep != rep
    per = imputed.shape[0] == stride
    for i in range(x.shape[0]):
        v = x[i]
        if (nan and v != v) or v == rep:
            y[i] = imputed[i % stride] if per else imputed[0]
        else:
            y[i] = v


@njit(cache=True, error_model='numpy')
def one_hot(x, cats, pos, zeros, y):
    """OneHotEncoder: y[i, pos[k]] = 1 where int64(x[i]) == cats[k] (``cats`` sorted); an
    unknown category is all zeros, or an error when ``zeros`` is 0."""
    nc = cats.shape[0]
    for i in range(x.shape[0]):
        for j in range(y.shape[1]):
            y[i, j] = 0
        v = np.int64(x[i])
        k = np.searchsorted(cats, v)
        if k < nc and cats[k] == v:
            y[i, pos[k]] = 1
        elif zeros == 0:
            raise ValueError("OneHotEncoder: a category outside cats_int64s (zeros=0)")


@njit(cache=True, error_model='numpy')
def label_encode(x, keys, vals, default, nanval, hasnan, y):
    """LabelEncoder (flat): the value of ``x[i]``'s key in ``keys`` (sorted, no NaN), else
    ``default[0]``; a NaN input takes ``nanval[0]`` where a key is NaN (``hasnan``)."""
    nk = keys.shape[0]
    for i in range(x.shape[0]):
        v = x[i]
        if v != v:
            y[i] = nanval[0] if hasnan else default[0]
            continue
        k = np.searchsorted(keys, v)
        y[i] = vals[k] if k < nk and keys[k] == v else default[0]


@njit(cache=True, error_model='numpy')
def put_columns(x, off, width, y):
    """FeatureVectorizer: y[:, off:off + width] = x's first ``width`` columns as float, zero
    where x has fewer."""
    w = x.shape[1]
    for r in range(y.shape[0]):
        for j in range(width):
            y[r, off + j] = x[r, j] if j < w else 0


# --------------------------------------------------------------------------------------------
# support vector machines (onnxruntime's svmclassifier.cc / svmregressor.cc)
# --------------------------------------------------------------------------------------------
@njit(cache=True, inline='always')
def _kernel_row(x, r, sv, ktype, gamma, coef0, degree, c, k):
    f = x.shape[1]
    for v in range(sv.shape[0]):
        if ktype == 2:  # float32 sums, as onnxruntime's loop
            a32 = np.float32(0.0)
            for j in range(f):
                d = np.float32(x[r, j]) - sv[v, j]
                a32 += d * d
            k[r, v] = np.float32(math.exp(-gamma * np.float64(a32)))
            continue
        a = 0.0
        for j in range(f):
            a += np.float64(np.float32(x[r, j])) * np.float64(sv[v, j])
        if ktype == 0:
            k[r, v] = np.float32(a + c)
            continue
        t = np.float32(gamma * a + coef0)
        if ktype == 3:
            k[r, v] = np.float32(math.tanh(t))
        elif degree == 2:
            k[r, v] = t * t
        elif degree == 3:
            k[r, v] = t * t * t
        else:
            k[r, v] = np.float32(np.float64(t) ** degree)


@njit(cache=True, parallel=True, error_model='numpy')
def _svm_kernel_par(x, sv, ktype, gamma, coef0, degree, c, k):
    for r in prange(x.shape[0]):
        _kernel_row(x, r, sv, ktype, gamma, coef0, degree, c, k)


@njit(cache=True, error_model='numpy')
def svm_kernel(x, sv, ktype, params, par, k):
    """k[r, v] = kernel(x[r], sv[v]) as float32, x read as float32 (onnxruntime's
    batched_kernel_dot): 0 LINEAR dot + params[3], 1 POLY (gamma dot + coef0) ** degree,
    2 RBF exp(-gamma |x - sv|^2), 3 SIGMOID tanh(gamma dot + coef0); params = gamma, coef0,
    degree, the LINEAR addend; ``par``: rows over the threads."""
    gamma, coef0, degree, c = params[0], params[1], params[2], params[3]
    if par:
        _svm_kernel_par(x, sv, ktype, gamma, coef0, degree, c, k)
        return
    for r in range(x.shape[0]):
        _kernel_row(x, r, sv, ktype, gamma, coef0, degree, c, k)


@njit(cache=True, error_model='numpy')
def svm_regress(k, coef, rho, one_class, y):
    """SVMRegressor: y[r, 0] = k[r] . coef + rho[0]; ``one_class``: its sign as +-1."""
    for r in range(k.shape[0]):
        a = 0.0
        for v in range(k.shape[1]):
            a += np.float64(k[r, v]) * coef[v]
        a = np.float32(a + rho[0])
        if one_class:
            a = 1.0 if a > 0 else -1.0
        y[r, 0] = a


@njit(cache=True, inline='always')
def _logistic32(v):
    e = np.float32(1.0) / (np.float32(1.0) + np.float32(math.exp(-abs(v))))
    return np.float32(1.0) - e if v < 0 else e


@njit(cache=True, error_model='numpy')
def _multiclass_probability(nc, r, q, qp, p):
    """libsvm's pairwise coupling (onnxruntime's multiclass_probability, float32): class
    probabilities ``p`` from the pairwise ones ``r`` (nc x nc, flat)."""
    one = np.float32(1.0)
    q[:] = 0
    for i in range(nc):
        p[i] = one / np.float32(nc)
        for j in range(i):
            q[i * nc + i] += r[j * nc + i] * r[j * nc + i]
            q[i * nc + j] = q[j * nc + i]
        for j in range(i + 1, nc):
            q[i * nc + i] += r[j * nc + i] * r[j * nc + i]
            q[i * nc + j] = -r[j * nc + i] * r[i * nc + j]
    eps = np.float32(0.005) / np.float32(nc)
    for _ in range(100):
        pqp = np.float32(0.0)
        for i in range(nc):
            qp[i] = 0
            for j in range(nc):
                qp[i] += q[i * nc + j] * p[j]
            pqp += p[i] * qp[i]
        err = np.float32(0.0)
        for i in range(nc):
            err = max(err, abs(qp[i] - pqp))
        if err < eps:
            break
        for i in range(nc):
            diff = (-qp[i] + pqp) / q[i * nc + i]
            p[i] += diff
            pqp = (pqp + diff * (diff * q[i * nc + i] + np.float32(2.0) * qp[i])) / (
                one + diff) / (one + diff)
            for j in range(nc):
                qp[j] = (qp[j] + diff * q[i * nc + j]) / (one + diff)
                p[j] /= (one + diff)


@njit(cache=True, error_model='numpy')
def _pair_scores(k, r, coef, rho, starts, counts, sc, votes):
    """One row's one-vs-one decision values (float32) and votes (onnxruntime's order)."""
    nc = starts.shape[0]
    votes[:] = 0
    idx = 0
    for i in range(nc - 1):
        si, ci = starts[i], counts[i]
        for j in range(i + 1, nc):
            sj, cj = starts[j], counts[j]
            a = 0.0
            for m in range(ci):
                a += coef[j - 1, si + m] * k[r, si + m]
            for m in range(cj):
                a += coef[i, sj + m] * k[r, sj + m]
            a += rho[idx]
            sc[idx] = np.float32(a)
            if a > 0:
                votes[i] += 1
            else:
                votes[j] += 1
            idx += 1


@njit(cache=True, error_model='numpy')
def svm_classify(k, coef, rho, starts, counts, proba, probb, post, labels, z, y):
    """SVMClassifier over support vectors (``k``: their kernel values per row): the label of
    the most voted class (first on ties), scores as onnxruntime's: pairwise coupled
    probabilities (prob_a / prob_b given), else the decision values -- two columns for two
    classes, ``[-s, s]`` (post NONE), the logistic of both (LOGISTIC) or ``[1 - s, s]``."""
    nc = labels.shape[0]
    npair = nc * (nc - 1) // 2
    sc = np.empty(npair, np.float32)
    votes = np.empty(nc, np.int64)
    r2 = np.zeros(nc * nc, np.float32)
    q = np.zeros(nc * nc, np.float32)
    qp = np.zeros(nc, np.float32)
    p = np.zeros(nc, np.float32)
    s = np.empty(max(nc, npair), np.float64)
    lo, hi = np.float32(1e-7), np.float32(1.0) - np.float32(1e-7)
    for r in range(k.shape[0]):
        _pair_scores(k, r, coef, rho, starts, counts, sc, votes)
        best = 0
        for c in range(nc):
            if votes[c] > votes[best]:
                best = c
        y[r] = labels[best]
        if proba.shape[0] > 0:
            idx = 0
            for i in range(nc - 1):
                for j in range(i + 1, nc):
                    v = np.float32(1.0) - _logistic32(sc[idx] * proba[idx] + probb[idx])
                    v = min(max(v, lo), hi)
                    r2[i * nc + j] = v
                    r2[j * nc + i] = np.float32(1.0) - v
                    idx += 1
            _multiclass_probability(nc, r2, q, qp, p)
            for c in range(nc):
                s[c] = p[c]
            transform_row(s, nc, post)
            for c in range(nc):
                z[r, c] = s[c]
        elif nc > 2:
            for c in range(npair):
                s[c] = sc[c]
            transform_row(s, npair, post)
            for c in range(npair):
                z[r, c] = s[c]
        elif post == 2:
            z[r, 0], z[r, 1] = _logistic32(-sc[0]), _logistic32(sc[0])
        else:
            z[r, 0] = -sc[0] if post == 0 else np.float32(1.0) - sc[0]
            z[r, 1] = sc[0]


@njit(cache=True, error_model='numpy')
def svm_linear_classify(sc, post, labels, allpos, proba, z, y):
    """SVMClassifier without support vectors (liblinear form; ``sc``: one score per class):
    the first greatest score's label -- for two classes without probabilities the second
    label where that score is >= 0.5 (all coefficients >= 0) or > 0 -- and the scores through
    ``post``."""
    n, nc = sc.shape
    s = np.empty(nc, np.float64)
    for r in range(n):
        best = 0
        for c in range(nc):
            if sc[r, c] > sc[r, best]:
                best = c
        mw = sc[r, best]
        if nc == 2 and not proba and ((allpos and mw >= 0.5) or (mw > 0 and not allpos)):
            best = 1
        y[r] = labels[best]
        for c in range(nc):
            s[c] = sc[r, c]
        transform_row(s, nc, post)
        for c in range(nc):
            z[r, c] = s[c]


# --------------------------------------------------------------------------------------------
# float32 linear models, row-blocked: one pass per block of rows, in L1
# --------------------------------------------------------------------------------------------
#: rows per block: the block's scores (classes x BLOCK) and scaled rows stay in L1
BLOCK = 256
_FM = {'reassoc', 'contract', 'arcp'}


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _softmax_cols(st, nt, m, zero, mx, tot):
    """onnxruntime's ComputeSoftmax / ComputeSoftmaxZero (float32) on each column of ``st``
    (classes x rows) over its first ``m`` columns; ``mx`` holds the columns' maxima."""
    tiny = np.float32(1e-7)
    for r in range(m):
        tot[r] = 0
    for j in range(nt):
        for r in range(m):
            v = st[j, r]
            e = expneg32(v - mx[r])
            if zero and v <= tiny and v >= -tiny:  # SOFTMAX_ZERO: kept near 0, not summed
                st[j, r] = v * exp32(-mx[r])
            else:
                st[j, r] = e
                tot[r] += e
    for j in range(nt):
        for r in range(m):
            st[j, r] = st[j, r] / tot[r]


@njit(cache=True, error_model='numpy')
def _normalize_cols(st, nt, m, norm, d):
    """Normalizer folded after the scores: columns of ``st`` normalized by their max (0), L1
    (1) or L2 (2) norm, in float32 as :func:`normalizer`."""
    for r in range(m):
        d[r] = st[0, r] if norm == 0 else 0
    for j in range(nt):
        for r in range(m):
            v = st[j, r]
            if norm == 0:
                d[r] = v if v > d[r] else d[r]
            elif norm == 1:
                d[r] += abs(v)
            else:
                d[r] += v * v
    for j in range(nt):
        for r in range(m):
            st[j, r] = _normalized(st[j, r], d[r], norm)


@njit(cache=True, inline='always', error_model='numpy', fastmath=_FM)
def _put4(st, g, r, nt, b, a0, a1, a2, a3):
    st[g, r] = a0 + b[g]
    if g + 1 < nt:
        st[g + 1, r] = a1 + b[g + 1]
    if g + 2 < nt:
        st[g + 2, r] = a2 + b[g + 2]
    if g + 3 < nt:
        st[g + 3, r] = a3 + b[g + 3]


@njit(cache=True, inline='always', error_model='numpy', fastmath=_FM)
def _scores(x, r0, m, off, scale, w4, b, nt, st):
    """st[j, r] = row r0 + r of x (through the Scaler when ``off`` is not empty) . W[j] +
    b[j], four classes at a time (``w4``: W's rows zero-padded to a multiple of 4): per row,
    one vectorized loop over the features with four accumulators (float32 sums)."""
    f = x.shape[1]
    if off.shape[0]:  # (x - offset) * scale in float32, as onnxruntime's Scaler
        for g in range(0, nt, 4):
            for r in range(m):
                a0 = a1 = a2 = a3 = np.float32(0.0)
                for k in range(f):
                    v = (x[r0 + r, k] - off[k]) * scale[k]
                    a0 += v * w4[g, k]
                    a1 += v * w4[g + 1, k]
                    a2 += v * w4[g + 2, k]
                    a3 += v * w4[g + 3, k]
                _put4(st, g, r, nt, b, a0, a1, a2, a3)
        return
    for g in range(0, nt, 4):
        for r in range(m):
            a0 = a1 = a2 = a3 = np.float32(0.0)
            for k in range(f):
                v = x[r0 + r, k]
                a0 += v * w4[g, k]
                a1 += v * w4[g + 1, k]
                a2 += v * w4[g + 2, k]
                a3 += v * w4[g + 3, k]
            _put4(st, g, r, nt, b, a0, a1, a2, a3)


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _binary_rows(st, r0, m, post, labels, z, y):
    """One score column, two classes: the label by its sign, scores [1 - p, p] (p: the score,
    or its logistic under LOGISTIC, the only transform onnxruntime 1.32 applies there)."""
    for r in range(m):
        s = st[0, r]
        y[r0 + r] = labels[1] if s > 0 else labels[0]
        p = sigmoid32(s) if post == 2 else s
        z[r0 + r, 0] = np.float32(1.0) - p
        z[r0 + r, 1] = p


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _sigmoid_cols(st, nt, m):
    """onnxruntime's logistic (float32) on the first ``m`` columns of ``st``."""
    for j in range(nt):
        for r in range(m):
            st[j, r] = sigmoid32(st[j, r])


@njit(cache=True, error_model='numpy')
def _probit_cols(st, m):
    """onnxruntime's ComputeProbit on the first ``m`` columns of ``st``; without fast-math:
    its ErfInv subtracts nearly equal terms, where a contracted multiply-add moves the
    result."""
    for j in range(st.shape[0]):
        for r in range(m):
            st[j, r] = _probit(st[j, r])


@njit(cache=True, inline='always', error_model='numpy', fastmath=_FM)
def _linear_block(nt, x, r0, m, p, scr, z, y):
    """Rows r0 .. r0 + m of a float32 linear model (see :func:`linear_rows_f32`; ``p``: its
    parameters, ``scr``: scratch) with ``nt`` (== b.shape[0]) classes or targets: a constant
    where it is inlined, so that the loops over the classes unroll and those over the rows
    vectorize."""
    off, scale, w, tiles, b, post, labels, mode, norm = p
    sb, st, mx, bi = scr
    if tiles:
        scores_tiles(x, r0, m, off, scale, w, b, st)
    else:
        _scores(x, r0, m, off, scale, w, b, nt, st)
    if mode == 2:
        _binary_rows(st, r0, m, post, labels, z, y)
        return
    if mode == 1 or post == 1 or post == 3:
        mp, bp, lds = eptr(mx, 0), eptr(bi, 0), st.shape[1]
        for r in range(m):
            mp[r] = st[0, r]
            bp[r] = 0
        for j in range(1, nt):
            sp = eptr(st, j * lds)
            for r in range(m):
                v = sp[r]
                bp[r] = np.int32(j) if v > mp[r] else bp[r]  # the first greatest, as onnxruntime's
                mp[r] = v if v > mp[r] else mp[r]
    if mode == 1:
        yp, bp, lp = eptr(y, r0), eptr(bi, 0), eptr(labels, 0)
        for r in range(m):
            yp[r] = lp[bp[r]]
    if nt > 1 or post == 4:
        if post == 1 or post == 3:
            _softmax_cols(st, nt, m, post == 3, mx, sb)
        elif post == 2:
            _sigmoid_cols(st, nt, m)
        elif post == 4:
            _probit_cols(st, m)
    if norm >= 0:
        _normalize_cols(st, nt, m, norm, mx)
    zp, sp, lds = eptr(z, r0 * nt), eptr(st, 0), st.shape[1]
    for r in range(m):     # raw pointers: vectorized as interleaved stores
        for j in range(nt):
            zp[r * nt + j] = sp[j * lds + r]


@njit(cache=True, error_model='numpy', fastmath=_FM)
def _block(x, r0, m, p, sb, st, mx, bi, z, y):
    """:func:`_linear_block` with the class count a constant for 1 to 4 classes."""
    nt = p[4].shape[0]
    scr = (sb, st, mx, bi)
    if nt == 1:
        _linear_block(1, x, r0, m, p, scr, z, y)
    elif nt == 2:
        _linear_block(2, x, r0, m, p, scr, z, y)
    elif nt == 3:
        _linear_block(3, x, r0, m, p, scr, z, y)
    elif nt == 4:
        _linear_block(4, x, r0, m, p, scr, z, y)
    else:
        _linear_block(nt, x, r0, m, p, scr, z, y)


@njit(cache=True, error_model='numpy')
def _scratch(m, nt):
    """Per-block scratch: st (classes x rows) holds whole tiles of TW rows for
    :func:`scores_tiles`."""
    return (np.empty(m, np.float32), np.empty((nt, (m + TW - 1) // TW * TW), np.float32),
            np.empty(m, np.float32), np.empty(m, np.int32))


@njit(cache=True, parallel=True, error_model='numpy')
def _linear_rows_par(x, p, z, y):
    n = x.shape[0]
    for blk in prange((n + BLOCK - 1) // BLOCK):
        r0 = blk * BLOCK
        m = min(BLOCK, n - r0)
        sb, st, mx, bi = _scratch(m, p[4].shape[0])
        _block(x, r0, m, p, sb, st, mx, bi, z, y)


@njit(cache=True, error_model='numpy')
def _linear_f32(x, p, par, z, y):
    n = x.shape[0]
    if par:
        _linear_rows_par(x, p, z, y)
        return
    sb, st, mx, bi = _scratch(min(BLOCK, n), p[4].shape[0])
    for r0 in range(0, n, BLOCK):
        _block(x, r0, min(BLOCK, n - r0), p, sb, st, mx, bi, z, y)


@njit(cache=True, error_model='numpy')
def linear_rows_f32(x, off, scale, w4, b, post, labels, mode, norm, par, z, y):
    """float32 LinearClassifier / LinearRegressor over blocks of ``BLOCK`` rows, each in one
    pass: an optional Scaler (``off`` / ``scale`` per feature, empty for none, float32 as
    onnxruntime's), the scores ``x @ W.T + b`` (float32 sums, a row at a time; ``w4``: W's
    rows zero-padded to a multiple of 4), then, per ``mode``: 0 a regressor (no labels), 1
    labels of the first greatest score, 2 one score column for two classes (``labels[1]``
    where it is > 0, scores ``[1 - p, p]``, p the score or its logistic under LOGISTIC, as
    onnxruntime 1.32); the post transform ``post`` (onnxruntime's, float32; one column:
    PROBIT only), then a Normalizer ``norm`` (-1 none, else 0 MAX, 1 L1, 2 L2). ``par``:
    blocks over the threads."""
    _linear_f32(x, (off, scale, w4, False, b, post, labels, mode, norm), par, z, y)


@njit(cache=True, error_model='numpy')
def linear_tiles_f32(x, off, scale, wp, b, post, labels, mode, norm, par, z, y):
    """:func:`linear_rows_f32` with the scores a tile of rows at a time
    (:func:`scores_tiles`): ``wp`` is W with its columns zero-padded to a multiple of TW, as
    ``off`` / ``scale`` where not empty. The tiles address x's rows as one contiguous block:
    a strided x is copied first."""
    xc = x if x.flags.c_contiguous else np.ascontiguousarray(x)
    _linear_f32(xc, (off, scale, wp, True, b, post, labels, mode, norm), par, z, y)
