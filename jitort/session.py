"""``jitort.InferenceSession``: onnxruntime's session API on top of :func:`jitort.compile`.

Code written against onnxruntime switches by changing one import::

    from jitort import InferenceSession   # was: from onnxruntime import InferenceSession

What it mirrors: the constructor (``path_or_bytes, sess_options, providers, provider_options``),
``get_inputs`` / ``get_outputs`` / ``get_overridable_initializers`` (``NodeArg`` objects with
onnxruntime's ``name``, ``shape`` and ``type`` strings), ``run``, ``get_modelmeta``,
``get_providers``, ``get_provider_options``, ``get_session_options`` and ``end_profiling``; and
the exceptions onnxruntime raises where user code catches them. Each error class here is a
jitort error (so a builtin ``ValueError`` / ``RuntimeError`` too) and, when onnxruntime is
already imported in the process, also a subclass of onnxruntime's class of the same name
(``except onnxruntime.capi.onnxruntime_pybind11_state.InvalidArgument`` keeps working).
onnxruntime itself is never imported here. See docs/session.md.
"""
from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Mapping
from enum import IntEnum
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

from .errors import ExecutionError, InvalidInput, InvalidModel, JitortError, UnsupportedOp
from .importer import infer_shapes

__all__ = ["InferenceSession", "SessionOptions", "GraphOptimizationLevel", "ExecutionMode",
           "RunOptions", "NodeArg", "ModelMetadata", "InvalidArgument", "Fail",
           "InvalidProtobuf", "NoSuchFile", "InvalidGraph", "NotImplemented",
           "get_available_providers", "ProviderWarning"]

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
_ORT_ERRORS = "onnxruntime.capi.onnxruntime_pybind11_state"
#: onnxruntime's model version when the model sets none (INT64_MAX)
_NO_VERSION = 2 ** 63 - 1


# --- errors --------------------------------------------------------------------------------
class InvalidArgument(InvalidInput):
    """A feed or an output name does not match the model (onnxruntime: INVALID_ARGUMENT)."""
    _code = "2 : INVALID_ARGUMENT"


class Fail(ExecutionError):
    """A node failed while running (onnxruntime: FAIL)."""
    _code = "1 : FAIL"


class NoSuchFile(JitortError, FileNotFoundError):
    """The model path does not exist (onnxruntime: NO_SUCHFILE)."""
    _code = "3 : NO_SUCHFILE"


class InvalidProtobuf(InvalidModel):
    """The model bytes or file do not parse as an ONNX model (onnxruntime: INVALID_PROTOBUF)."""
    _code = "7 : INVALID_PROTOBUF"


class InvalidGraph(InvalidModel):
    """The model is malformed (onnxruntime: INVALID_GRAPH)."""
    _code = "10 : INVALID_GRAPH"


class NotImplemented(UnsupportedOp):  # noqa: A001 - onnxruntime's name for the same condition
    """No backend and no reference implementation can run a node (onnxruntime: NOT_IMPLEMENTED)."""
    _code = "9 : NOT_IMPLEMENTED"


class ProviderWarning(UserWarning):
    """A requested execution provider is not available here; the session runs on the CPU."""


_flavoured: dict[type, type] = {}


def _error(cls: type, message: str) -> Exception:
    """``cls(message)``, subclassing onnxruntime's exception of the same name as well when
    onnxruntime is imported (user code that catches that class then catches ours)."""
    ort = sys.modules.get(_ORT_ERRORS)
    ort_cls = getattr(ort, cls.__name__, None) if ort is not None else None
    if isinstance(ort_cls, type) and issubclass(ort_cls, BaseException):
        sub = _flavoured.get(cls)
        if sub is None:
            sub = _flavoured[cls] = type(cls.__name__, (cls, ort_cls),
                                         {"__module__": cls.__module__, "__doc__": cls.__doc__})
        cls = sub
    return cls(f"[jitort] : {cls._code} : {message}")


