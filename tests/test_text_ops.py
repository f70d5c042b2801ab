"""Text ops of skl2onnx's text pipelines (jitort/text_ops.py): StringNormalizer, Tokenizer
(com.microsoft), TfIdfVectorizer, MurmurHash3 (com.microsoft), one by one against onnxruntime,
then TfidfVectorizer / CountVectorizer / FeatureHasher pipelines converted by skl2onnx against
onnxruntime and scikit-learn, every node compiled or on a string step (``strict=True``).

onnxruntime's StringNormalizer constructs the node's ``locale`` (default en_US.UTF-8), which
fails on a machine without that locale installed (this one): the single-op models here set
``locale="C.UTF-8"`` (or "C", which changes ASCII letters only); the skl2onnx pipelines keep
onnxruntime's default (en_US.UTF-8) and are compared with onnxruntime on a copy whose
StringNormalizers say C.UTF-8 (the same case mapping).
"""
import warnings

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T, helper

import jitort
from jitort.errors import InvalidInput, InvalidModel
from jitort.partition import DYNAMIC
from tests.test_string_ops import same_tensor

pytest.importorskip("sklearn")
pytest.importorskip("skl2onnx")

_MS = "com.microsoft"


def _model(op, in_type, out_type, domain="", **attrs):
    n = helper.make_node(op, ["x"], ["y"], domain=domain, **attrs)
    g = helper.make_graph([n], "g", [helper.make_tensor_value_info("x", in_type, None)],
                          [helper.make_tensor_value_info("y", out_type, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                               helper.make_opsetid(_MS, 1)], ir_version=8)


def _ort(model, feeds):
    return ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)


def _same(got, want):
    same_tensor(got, want, tol=1e-6)


def _check(model, x, interpreter=True):
    """jitort (strict, and its interpreter tier) equal to onnxruntime on input ``x``."""
    want = _ort(model, {"x": x})[0]
    cm = jitort.compile(model, strict=True, tiered=False)
    assert all(p == DYNAMIC for p in cm.placement.values())
    _same(cm.run(None, {"x": x})[0], want)
    if interpreter:
        from jitort.interpreter import make_runner
        n = cm.graph.nodes[0]
        _same(make_runner(n, cm.graph.opsets)([x])[0], want)
    return want


def _s(*items, shape=None):
    a = np.empty(len(items), object)
    a[:] = list(items)
    return a.reshape(shape) if shape else a


# --- StringNormalizer --------------------------------------------------------------------------

_WORDS = _s("The", "quick", "BROWN", "fox", "Été", "straße", "İstanbul", "ǅemal", "ΣΟΦΙΑ", "a",
            "the", "")


@pytest.mark.parametrize("locale", ["C.UTF-8", "C"])
@pytest.mark.parametrize("action", ["LOWER", "UPPER", "NONE"])
@pytest.mark.parametrize("sensitive", [0, 1])
@pytest.mark.parametrize("stop", [[], ["the", "FOX", "été"], ["a"]])
def test_string_normalizer(locale, action, sensitive, stop):
    attrs = dict(case_change_action=action, is_case_sensitive=sensitive, locale=locale)
    if stop:
        attrs["stopwords"] = stop
    m = _model("StringNormalizer", T.STRING, T.STRING, **attrs)
    _check(m, _WORDS)
    _check(m, _WORDS.reshape(1, -1))


