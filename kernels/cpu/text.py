"""Kernels of the text ops of scikit-learn pipelines converted by skl2onnx: MurmurHash3
(onnxruntime's com.microsoft op, FeatureHasher) and TfIdfVectorizer's n-gram counting.

Strings never reach these kernels: their caller (``jitort/text_ops.py``) packs a string tensor
into one uint8 buffer of UTF-8 bytes with offsets (MurmurHash3), or maps each string to its
id among the pool's items by a dict (TfIdfVectorizer), so the kernels see only numbers.
"""
import numpy as np
from numba import njit

_FLAGS = dict(cache=True, error_model='numpy')

_M32 = np.uint64(0xFFFFFFFF)


# --- MurmurHash3_x86_32 ------------------------------------------------------------------------

@njit(**_FLAGS)
def _rotl(x, r):
    return ((x << np.uint64(r)) | (x >> np.uint64(32 - r))) & _M32


@njit(**_FLAGS)
def _mix_block(h, k):
    """One 4-byte block ``k`` into the hash state ``h`` (both held in uint64, low 32 bits)."""
    k = (k * np.uint64(0xcc9e2d51)) & _M32
    k = _rotl(k, 15)
    k = (k * np.uint64(0x1b873593)) & _M32
    h ^= k
    h = _rotl(h, 13)
    return (h * np.uint64(5) + np.uint64(0xe6546b64)) & _M32


@njit(**_FLAGS)
def _tail(h, k):
    k = (k * np.uint64(0xcc9e2d51)) & _M32
    k = _rotl(k, 15)
    k = (k * np.uint64(0x1b873593)) & _M32
    return h ^ k


@njit(**_FLAGS)
def _finish(h, length):
    h ^= np.uint64(length)
    h ^= h >> np.uint64(16)
    h = (h * np.uint64(0x85ebca6b)) & _M32
    h ^= h >> np.uint64(13)
    h = (h * np.uint64(0xc2b2ae35)) & _M32
    h ^= h >> np.uint64(16)
    return h


@njit(**_FLAGS)
def murmur3_words(words, seed, out):
    """out[i] = MurmurHash3_x86_32 of row ``words[i]`` (uint32 little-endian blocks: one per
    32-bit element, two per 64-bit element), seeded by ``seed`` (uint32)."""
    n, k = words.shape
    for i in range(n):
        h = np.uint64(seed)
        for j in range(k):
            h = _mix_block(h, np.uint64(words[i, j]))
        out[i] = np.uint32(_finish(h, 4 * k))


@njit(**_FLAGS)
def murmur3_bytes(buf, offsets, seed, out):
    """out[i] = MurmurHash3_x86_32 of ``buf[offsets[i]:offsets[i + 1]]`` (a string's UTF-8
    bytes), seeded by ``seed`` (uint32)."""
    for i in range(offsets.size - 1):
        a, b = offsets[i], offsets[i + 1]
        h = np.uint64(seed)
        p = a
        while p + 4 <= b:
            k = (np.uint64(buf[p]) | (np.uint64(buf[p + 1]) << np.uint64(8))
                 | (np.uint64(buf[p + 2]) << np.uint64(16)) | (np.uint64(buf[p + 3]) << np.uint64(24)))
            h = _mix_block(h, k)
            p += 4
        rest = b - p
        if rest > 0:
            k = np.uint64(0)
            if rest == 3:
                k ^= np.uint64(buf[p + 2]) << np.uint64(16)
            if rest >= 2:
                k ^= np.uint64(buf[p + 1]) << np.uint64(8)
            k ^= np.uint64(buf[p])
            h = _tail(h, k)
        out[i] = np.uint32(_finish(h, b - a))


# --- TfIdfVectorizer ---------------------------------------------------------------------------

@njit(**_FLAGS)
def ngram_counts(ids, keys, child, which, width, min_n, max_n, max_skip, counts):
    """counts[r, p] += how often the pool's n-gram ``p`` occurs in row ``ids[r]`` (item ids
    among the pool's items, -1 for an item not in the pool), for every length ``min_n ..
    max_n`` and every skip ``0 .. max_skip`` between consecutive items; 1-grams count once
    (skip 0), as onnxruntime's.

    The pool is a trie: node ``m``'s child by item ``t`` is ``child[j]`` where ``keys[j] ==
    m * width + t`` (``keys`` sorted; node 0 the root); ``which[m]`` is the pool n-gram node
    ``m`` ends (-1 for none)."""
    n_rows, c = ids.shape
    nk = keys.size
    for r in range(n_rows):
        for i in range(c):
            if ids[r, i] < 0:
                continue
            for s in range(max_skip + 1):
                node = 0
                for k in range(max_n):
                    p = i + k * (s + 1)
                    if p >= c:
                        break
                    t = ids[r, p]
                    if t < 0:
                        break
                    key = node * width + t
                    j = np.searchsorted(keys, key)
                    if j >= nk or keys[j] != key:
                        break
                    node = child[j]
                    if k + 1 >= min_n and which[node] >= 0 and (k > 0 or s == 0):
                        counts[r, which[node]] += 1