# --- options -------------------------------------------------------------------------------
class GraphOptimizationLevel(IntEnum):
    """onnxruntime's levels; jitort runs all its passes or, at ``ORT_DISABLE_ALL``, none."""
    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(IntEnum):
    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class SessionOptions:
    """A look-alike of ``onnxruntime.SessionOptions`` carrying the fields jitort maps:
    ``intra_op_num_threads`` (0: jitort's default), ``graph_optimization_level``
    (``ORT_DISABLE_ALL``: no passes) and ``enable_profiling``. The others are kept and read
    back unchanged, with no effect."""

    def __init__(self):
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.execution_mode = ExecutionMode.ORT_SEQUENTIAL
        self.enable_profiling = False
        self.profile_file_prefix = "jitort_profile"
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.logid = ""
        self.optimized_model_filepath = ""
        self.enable_cpu_mem_arena = True
        self.enable_mem_pattern = True
        self.enable_mem_reuse = True
        self.use_deterministic_compute = False
        self._config: dict[str, str] = {}

    def add_session_config_entry(self, key: str, value: str) -> None:
        self._config[str(key)] = str(value)

    def get_session_config_entry(self, key: str) -> str:
        return self._config[key]


class RunOptions:
    """A look-alike of ``onnxruntime.RunOptions``; ``run`` accepts it and ignores it."""

    def __init__(self):
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.logid = ""
        self.run_tag = ""
        self.terminate = False


def _compile_options(so) -> dict:
    """jitort.compile keywords for an onnxruntime (or look-alike) SessionOptions."""
    if so is None:
        return {}
    options = {}
    threads = int(getattr(so, "intra_op_num_threads", 0) or 0)
    if threads < 0:
        raise InvalidInput(f"sess_options.intra_op_num_threads must be >= 0, got {threads}")
    if threads:
        options["threads"] = threads
    level = getattr(so, "graph_optimization_level", None)
    if level is not None and (getattr(level, "name", None) == "ORT_DISABLE_ALL"
                              or _int_or_none(level) == 0):
        options["optimize"] = False
    if getattr(so, "enable_profiling", False):
        options["profile"] = True
    return options


def _int_or_none(v):
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


# --- providers -----------------------------------------------------------------------------
def _cuda_available() -> bool:
    try:
        from numba import cuda
        return bool(cuda.is_available())
    except Exception:  # numba.cuda missing or broken: no GPU for us
        return False


def get_available_providers() -> list[str]:
    """The providers this session can honour: CUDA (through numba.cuda) where a GPU is seen."""
    return [CUDA, CPU] if _cuda_available() else [CPU]


def _providers(providers, provider_options) -> tuple[list[str], list[dict]]:
    """Normalize onnxruntime's ``providers`` (names or ``(name, options)`` pairs) and
    ``provider_options``; keep what jitort can run, warn about the rest."""
    names, opts = [], []
    for i, p in enumerate(providers or [CPU]):
        if isinstance(p, tuple):
            if len(p) != 2 or not isinstance(p[1], Mapping):
                raise InvalidInput(f"providers[{i}] must be a name or a (name, options) pair, "
                                   f"got {p!r}")
            name, opt = p
        else:
            name, opt = p, None
        if provider_options is not None:
            if len(provider_options) != len(providers):
                raise InvalidInput("'providers' and 'provider_options' should be the same length "
                                   "if both are given")
            opt = provider_options[i] if opt is None else opt
        names.append(str(name))
        opts.append({str(k): str(v) for k, v in (opt or {}).items()})
    keep = []
    for name, opt in zip(names, opts):
        if name == CUDA and not _cuda_available():
            warnings.warn("CUDAExecutionProvider is not available here (numba.cuda sees no GPU); "
                          "the session runs on the CPU", ProviderWarning, stacklevel=4)
        elif name not in (CPU, CUDA):
            warnings.warn(f"jitort has no provider {name!r}; the session runs on the CPU "
                          f"(available: {get_available_providers()})", ProviderWarning, stacklevel=4)
        elif name not in (k for k, _ in keep):
            keep.append((name, opt))
    if CPU not in (k for k, _ in keep):
        keep.append((CPU, {}))
    return [k for k, _ in keep], [o for _, o in keep]


# --- model description ---------------------------------------------------------------------
class NodeArg:
    """A graph input or output as onnxruntime describes it: ``name``, ``type`` (``tensor(float)``,
    ``seq(map(int64,tensor(float)))``...) and ``shape`` (ints, symbolic names, ``None``)."""
    __slots__ = ("name", "type", "shape")

    def __init__(self, name: str, type: str, shape: list):
        self.name, self.type, self.shape = name, type, shape

    def __repr__(self) -> str:
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"