@pytest.mark.parametrize("action", ["LOWER", "UPPER"])
def test_string_normalizer_default_locale(action):
    """No locale attribute (skl2onnx's models): onnxruntime here fails to construct its default
    en_US.UTF-8, so this compares against onnx.reference, on ASCII words (onnx.reference also
    strips accents, and with action NONE keeps case-insensitive stopwords, which onnxruntime
    does not: test_string_normalizer covers those against onnxruntime, locale C.UTF-8)."""
    from onnx.reference import ReferenceEvaluator
    n = helper.make_node("StringNormalizer", ["x"], ["y"], case_change_action=action,
                         stopwords=["the", "FOX"])
    g = helper.make_graph([n], "g", [helper.make_tensor_value_info("x", T.STRING, None)],
                          [helper.make_tensor_value_info("y", T.STRING, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = _s("The", "quick", "BROWN", "fox", "jumps", "over", "THE", "lazy_dog42")
    want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    got = jitort.compile(m, strict=True, tiered=False).run(None, {"x": x})[0]
    assert got.dtype == object and got.tolist() == want.tolist()


def test_string_normalizer_all_stopwords():
    m = _model("StringNormalizer", T.STRING, T.STRING, stopwords=["a", "B"], locale="C.UTF-8")
    assert _check(m, _s("a", "b", "A")).tolist() == [""]
    assert _check(m, _s("b", shape=(1, 1))).tolist() == [[""]]


def test_string_normalizer_bad_shape():
    m = _model("StringNormalizer", T.STRING, T.STRING, case_change_action="LOWER")
    cm = jitort.compile(m, strict=True, tiered=False)
    for bad in (_s("a", "b", shape=(2, 1)), _s()):
        with pytest.raises(InvalidInput, match=r"\[C\] or \[1, C\]"):
            cm.run(None, {"x": bad})


# --- Tokenizer ---------------------------------------------------------------------------------

_TEXTS = _s("Hello world, this is a test.", "a b  c", "", "x-yy-z;w", "été déjà vu",
            "abcab", "  ", "tab\there")

_TOKENIZERS = [
    dict(separators=[" "]),
    dict(separators=[" ", ",", r"\."]),
    dict(separators=[r"\s+", "[,.;]"]),
    dict(separators=[""]),
    dict(separators=["b", "ab"]),
    dict(separators=["ab", "b"]),
    dict(separators=["a|ab"]),  # leftmost-longest: "ab" separates
    dict(separators=["x*"]),  # matches the empty string: no token
    dict(separators=[" ", "b*"]),
    dict(tokenexp="[a-zA-Z0-9_]+"),
    dict(tokenexp=r"\w+"),
    dict(tokenexp="a|ab"),  # leftmost-longest: "ab"
    dict(tokenexp="[a-z]*"),
    dict(tokenexp="."),
]


@pytest.mark.parametrize("mark", [0, 1])
@pytest.mark.parametrize("least", [1, 2, 3])
@pytest.mark.parametrize("form", range(len(_TOKENIZERS)))
def test_tokenizer(mark, least, form):
    attrs = dict(_TOKENIZERS[form])
    m = _model("Tokenizer", T.STRING, T.STRING, domain=_MS, mark=mark, pad_value="#",
               mincharnum=least, **attrs)
    if least > 1 and attrs in (dict(separators=[""]), dict(tokenexp=".")):
        # character tokens: onnxruntime refuses mincharnum > 1
        with pytest.raises(Exception, match="mincharnum"):
            _ort(m, {"x": _TEXTS})
        with pytest.raises(InvalidModel, match="mincharnum"):
            jitort.compile(m, strict=True, tiered=False)
        return
    _check(m, _TEXTS)
    _check(m, _TEXTS.reshape(2, 4))


@pytest.mark.parametrize("mark", [0, 1])
def test_tokenizer_no_token(mark):
    m = _model("Tokenizer", T.STRING, T.STRING, domain=_MS, mark=mark, pad_value="#",
               mincharnum=1, tokenexp="[a-z]+")
    assert _check(m, _s("", "--", "12")).shape == (3, 0)
    assert _check(m, _s("", "--", shape=(1, 2))).shape == (1, 2, 0)
    assert _check(m, _s()).shape == (0,)


def test_tokenizer_bad_attributes():
    for attrs in (dict(separators=[""], mincharnum=2), dict(tokenexp="", mincharnum=1),
                  dict(mincharnum=1), dict(separators=[" "], mincharnum=0)):
        m = _model("Tokenizer", T.STRING, T.STRING, domain=_MS, mark=0, pad_value="#", **attrs)
        with pytest.raises(Exception):
            _ort(m, {"x": _s("a b")})
        with pytest.raises(InvalidModel):
            jitort.compile(m, strict=True, tiered=False)


def test_tokenizer_not_interpreted():
    """A Tokenizer compiles without strict mode too (it used to be UnsupportedOp)."""
    m = _model("Tokenizer", T.STRING, T.STRING, domain=_MS, mark=1, pad_value="#",
               mincharnum=1, separators=[" "])
    cm = jitort.compile(m)
    _same(cm.run(None, {"x": _TEXTS})[0], _ort(m, {"x": _TEXTS})[0])


# --- TfIdfVectorizer ---------------------------------------------------------------------------

def _tfidf_model(pool, in_type, counts, indexes, **attrs):
    key = "pool_strings" if in_type == T.STRING else "pool_int64s"
    return _model("TfIdfVectorizer", in_type, T.FLOAT, ngram_counts=counts,
                  ngram_indexes=indexes, **{key: pool}, **attrs)


# 1-grams a b c d, 2-grams (a b) (b c) (c c) (d a), 3-gram (a b c)
_POOL = ["a", "b", "c", "d", "a", "b", "b", "c", "c", "c", "d", "a", "a", "b", "c"]
_COUNTS = [0, 4, 12]
_INDEXES = [6, 0, 2, 8, 1, 3, 7, 4, 5]
_WEIGHTS = [0.5, 1.5, 2.0, 0.25, 3.0, 1.0, 0.75, 2.5, 4.0]


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("grams", [(1, 1), (1, 2), (2, 2), (1, 3), (2, 3), (3, 3)])
@pytest.mark.parametrize("skip", [0, 1, 2])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ints", [False, True])
def test_tfidf_vectorizer(mode, grams, skip, weighted, ints):
    rng = np.random.default_rng(hash((mode, grams, skip, weighted, ints)) % 2**32)
    letters = np.array(list("abcdex"), object)
    x = letters[rng.integers(0, 6, (5, 12))]
    pool = _POOL
    if ints:
        code = {c: i * 10 - 7 for i, c in enumerate("abcdex")}
        pool = [code[p] for p in _POOL]
        x = np.vectorize(code.get, otypes=[np.int64])(x)
    attrs = dict(mode=mode, min_gram_length=grams[0], max_gram_length=grams[1],
                 max_skip_count=skip)
    if weighted:
        attrs["weights"] = _WEIGHTS
    m = _tfidf_model(pool, T.INT64 if ints else T.STRING, _COUNTS, _INDEXES, **attrs)
    _check(m, x)
    _check(m, x[1])
    if ints:
        m32 = _tfidf_model(pool, T.INT32, _COUNTS, _INDEXES, **attrs)
        _check(m32, x.astype(np.int32))


def test_tfidf_vectorizer_no_match():
    m = _tfidf_model(["a", "b"], T.STRING, [0], [1, 0], mode="TF", min_gram_length=1,
                     max_gram_length=1, max_skip_count=0)
    assert not _check(m, _s("x", "y", "z", shape=(1, 3))).any()


# --- MurmurHash3 -------------------------------------------------------------------------------

@pytest.mark.parametrize("positive", [0, 1])
@pytest.mark.parametrize("seed", [0, 42, 2**32 - 1])
@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int64, np.uint64, object])
def test_murmur3(positive, seed, dtype):
    rng = np.random.default_rng(seed % 1000)
    if dtype is object:
        x = _s("", "a", "ab", "abc", "abcd", "abcde", "héllo wörld", "日本語のテキスト", "x" * 37,
               shape=(3, 3))
        in_type = T.STRING
    else:
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, (4, 5), dtype=dtype, endpoint=True)
        x[0, :3] = [0, 1, info.max]
        in_type = {np.int32: T.INT32, np.uint32: T.UINT32, np.int64: T.INT64,
                   np.uint64: T.UINT64}[dtype]
    m = _model("MurmurHash3", in_type, T.UINT32 if positive else T.INT32, domain=_MS,
               positive=positive, seed=seed)
    _check(m, x)


