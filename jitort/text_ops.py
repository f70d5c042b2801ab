"""Text ops of scikit-learn pipelines converted by skl2onnx, as string steps.

TfidfVectorizer / CountVectorizer convert to StringNormalizer (ai.onnx), Tokenizer
(onnxruntime's com.microsoft contrib op) and TfIdfVectorizer (ai.onnx); FeatureHasher to
MurmurHash3 (com.microsoft). Each runs as a :mod:`jitort.string_ops` flow on a
:data:`~jitort.partition.DYNAMIC` step (attributes read once per node: compiled regexes,
pool dicts, an n-gram trie), so strict mode accepts the models; the numeric parts run on
Numba kernels (``kernels/cpu/text.py``). The same flows are the interpreter's fast paths for
these ops (onnx.reference has no Tokenizer or MurmurHash3, and its TfIdfVectorizer is not
onnxruntime's).

Semantics are onnxruntime's (tests/test_text_ops.py compares them):

* StringNormalizer: input ``[C]`` or ``[1, C]``; stopwords compared exactly
  (``is_case_sensitive=1``) or after the case change (UPPER when the action is UPPER, else
  LOWER); when every string is a stopword the output is one empty string (``[1]`` /
  ``[1, 1]``). Case changes are per character, as the C library's ``towlower`` /
  ``towupper`` (simple mappings: "ß" stays, "İ" lowers to "i"); locale "C" / "POSIX" changes
  ASCII letters only.
* Tokenizer: input ``[C]`` / ``[N, C]`` -> ``[C, D]`` / ``[N, C, D]``, rows padded with
  ``pad_value``; ``separators`` (regexes) split every piece by the first, then by the next...
  (a piece where a separator matches the empty string yields no token), ``[""]`` (or no
  separators and tokenexp ``"."``) splits into characters, newlines too; else ``tokenexp`` gives its non-overlapping non-empty matches. Tokens shorter
  than ``mincharnum`` characters are dropped. ``mark`` adds "\\x02" / "\\x03" around each
  row's tokens; when no string has a token, ``D`` is 0 (marks too). onnxruntime's regexes are
  RE2 with leftmost-longest matching: here the ``regex`` module with its POSIX flag gives
  leftmost-longest matches (Python's ``re``, leftmost-first, where ``regex`` is not installed).
  ``\\w`` / ``\\s`` / ``\\d`` / ``\\b`` are ASCII-only, as RE2's (a case-insensitive
  ``(?i)`` folds ASCII letters only here; RE2 folds Unicode letters). Python accepts more
  syntax than RE2 (backreferences, lookarounds); RE2-only syntax (``\\C``, ``\\pN`` without
  braces...) fails to compile and raises InvalidModel.
* TfIdfVectorizer: output ``[D]`` / ``[N, D]`` float32, ``D = max(ngram_indexes) + 1``;
  n-grams of every length in ``min_gram_length .. max_gram_length`` and every skip in
  ``0 .. max_skip_count`` counted (1-grams once); TF the counts, IDF ``weight`` where the
  count is positive, TFIDF ``count * weight`` (weights default to 1).
* MurmurHash3: MurmurHash3_x86_32 of each element's bytes (4 or 8 little-endian bytes of an
  integer, the UTF-8 bytes of a string) seeded by ``seed``; uint32 output with
  ``positive=1`` (the default), else int32.
"""
from __future__ import annotations

import re
from itertools import repeat
from typing import Callable

import numpy as np

from .errors import InvalidInput, InvalidModel
from .ir import Node
from .strings import STRING
from .strings import as_text as _text
from .strings import string_array as _str_array
from .strings import string_list as _strings

_MS = "com.microsoft"


def _attr_text(n: Node, name: str, default=None):
    v = n.attrs.get(name, default)
    return None if v is None else _text(v)


def _attr_texts(n: Node, name: str) -> list:
    return [_text(s) for s in (n.attrs.get(name) or [])]


# --- StringNormalizer --------------------------------------------------------------------------

#: characters whose full case mapping has several characters: their simple mapping, or
#: themselves (the C library's towlower / towupper map one character to one)
def _lower_char(c: str) -> str:
    lo = c.lower()
    return lo if len(lo) == 1 else ("i" if c == "\u0130" else c)


def _upper_char(c: str) -> str:
    up = c.upper()
    return up if len(up) == 1 else c