class ModelMetadata:
    """onnxruntime's ``ModelMetadata`` fields, read from the model proto."""

    def __init__(self, proto: onnx.ModelProto):
        self.producer_name = proto.producer_name
        self.graph_name = proto.graph.name
        self.domain = proto.domain
        self.description = proto.doc_string
        self.graph_description = proto.graph.doc_string
        self.version = proto.model_version if proto.HasField("model_version") else _NO_VERSION
        self.custom_metadata_map = {p.key: p.value for p in proto.metadata_props}

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"ModelMetadata({fields})"


def _elem_name(elem_type: int) -> str:
    return helper.tensor_dtype_to_string(elem_type).split(".")[-1].lower()


def type_string(tp: onnx.TypeProto) -> str:
    """onnxruntime's spelling of an ONNX type: ``tensor(float)``, ``seq(tensor(int64))``,
    ``map(string,tensor(float))``, ``optional(...)``, ``sparse_tensor(...)``."""
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        return f"tensor({_elem_name(tp.tensor_type.elem_type)})"
    if kind == "sparse_tensor_type":
        return f"sparse_tensor({_elem_name(tp.sparse_tensor_type.elem_type)})"
    if kind == "sequence_type":
        return f"seq({type_string(tp.sequence_type.elem_type)})"
    if kind == "map_type":
        key = _elem_name(tp.map_type.key_type)
        return f"map({key},{type_string(tp.map_type.value_type)})"
    if kind == "optional_type":
        return f"optional({type_string(tp.optional_type.elem_type)})"
    return "unknown"


def _shape(tp: onnx.TypeProto) -> list:
    kind = tp.WhichOneof("value")
    if kind not in ("tensor_type", "sparse_tensor_type"):
        return []
    t = getattr(tp, kind)
    if not t.HasField("shape"):
        return []
    return [d.dim_value if d.HasField("dim_value") else d.dim_param if d.HasField("dim_param")
            else None for d in t.shape.dim]


def _node_arg(vi: onnx.ValueInfoProto) -> NodeArg:
    return NodeArg(vi.name, type_string(vi.type), _shape(vi.type))


def _read_proto(path_or_bytes) -> tuple[onnx.ModelProto, Any, Path | None]:
    """The model proto (external data not loaded), what jitort.compile gets, its directory."""
    if isinstance(path_or_bytes, onnx.ModelProto):
        return path_or_bytes, path_or_bytes, None
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        data = bytes(path_or_bytes)
        try:
            proto = onnx.load_from_string(data)
        except Exception as e:  # protobuf's DecodeError and friends
            raise _error(InvalidProtobuf, f"Failed to load model because protobuf parsing "
                                          f"failed: {e}") from None
        return proto, data, None
    if isinstance(path_or_bytes, (str, os.PathLike)):
        path = Path(path_or_bytes)
        if not path.is_file():
            raise _error(NoSuchFile, f"Load model from {path} failed: file doesn't exist")
        try:
            proto = onnx.load(str(path), load_external_data=False)
        except Exception as e:
            raise _error(InvalidProtobuf, f"Load model from {path} failed: protobuf parsing "
                                          f"failed: {e}") from None
        return proto, str(path), path.parent
    raise TypeError(f"Unable to load from type '{type(path_or_bytes)}'")


def _np_dtype(vi: onnx.ValueInfoProto):
    """The numpy dtype a tensor input takes, or None (not a tensor, or no numpy equivalent)."""
    if vi.type.WhichOneof("value") != "tensor_type":
        return None
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type))
    except (KeyError, TypeError, ValueError):
        return None


def _outputs_inferred(proto: onnx.ModelProto) -> list[NodeArg]:
    """The graph outputs with the types onnx's shape inference gives them (onnxruntime reports
    inferred output shapes where the model declares none). The symbols onnx invents for dims it
    cannot name (``unk__0``...) read as ``None``, as onnxruntime has them."""
    outputs = infer_shapes(proto).graph.output  # the declared types where inference fails
    g = proto.graph
    declared = {d.dim_param for vi in (*g.input, *g.output, *g.value_info)
                if vi.type.WhichOneof("value") == "tensor_type"
                for d in vi.type.tensor_type.shape.dim if d.HasField("dim_param")}
    args = [_node_arg(vi) for vi in outputs]
    for a in args:
        a.shape = [None if isinstance(d, str) and d not in declared and d.startswith("unk__")
                   else d for d in a.shape]
    return args