# --- skl2onnx pipelines ------------------------------------------------------------------------

_CORPUS = np.array([
    "The quick brown fox jumps over the lazy dog.", "A lazy dog sleeps all day long",
    "Brown foxes are quick; dogs are lazy!", "Is this the first document?",
    "This document is the second document.", "And this is the third one.",
    "Every fox and every dog", "the DOG, the FOX, the end", "Ünïcödé wörds and ÉTÉ",
    "one two three two one", "quick quick quick", "nothing in common here"], object)
_LABELS = np.array([0, 1, 0, 1, 1, 0, 0, 1, 1, 0, 1, 0])


def _c_utf8(model):
    """A copy of ``model`` whose StringNormalizers construct locale C.UTF-8 (onnxruntime here
    cannot construct skl2onnx's en_US.UTF-8)."""
    from onnx import ModelProto
    m = ModelProto()
    m.CopyFrom(model)
    for n in m.graph.node:
        if n.op_type == "StringNormalizer":
            keep = [a for a in n.attribute if a.name != "locale"]
            del n.attribute[:]
            n.attribute.extend(keep + [helper.make_attribute("locale", "C.UTF-8")])
    return m


def _pipeline_check(model, x, sk_outputs):
    cm = jitort.compile(model, strict=True, tiered=False)
    got = cm.run(None, {"input": x})
    want = _ort(_c_utf8(model), {"input": x})
    for g, w in zip(got, want):
        same_tensor(g, w)
    # scikit-learn's \\w is Unicode, RE2's (onnxruntime's tokenexp) ASCII: rows of ASCII text
    ascii_rows = [i for i, t in enumerate(x.reshape(-1)) if t.isascii()]
    for g, s in zip(got, sk_outputs):
        g = np.asarray(g, np.float64).reshape(s.shape)
        np.testing.assert_allclose(g[ascii_rows], s[ascii_rows], rtol=1e-4, atol=1e-5)
    return got