def _case_fn(action: str, ascii_only: bool) -> Callable[[str], str] | None:
    if action == "NONE":
        return None
    lower = action == "LOWER"
    if ascii_only:
        table = {i: (i + 32 if lower else i - 32) for i in (range(65, 91) if lower else range(97, 123))}
        return lambda s: s.translate(table)
    char = _lower_char if lower else _upper_char
    cache: dict = {}

    def change(s: str) -> str:
        if s.isascii():
            return s.lower() if lower else s.upper()
        got = cache.get(s)
        if got is None:
            got = cache[s] = "".join(map(char, s))
        return got
    return change


def _string_normalizer(n: Node) -> Callable:
    action = _attr_text(n, "case_change_action", "NONE").upper()
    if action not in ("NONE", "LOWER", "UPPER"):
        raise InvalidModel(f"StringNormalizer node {n.label}: case_change_action {action!r} "
                           "is not NONE, LOWER or UPPER")
    locale = _attr_text(n, "locale", "")
    ascii_only = locale in ("C", "POSIX")
    change = _case_fn(action, ascii_only)
    sensitive = int(n.attrs.get("is_case_sensitive", 0)) != 0
    stop_words = _attr_texts(n, "stopwords")
    compare = None
    if not sensitive and stop_words:
        compare = _case_fn("UPPER" if action == "UPPER" else "LOWER", ascii_only)
        stop_words = [compare(w) for w in stop_words]
    stop = frozenset(stop_words)

    def run(args: list) -> list:
        x = np.asarray(args[0])
        if not (x.ndim == 1 or (x.ndim == 2 and x.shape[0] == 1)) or x.size == 0:
            raise InvalidInput(f"StringNormalizer node {n.label}: input shape {x.shape} is not "
                               "[C] or [1, C] with C > 0")
        items = _strings(x)
        if compare is not None:
            keyed = [(compare(s), s) for s in items]
            # the compared form is the output's, but with action NONE
            items = [k if action != "NONE" else s for k, s in keyed if k not in stop]
        else:
            if stop:
                items = [s for s in items if s not in stop]
            if change is not None:
                items = list(map(change, items))
        if not items:
            items = [""]
        return [_str_array(items, (len(items),) if x.ndim == 1 else (1, len(items)))]
    return run


# --- Tokenizer ---------------------------------------------------------------------------------

#: one atom (a character class, \\w \\d \\s or a plain character) repeated greedily: its
#: leftmost-first match (Python's ``re``, faster) is the leftmost-longest one
_ONE_ATOM = re.compile(r"(\[\^?\]?[^\[\]]*\]|\\[wdsWDS]|[\w ])[+*]\Z")


def _compile_regex(n: Node, pattern: str):
    """``pattern`` with leftmost-longest matching (RE2's, as onnxruntime sets it) where the
    ``regex`` module is installed, else Python's leftmost-first ``re``; ``\\w``, ``\\s``,
    ``\\d``, ``\\b`` ASCII-only, as RE2's."""
    try:
        try:
            if _ONE_ATOM.match(pattern):
                return re.compile(pattern, re.ASCII)
            import regex
        except ImportError:
            return re.compile(pattern, re.ASCII)
        return regex.compile(pattern, regex.POSIX | regex.VERSION0 | regex.ASCII)
    except Exception as e:
        raise InvalidModel(f"{n.op_type} node {n.label}: regex {pattern!r} does not compile: "
                           f"{e}") from None


def _split(rx, piece: str, out: list) -> None:
    """The non-empty parts of ``piece`` between the matches of ``rx`` into ``out``; nothing
    where ``rx`` matches the empty string (onnxruntime's separator loop drops the piece)."""
    start = 0
    parts = []
    for m in rx.finditer(piece):
        a, b = m.span()
        if a == b:
            return
        if a > start:
            parts.append(piece[start:a])
        start = b
    if start < len(piece):
        parts.append(piece[start:])
    out.extend(parts)