# --- the session ---------------------------------------------------------------------------
class InferenceSession:
    """onnxruntime's ``InferenceSession`` running the model compiled by :func:`jitort.compile`.

    ``sess_options``: an ``onnxruntime.SessionOptions`` or :class:`SessionOptions`;
    ``intra_op_num_threads`` sets ``threads``, ``graph_optimization_level=ORT_DISABLE_ALL``
    turns jitort's passes off, ``enable_profiling`` sets ``profile``. ``providers``:
    ``CUDAExecutionProvider`` compiles with ``device="cuda"`` where numba.cuda sees a GPU, else
    the session runs on the CPU with a :class:`ProviderWarning`. Further keyword arguments go
    to :func:`jitort.compile` (``strict=True``, ``tiered=False``...). The compiled model is
    :attr:`compiled`.
    """

    def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None,
                 **kwargs):
        self._proto, source, base_dir = _read_proto(path_or_bytes)
        self._source = source
        self._sess_options = sess_options if sess_options is not None else SessionOptions()
        self._providers, self._provider_options = _providers(providers, provider_options)
        self._options = {**_compile_options(sess_options), **kwargs}
        if self._providers[0] == CUDA:
            self._options.setdefault("device", "cuda")
        if base_dir is not None:
            self._options.setdefault("base_dir", base_dir)
        graph = self._proto.graph
        inits = {t.name for t in graph.initializer} | {t.values.name for t in
                                                       graph.sparse_initializer}
        self._inputs = [_node_arg(vi) for vi in graph.input if vi.name not in inits]
        # before IR version 4 an initializer had to be a graph input too: a constant there
        self._overridable = ([_node_arg(vi) for vi in graph.input if vi.name in inits]
                             if self._proto.ir_version >= 4 else [])
        self._args = {a.name: a for a in self._inputs + self._overridable}
        self._outputs = _outputs_inferred(self._proto)
        self._dtypes = {vi.name: _np_dtype(vi) for vi in graph.input if vi.name in self._args}
        self._variants: dict[frozenset, Any] = {}
        self.compiled = self._compile(source)

    def _compile(self, model, options=None):
        from .runtime import compile as jit_compile
        try:
            return jit_compile(model, **(self._options if options is None else options))
        except UnsupportedOp as e:
            raise _error(NotImplemented, str(e)) from e
        except InvalidModel as e:
            raise _error(InvalidGraph, str(e)) from e
        except JitortError as e:
            if isinstance(e, (ValueError, TypeError)):
                raise
            raise _error(Fail, str(e)) from e

    # --- onnxruntime's accessors ---------------------------------------------------------
    def get_inputs(self) -> list[NodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        return list(self._outputs)

    def get_overridable_initializers(self) -> list[NodeArg]:
        return list(self._overridable)

    def get_modelmeta(self) -> ModelMetadata:
        return ModelMetadata(self._proto)

    def get_providers(self) -> list[str]:
        return list(self._providers)

    def get_provider_options(self) -> dict[str, dict]:
        return {k: dict(v) for k, v in zip(self._providers, self._provider_options)}

    def get_session_options(self):
        return self._sess_options

    def end_profiling(self) -> str:
        """Write the Chrome trace of a session created with ``enable_profiling``; its path."""
        if self.compiled.profiler is None:
            return ""
        return self.compiled.end_profiling()

    # --- running ---------------------------------------------------------------------------
    def run(self, output_names, input_feed, run_options=None) -> list:
        """Outputs ``output_names`` (None or empty: all, in graph order) for ``input_feed``."""
        names = self._check_outputs(output_names)
        feeds, overrides = self._check_feeds(input_feed)
        model = self._variant(overrides) if overrides else self.compiled
        try:
            outs = model.run(names, feeds)
        except InvalidInput as e:
            if isinstance(e, InvalidArgument):
                raise
            raise _error(InvalidArgument, str(e)) from e
        except ExecutionError as e:
            raise _error(Fail, str(e)) from e
        except UnsupportedOp as e:
            raise _error(NotImplemented, str(e)) from e
        # onnxruntime returns tensor(string) outputs as numpy object arrays of str
        return [o.astype(object) if isinstance(o, np.ndarray) and o.dtype.kind in "US" else o
                for o in outs]

    def _check_outputs(self, output_names) -> list[str] | None:
        if not output_names:
            return None
        if isinstance(output_names, str):
            raise TypeError("output_names must be a list of names or None, got a str")
        known = {o.name for o in self._outputs}
        for n in output_names:
            if n not in known:
                raise _error(InvalidArgument, f"Invalid output name:{n} (the model's outputs are "
                                              f"{sorted(known)})")
        return list(output_names)

    def _check_feeds(self, input_feed) -> tuple[dict, frozenset]:
        """onnxruntime's feed checks, in its order and with its words, naming the input."""
        if not isinstance(input_feed, Mapping):
            raise AttributeError(f"'{type(input_feed).__name__}' object has no attribute 'keys'")
        missing = [i.name for i in self._inputs if i.name not in input_feed]
        if missing:
            raise _error_plain(f"Required inputs ({missing}) are missing from input feed "
                               f"({list(input_feed)}).")
        overridable = {o.name for o in self._overridable}
        feeds, overrides = {}, set()
        for name, value in input_feed.items():
            if name not in self._dtypes:
                raise _error(InvalidArgument, f"Invalid input name: {name}")
            if name in overridable:
                overrides.add(name)
            feeds[name] = self._check_value(name, value)
        return feeds, frozenset(overrides)

    def _check_value(self, name: str, value):
        arg = self._args[name]
        want = self._dtypes[name]
        if want is None:  # sequence, map or optional input: the model reads it as it comes
            return value
        if not isinstance(value, np.ndarray):
            try:
                value = np.asarray(value, dtype=want)
            except (TypeError, ValueError) as e:
                raise _error(InvalidArgument, f"input {name!r} ({arg.type}) cannot be converted "
                                              f"from {type(value).__name__}: {e}") from None
        elif want.kind == "O" and value.dtype.kind in "US":
            value = value.astype(object)  # onnxruntime takes numpy's str arrays for strings
        elif value.dtype != want:
            actual = _type_of(value.dtype)
            raise _error(InvalidArgument, f"Unexpected input data type. Actual: ({actual}) , "
                                          f"expected: ({arg.type}) for input: {name}")
        if arg.shape or _has_shape(self._proto, name):
            if value.ndim != len(arg.shape):
                raise _error(InvalidArgument, f"Invalid rank for input: {name} Got: {value.ndim} "
                                              f"Expected: {len(arg.shape)} Please fix either the "
                                              f"inputs/outputs or the model.")
            bad = [f" index: {k} Got: {value.shape[k]} Expected: {d}"
                   for k, d in enumerate(arg.shape) if isinstance(d, int) and value.shape[k] != d]
            if bad:
                raise _error(InvalidArgument, f"Got invalid dimensions for input: {name} for the "
                                              f"following indices\n" + "\n".join(bad) +
                                              "\n Please fix either the inputs/outputs or the model.")
        return value

    def _variant(self, overrides: frozenset):
        """The model compiled with the initializers in ``overrides`` turned into plain inputs."""
        model = self._variants.get(overrides)
        if model is None:
            if isinstance(self._source, str):
                proto = onnx.load(self._source)
            else:
                proto = onnx.ModelProto()
                proto.CopyFrom(self._proto)
            kept = [t for t in proto.graph.initializer if t.name not in overrides]
            del proto.graph.initializer[:]
            proto.graph.initializer.extend(kept)
            options = dict(self._options)
            options.pop("base_dir", None)
            model = self._variants[overrides] = self._compile(proto, options)
        return model

    def __repr__(self) -> str:
        return (f"<jitort.InferenceSession {self._proto.graph.name!r} "
                f"providers={self._providers}>")


def _error_plain(message: str) -> InvalidInput:
    """onnxruntime raises a builtin ValueError for missing feeds; InvalidInput is one."""
    return InvalidInput(message)


def _type_of(dtype: np.dtype) -> str:
    try:
        return f"tensor({_elem_name(helper.np_dtype_to_tensor_dtype(dtype))})"
    except (KeyError, TypeError, ValueError):
        return str(dtype)


def _has_shape(proto: onnx.ModelProto, name: str) -> bool:
    """Whether graph input ``name`` declares a shape (rank 0 included: its NodeArg shape is
    ``[]``, as for an input without one)."""
    for vi in proto.graph.input:
        if vi.name == name and vi.type.WhichOneof("value") == "tensor_type":
            return vi.type.tensor_type.HasField("shape")
    return False