def _to_onnx(est, x, opts=None):
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import StringTensorType
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return to_onnx(est, initial_types=[("input", StringTensorType([None, 1]))],
                       options=opts, target_opset={"": 17, "ai.onnx.ml": 3})


@pytest.mark.parametrize("kind", ["tfidf", "count"])
@pytest.mark.parametrize("analyzer", ["word", "char"])
def test_skl2onnx_vectorizer(kind, analyzer):
    from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
    cls = TfidfVectorizer if kind == "tfidf" else CountVectorizer
    est = cls(analyzer=analyzer, ngram_range=(1, 2)).fit(_CORPUS)
    x = _CORPUS.reshape(-1, 1)
    _pipeline_check(_to_onnx(est, x), x, [est.transform(_CORPUS).toarray()])


def test_skl2onnx_tfidf_logistic_regression():
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    est = make_pipeline(TfidfVectorizer(ngram_range=(1, 2)), LogisticRegression())
    est.fit(_CORPUS, _LABELS)
    x = _CORPUS.reshape(-1, 1)
    model = _to_onnx(est, x, {LogisticRegression: {"zipmap": False}})
    label, proba = _pipeline_check(model, x, [est.predict(_CORPUS),
                                              est.predict_proba(_CORPUS)])
    ascii_rows = [i for i, t in enumerate(_CORPUS) if t.isascii()]
    assert label[ascii_rows].tolist() == est.predict(_CORPUS)[ascii_rows].tolist()


def test_skl2onnx_feature_hasher():
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import StringTensorType
    from sklearn.feature_extraction import FeatureHasher
    x = np.array([["cat", "dog"], ["dog", "fish"], ["bird", "été"], ["cat", "cat"]], object)
    for alternate in (True, False):
        est = FeatureHasher(n_features=16, input_type="string", alternate_sign=alternate)
        est.fit(x)
        model = to_onnx(est, initial_types=[("input", StringTensorType([None, 2]))],
                        target_opset=17)
        cm = jitort.compile(model, strict=True, tiered=False)
        got = cm.run(None, {"input": x})[0]
        want = _ort(model, {"input": x})[0]
        _same(got, want)
        np.testing.assert_allclose(got, est.transform(x).toarray(), atol=1e-6)


@pytest.mark.parametrize("mode", ["TF", "TFIDF"])
def test_tfidf_vectorizer_shared_column(mode):
    """Two pool n-grams on one output column add up (onnxruntime's)."""
    m = _tfidf_model(["a", "b", "c"], T.STRING, [0], [0, 0, 1], mode=mode, min_gram_length=1,
                     max_gram_length=1, max_skip_count=0, weights=[0.5, 2.0, 1.0])
    _check(m, _s("a", "b", "b", "c", "x", "a", shape=(2, 3)))