def _tokenizer(n: Node) -> Callable:
    if "mark" not in n.attrs or "pad_value" not in n.attrs or "mincharnum" not in n.attrs:
        raise InvalidModel(f"Tokenizer node {n.label}: attributes mark, pad_value and "
                           "mincharnum are required")
    mark = int(n.attrs["mark"]) != 0
    pad = _attr_text(n, "pad_value")
    least = int(n.attrs["mincharnum"])
    if least <= 0:
        raise InvalidModel(f"Tokenizer node {n.label}: mincharnum must be positive")
    seps = _attr_texts(n, "separators")
    exp = _attr_text(n, "tokenexp")
    if seps == [""] or (not seps and exp == "."):  # onnxruntime's character tokens
        if least > 1:
            raise InvalidModel(f"Tokenizer node {n.label}: mincharnum {least} with character "
                               "tokens (separators [\"\"] or tokenexp \".\")")

        def tokens(s: str) -> list:
            return list(s)
    elif seps:
        rxs = [_compile_regex(n, p) for p in seps]

        def tokens(s: str) -> list:
            pieces = [s] if s else []
            for rx in rxs:
                nxt: list = []
                for p in pieces:
                    _split(rx, p, nxt)
                pieces = nxt
            return [p for p in pieces if len(p) >= least]
    elif exp:
        rx = _compile_regex(n, exp)
        if rx.groups:  # findall would give the groups
            def tokens(s: str) -> list:
                return [t for t in (m.group() for m in rx.finditer(s)) if len(t) >= least]
        else:
            def tokens(s: str) -> list:
                return [t for t in rx.findall(s) if len(t) >= least]
    else:
        raise InvalidModel(f"Tokenizer node {n.label}: separators or a non-empty tokenexp "
                           "is required")

    def run(args: list) -> list:
        x = np.asarray(args[0])
        if x.ndim not in (1, 2):
            raise InvalidInput(f"Tokenizer node {n.label}: input of rank {x.ndim}, not [C] or "
                               "[N, C]")
        if x.size == 0:
            return [np.empty(x.shape, object)]
        rows = [tokens(s) for s in _strings(x)]
        width = max(map(len, rows))
        if width == 0:
            return [np.empty(x.shape + (0,), object)]
        if mark:
            rows = [["\x02", *r, "\x03"] for r in rows]
            width += 2
        flat = [t for r in rows for t in (r + [pad] * (width - len(r)) if len(r) < width else r)]
        return [_str_array(flat, x.shape + (width,))]
    return run


# --- TfIdfVectorizer ---------------------------------------------------------------------------

def _ngram_trie(grams: list) -> tuple:
    """The pool's n-grams as a trie over item ids: ``(items, width, keys, child, which)``:
    ``items`` item -> id, an edge ``node * width + id`` (sorted in ``keys``) leads to
    ``child``, ``which[node]`` the n-gram ending there (-1 none; a repeated one: its first)."""
    items = {t: i for i, t in enumerate(dict.fromkeys(t for g in grams for t in g))}
    width = max(len(items), 1)
    edges: dict = {}
    ends = [-1]
    for p, g in enumerate(grams):
        node = 0
        for t in g:
            key = node * width + items[t]
            if key not in edges:
                edges[key] = len(ends)
                ends.append(-1)
            node = edges[key]
        if ends[node] < 0:
            ends[node] = p
    keys = np.array(sorted(edges), np.int64)
    child = np.array([edges[int(key)] for key in keys], np.int64)
    return items, width, keys, child, np.array(ends, np.int64)


def _pool_ids(n: Node, strs: bool, items: dict) -> Callable:
    """A function from an input array to its items' ids in the pool (-1 outside it)."""
    int_keys = np.array(sorted(items), np.int64) if not strs and items else None
    int_ids = np.array([items[v] for v in sorted(items)], np.int64) if int_keys is not None else None

    def ids_of(x: np.ndarray) -> np.ndarray:
        if strs:
            if x.dtype != STRING and x.dtype.kind not in "US":
                raise InvalidInput(f"TfIdfVectorizer node {n.label}: a string pool takes "
                                   f"strings, not {x.dtype}")
            return np.array(list(map(items.get, _strings(x), repeat(-1, x.size))), np.int64)
        if x.dtype.kind not in "iu":
            raise InvalidInput(f"TfIdfVectorizer node {n.label}: an int64 pool takes int32 or "
                               f"int64, not {x.dtype}")
        v = x.reshape(-1).astype(np.int64)
        if int_keys is None:
            return np.full(v.size, -1, np.int64)
        j = np.minimum(np.searchsorted(int_keys, v), int_keys.size - 1)
        return np.where(int_keys[j] == v, int_ids[j], -1)
    return ids_of


def _tfidf(n: Node) -> Callable:
    from .kernels.cpu import text as k
    mode = _attr_text(n, "mode", "TF")
    if mode not in ("TF", "IDF", "TFIDF"):
        raise InvalidModel(f"TfIdfVectorizer node {n.label}: mode {mode!r} is not TF, IDF or "
                           "TFIDF")
    lo, hi = int(n.attrs.get("min_gram_length", 1)), int(n.attrs.get("max_gram_length", 1))
    skip = int(n.attrs.get("max_skip_count", 0))
    starts = [int(v) for v in n.attrs.get("ngram_counts") or []]
    cols = np.asarray(n.attrs.get("ngram_indexes") or [], np.int64).reshape(-1)
    strs = n.attrs.get("pool_strings")
    pool = [_text(s) for s in strs] if strs else [int(v) for v in n.attrs.get("pool_int64s") or []]
    if not 1 <= lo <= hi or skip < 0:
        raise InvalidModel(f"TfIdfVectorizer node {n.label}: gram lengths {lo}..{hi}, skip "
                           f"{skip}")
    # the pool's n-grams: section j of the pool holds the (j + 1)-grams from starts[j]
    grams = []
    for j, a in enumerate(starts):
        b = starts[j + 1] if j + 1 < len(starts) else len(pool)
        grams += [tuple(pool[i:i + j + 1]) for i in range(a, b, j + 1)]
    if len(grams) != cols.size:
        raise InvalidModel(f"TfIdfVectorizer node {n.label}: {len(grams)} pool n-grams for "
                           f"{cols.size} ngram_indexes")
    w = n.attrs.get("weights")
    weights = np.asarray(w, np.float32).reshape(-1) if w is not None and len(w) else None
    if weights is not None and weights.size != cols.size:
        raise InvalidModel(f"TfIdfVectorizer node {n.label}: {weights.size} weights for "
                           f"{cols.size} n-grams")
    items, width, keys, child, which = _ngram_trie(grams)
    n_out = int(cols.max()) + 1 if cols.size else 0
    # distinct output columns (skl2onnx's): count straight into the output's columns
    direct = np.unique(cols).size == cols.size
    if direct:
        which = np.where(which >= 0, cols[np.maximum(which, 0)], -1)
        if weights is not None:
            col_w = np.ones(n_out, np.float32)
            col_w[cols] = weights
            weights = col_w
    ids_of = _pool_ids(n, bool(strs), items)

    def run(args: list) -> list:
        x = np.asarray(args[0])
        if x.ndim not in (1, 2):
            raise InvalidInput(f"TfIdfVectorizer node {n.label}: input of rank {x.ndim}, not "
                               "[C] or [N, C]")
        rows = x.reshape(1, -1) if x.ndim == 1 else x
        ids = ids_of(rows).reshape(rows.shape)
        counts = np.zeros((rows.shape[0], n_out if direct else len(grams)), np.float32)
        if len(grams) and rows.size:
            k.ngram_counts(ids, keys, child, which, width, lo, hi, skip, counts)
        if mode == "IDF":
            counts = (counts > 0).astype(np.float32)
        if mode != "TF" and weights is not None:
            counts *= weights
        if direct:
            out = counts
        else:  # pool n-grams sharing a column add up
            out = np.zeros((rows.shape[0], n_out), np.float32)
            np.add.at(out, (slice(None), cols), counts)
        return [out.reshape(-1) if x.ndim == 1 else out]
    run.kernels = lambda: [k.ngram_counts]
    return run


# --- MurmurHash3 -------------------------------------------------------------------------------

def _murmur3(n: Node) -> Callable:
    from .kernels.cpu import text as k
    seed = np.uint32(int(n.attrs.get("seed", 0)) & 0xFFFFFFFF)
    positive = int(n.attrs.get("positive", 1)) != 0

    def run(args: list) -> list:
        x = np.asarray(args[0])
        out = np.empty(x.size, np.uint32)
        if x.dtype == STRING or x.dtype.kind in "US":
            data = [s.encode("utf-8", "surrogatepass") for s in _strings(x)]
            offsets = np.zeros(len(data) + 1, np.int64)
            np.cumsum([len(b) for b in data], out=offsets[1:])
            buf = np.frombuffer(b"".join(data), np.uint8) if offsets[-1] else np.zeros(1, np.uint8)
            k.murmur3_bytes(buf, offsets, seed, out)
        elif x.dtype in (np.int32, np.uint32, np.int64, np.uint64):
            words = np.ascontiguousarray(x).reshape(-1).view(np.uint32)
            k.murmur3_words(words.reshape(x.size, x.dtype.itemsize // 4), seed, out)
        else:
            raise InvalidInput(f"MurmurHash3 node {n.label}: takes int32, uint32, int64, uint64 "
                               f"or string, not {x.dtype}")
        out = out.reshape(x.shape)
        return [out if positive else out.view(np.int32)]
    run.kernels = lambda: [k.murmur3_bytes, k.murmur3_words]
    return run


#: (domain, op) -> flow factory; these ops are claimed whatever their element types
TEXT_FLOWS = {
    ("", "StringNormalizer"): _string_normalizer,
    (_MS, "Tokenizer"): _tokenizer,
    ("", "TfIdfVectorizer"): _tfidf,
    (_MS, "MurmurHash3"): _murmur3,
}
