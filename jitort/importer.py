"""ONNX -> jitort IR.

Loads a model (path, bytes or ModelProto, external data included), inlines model-local
functions, runs onnx shape inference for dtypes and (symbolic) shapes, resolves each node's
opset (``since_version``) and turns initializers and ``Constant`` nodes into constant values.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from .errors import InvalidModel, UnsupportedOp
from .ir import Graph, Node, Value, const_value


def load_model(model: Any, base_dir: str | os.PathLike | None = None) -> onnx.ModelProto:
    """Return a ModelProto with external data loaded. Raises :class:`InvalidModel`."""
    if isinstance(model, onnx.ModelProto):
        proto = model
        if base_dir is not None:
            _load_external(proto, Path(base_dir))
        return proto
    if isinstance(model, (bytes, bytearray, memoryview)):
        try:
            proto = onnx.load_from_string(bytes(model))
        except Exception as e:  # protobuf raises DecodeError and friends
            raise InvalidModel(f"cannot parse model bytes: {e}") from None
        if base_dir is not None:
            _load_external(proto, Path(base_dir))
        return proto
    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        if path.is_dir():
            raise InvalidModel(f"model path is a directory, not an .onnx file: {path}")
        if not path.is_file():
            raise InvalidModel(f"model file not found: {path}")
        try:
            proto = onnx.load(str(path), load_external_data=False)
        except Exception as e:
            raise InvalidModel(f"cannot parse model file {path}: {e}") from None
        _load_external(proto, Path(base_dir) if base_dir is not None else path.parent)
        return proto
    raise InvalidModel(f"cannot load a model from {type(model).__name__}; "
                       "pass a path, bytes or onnx.ModelProto")


def _load_external(proto: onnx.ModelProto, base: Path) -> None:
    """Load external tensors, refusing locations that escape the model's folder."""
    base = base.resolve()
    tensors = list(_all_tensors(proto.graph))
    for t in tensors:
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        loc = next((e.value for e in t.external_data if e.key == "location"), None)
        if loc is None:
            raise InvalidModel(f"tensor {t.name!r} has external data without a location")
        target = (base / loc).resolve()
        if base not in target.parents and target != base:
            raise InvalidModel(f"external data of tensor {t.name!r} escapes the model folder: {loc!r}")
        if not target.is_file():
            raise InvalidModel(f"external data file of tensor {t.name!r} not found: {target}")
        info = {e.key: e.value for e in t.external_data}
        try:
            offset, length = int(info.get("offset", 0)), int(info.get("length", -1))
        except ValueError:
            raise InvalidModel(f"external data of tensor {t.name!r} has a non-integer offset "
                               f"or length: {info}") from None
        size = target.stat().st_size
        if offset < 0 or offset > size or (length >= 0 and offset + length > size):
            raise InvalidModel(f"external data of tensor {t.name!r} wants bytes [{offset}, "
                               f"{offset + max(length, 0)}) of {loc!r}, which has {size} bytes")
    try:
        onnx.external_data_helper.load_external_data_for_model(proto, str(base))
    except Exception as e:
        raise InvalidModel(f"cannot load external data: {e}") from None


def _all_tensors(g: onnx.GraphProto):
    yield from g.initializer
    for n in g.node:
        for a in n.attribute:
            if a.HasField("t"):
                yield a.t
            yield from a.tensors
            if a.HasField("g"):
                yield from _all_tensors(a.g)
            for sg in a.graphs:
                yield from _all_tensors(sg)


def import_model(model: Any, base_dir: str | os.PathLike | None = None) -> Graph:
    """Load ``model`` and build a verified :class:`Graph`."""
    proto = load_model(model, base_dir)
    if proto.functions:
        try:
            proto = onnx.inliner.inline_local_functions(proto)
        except Exception as e:
            raise InvalidModel(f"cannot inline model-local functions: {e}") from None
    opsets = {(o.domain if o.domain != "ai.onnx" else ""): o.version for o in proto.opset_import}
    if "" not in opsets:
        if proto.opset_import:
            opsets[""] = 1
        else:
            raise InvalidModel("model declares no opset_import (empty or not an ONNX model?)")
    newest = onnx.defs.onnx_opset_version()
    if opsets[""] > newest:  # ops may have changed meaning there: refuse rather than guess
        raise UnsupportedOp(f"model imports opset {opsets['']} of domain 'ai.onnx'; the newest "
                            f"this installation knows is {newest}")
    inferred = _infer(proto)
    if any(o not in ("", "ai.onnx") for o in opsets):
        inferred = _infer_other_domains(proto, inferred)
    return GraphBuilder(opsets).build(inferred.graph, proto.graph)


#: ai.onnx.ml LabelEncoder's keys attribute -> the element type its input must have
_LABEL_KEYS = {"keys_floats": onnx.TensorProto.FLOAT, "keys_int64s": onnx.TensorProto.INT64,
               "keys_strings": onnx.TensorProto.STRING}


def _type_label_encoder_inputs(proto: onnx.ModelProto) -> onnx.ModelProto:
    """onnx's shape inference (1.23) dereferences a LabelEncoder's input type without checking
    it and crashes the process (a segmentation fault, not an exception) when that input is
    untyped, as skl2onnx's decision-path outputs are (their TreeEnsembleRegressor feeding a
    LabelEncoder gets no inferred type). The input's type is fixed by the keys attribute, so
    give each such input its type before onnx sees the graph."""
    g = proto.graph
    typed = {t.name for t in g.initializer} | {
        vi.name for vi in list(g.input) + list(g.value_info) + list(g.output)
        if vi.type.tensor_type.elem_type}
    missing = {}
    for n in g.node:
        if n.op_type == "LabelEncoder" and n.domain == "ai.onnx.ml" and n.input \
                and n.input[0] not in typed:
            keys = [a.name for a in n.attribute if a.name in _LABEL_KEYS]
            if keys:
                missing[n.input[0]] = _LABEL_KEYS[keys[0]]
    if not missing:
        return proto
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    out.graph.value_info.extend(onnx.helper.make_tensor_value_info(name, t, None)
                                for name, t in missing.items())
    return out


def infer_shapes(proto: onnx.ModelProto, data_prop: bool = False) -> onnx.ModelProto:
    """onnx's shape inference, guarded: the graph types it would crash on are given first, and a
    model it rejects comes back as it was (inference is a hint; jitort's own propagation, or the
    declared types, take over)."""
    proto = _type_label_encoder_inputs(proto)
    try:
        return onnx.shape_inference.infer_shapes(proto, strict_mode=False, data_prop=data_prop)
    except Exception:
        return proto


def _infer(proto: onnx.ModelProto) -> onnx.ModelProto:
    return infer_shapes(proto, data_prop=True)


def _infer_other_domains(proto: onnx.ModelProto, inferred: onnx.ModelProto) -> onnx.ModelProto:
    """onnx's inference knows no schema of other domains' ops (onnxruntime's com.microsoft):
    their outputs, and every value computed from them, stay untyped. Type those outputs by
    their family's dtype functions (:func:`jitort.shapes.core.output_dtypes`) and infer again,
    until no new output gets a type (a chain of such ops takes one round each)."""
    from .shapes.core import output_dtypes
    known: dict[str, onnx.ValueInfoProto] = {}
    for _ in range(len(proto.graph.node) + 1):
        g = inferred.graph
        types = {t.name: t.data_type for t in proto.graph.initializer}
        for vi in list(g.value_info) + list(g.input) + list(g.output):
            if vi.type.tensor_type.elem_type:
                types[vi.name] = vi.type.tensor_type.elem_type
        new = {}
        for p in g.node:
            if p.domain in ("", "ai.onnx") or all(o in types or not o for o in p.output):
                continue
            dts = [onnx.helper.tensor_dtype_to_np_dtype(types[i]) if i in types else None
                   for i in p.input]
            attrs = {at.name: onnx.helper.get_attribute_value(at) for at in p.attribute}
            for o, dt in zip(p.output, output_dtypes(p.domain, p.op_type, dts, attrs) or ()):
                if o and o not in types and dt is not None:
                    new[o] = onnx.helper.make_tensor_value_info(
                        o, onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dt)), None)
        if not new:
            return inferred
        known.update(new)
        typed = onnx.ModelProto()
        typed.CopyFrom(proto)
        typed.graph.value_info.extend(known.values())
        inferred = _infer(typed)
    return inferred


class GraphBuilder:
    def __init__(self, opsets: dict[str, int]):
        self.opsets = opsets
        self.values: dict[str, Value] = {}
        self.types: dict[str, onnx.TypeProto] = {}

    def build(self, g: onnx.GraphProto, original: onnx.GraphProto) -> Graph:
        for vi in list(g.value_info) + list(g.input) + list(g.output):
            self.types[vi.name] = vi.type
        for t in original.initializer:
            self.values[t.name] = const_value(t.name, _to_array(t))
        for st in original.sparse_initializer:
            self.values[st.values.name] = const_value(st.values.name, _densify(st))
        inputs = []
        init_names = set(self.values)
        for vi in original.input:
            if vi.name in init_names:  # an initializer with a default value (IR < 4 style)
                init_names.discard(vi.name)  # once: a second graph input of that name is a clash
                continue
            v = self._new_value(vi.name)
            kind = vi.type.WhichOneof("value")
            if v.dtype is None and kind not in ("sequence_type", "optional_type", "map_type"):
                raise InvalidModel(f"graph input {vi.name!r} has no tensor type")
            # sequence/optional inputs stay untyped: only the interpreter reads them
            inputs.append(v)
        nodes = []
        for i, np_ in _sorted_nodes(original.node, set(self.values)):
            node = self._node(np_, i)
            if node is not None:
                nodes.append(node)
        outputs = []
        for vi in original.output:
            if vi.name not in self.values:
                raise InvalidModel(f"graph output {vi.name!r} is never produced")
            outputs.append(self.values[vi.name])
        graph = Graph(nodes, inputs, outputs, self.opsets, original.name or "graph")
        graph.toposort()
        graph.verify()
        return graph

    def _new_value(self, name: str) -> Value:
        if name in self.values:
            raise InvalidModel(f"value {name!r} is defined twice")
        tp = self.types.get(name)
        dtype, shape = _type_info(tp)
        v = Value(name, dtype, shape)
        if tp is not None and tp.WhichOneof("value") in ("sequence_type", "optional_type",
                                                         "map_type"):
            v.type_proto = tp
        self.values[name] = v
        return v

    def _get(self, name: str, node_label: str) -> Value | None:
        if name == "":
            return None
        v = self.values.get(name)
        if v is None:
            raise InvalidModel(f"node {node_label} reads undefined value {name!r} "
                               "(missing initializer or graph input?)")
        return v

    def _node(self, p: onnx.NodeProto, index: int) -> Node | None:
        label = f"{p.op_type}({p.name or '#' + str(index)})"
        domain = p.domain if p.domain != "ai.onnx" else ""
        if domain not in self.opsets:
            raise UnsupportedOp(f"node {label} uses domain {domain!r}, which the model does not "
                                f"import (opset_import has {sorted(self.opsets)})")
        if p.op_type == "Constant" and domain == "":
            if len(p.output) != 1:
                raise InvalidModel(f"node {label}: Constant must have one output")
            self.values[p.output[0]] = const_value(p.output[0], _constant_value(p, label))
            return None
        inputs = [self._get(n, label) for n in p.input]
        attrs = {a.name: _attr_value(a) for a in p.attribute}
        implicit = []
        for a in p.attribute:
            for sg in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                for name in sorted(_free_names(sg)):
                    v = self.values.get(name)
                    if v is not None and v not in implicit:
                        implicit.append(v)
        outputs = []
        for name in p.output:
            if name == "":
                name = f"__unused_{index}_{len(outputs)}"
            outputs.append(self._new_value(name))
        if inputs and inputs[0] is not None and inputs[0].dtype is not None and any(
                o.dtype is None for o in outputs):
            self._same_type_outputs(p, domain, inputs[0], outputs)
        node = Node(p.op_type, inputs, outputs, attrs, domain, p.name, self._since(p, domain),
                    implicit, proto=p)
        if domain not in ("", "jitort") and any(o.dtype is None for o in outputs):
            _domain_dtypes(node)  # where onnx's inference failed as a whole
        return node

    def _same_type_outputs(self, p: onnx.NodeProto, domain: str, x: Value, outputs) -> None:
        """Type the outputs onnx's inference left untyped (GroupNormalization has no inference
        function in onnx 1.23, MeanVarianceNormalization's function body fails, and every node
        after them goes untyped) where the schema gives the output input 0's type parameter."""
        try:
            schema = onnx.defs.get_schema(p.op_type, self.opsets.get(domain, 0), domain)
        except Exception:
            return
        if not schema.inputs:
            return
        t0 = schema.inputs[0].type_str
        allowed = {c.type_param_str: c for c in schema.type_constraints}
        if t0 not in allowed:
            return
        for o, fo in zip(outputs, schema.outputs):
            if o.dtype is None and fo.type_str == t0:
                o.dtype = x.dtype

    def _since(self, p: onnx.NodeProto, domain: str) -> int:
        version = self.opsets.get(domain)
        if version is None:
            return 0
        try:
            return onnx.defs.get_schema(p.op_type, version, domain).since_version
        except Exception:
            return 0


def _domain_dtypes(node: Node) -> None:
    """Type the outputs of an op of another domain (``com.microsoft``) that onnx's inference
    left untyped, by the dtype function its family registered (:mod:`jitort.shapes`)."""
    from .shapes.core import output_dtypes
    dts = output_dtypes(node.domain, node.op_type,
                        [None if v is None else v.dtype for v in node.inputs], node.attrs)
    for o, dt in zip(node.outputs, dts or ()):
        if o.dtype is None and dt is not None:
            o.dtype = np.dtype(dt)


def _sorted_nodes(nodes, defined: set[str]) -> list[tuple[int, onnx.NodeProto]]:
    """``(index, node)`` in a topological order (the file's order where it is already valid).

    ONNX requires sorted nodes, but exporters slip; a cycle is named here, not reported as an
    undefined value. Names nobody produces are left to :meth:`GraphBuilder._get` to report.
    """
    producer: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for o in n.output:
            if o:
                producer.setdefault(o, i)
    if all(producer.get(x, -1) < i for i, n in enumerate(nodes) for x in _reads(n)):
        return list(enumerate(nodes))  # the common case: already sorted
    order, state = [], {}
    for root in range(len(nodes)):
        if root in state:
            continue
        state[root] = 1
        stack = [(root, iter(_reads(nodes[root])))]
        while stack:
            i, it = stack[-1]
            for name in it:
                p = producer.get(name)
                if p is None or name in defined:
                    continue
                if state.get(p) == 1:
                    n = nodes[p]
                    raise InvalidModel(f"graph has a cycle through node {n.op_type}"
                                       f"({n.name or '#' + str(p)}) (value {name!r})")
                if p not in state:
                    state[p] = 1
                    stack.append((p, iter(_reads(nodes[p]))))
                    break
            else:
                stack.pop()
                state[i] = 2
                order.append(i)
    return [(i, nodes[i]) for i in order]


def _reads(n: onnx.NodeProto) -> list[str]:
    """Names a node reads: its inputs and what its subgraphs take from the enclosing scope."""
    names = [x for x in n.input if x]
    for a in n.attribute:
        for sg in ([a.g] if a.HasField("g") else []) + list(a.graphs):
            names += sorted(_free_names(sg))
    return names


def _to_array(t: onnx.TensorProto) -> np.ndarray:
    try:
        return numpy_helper.to_array(t)
    except Exception as e:
        raise InvalidModel(f"cannot read initializer {t.name!r}: {e}") from None


def _densify(st: onnx.SparseTensorProto) -> np.ndarray:
    values = numpy_helper.to_array(st.values)
    idx = numpy_helper.to_array(st.indices)
    dense = np.zeros(tuple(st.dims), values.dtype)
    if idx.ndim == 1:
        dense.reshape(-1)[idx] = values
    else:
        dense[tuple(idx.T)] = values
    return dense


def _constant_value(p: onnx.NodeProto, label: str) -> np.ndarray:
    if len(p.attribute) != 1:
        raise InvalidModel(f"node {label}: Constant needs exactly one value attribute")
    a = p.attribute[0]
    if a.name == "value":
        return _to_array(a.t)
    if a.name == "sparse_value":
        return _densify(a.sparse_tensor)
    if a.name == "value_float":
        return np.array(a.f, np.float32)
    if a.name == "value_floats":
        return np.array(list(a.floats), np.float32)
    if a.name == "value_int":
        return np.array(a.i, np.int64)
    if a.name == "value_ints":
        return np.array(list(a.ints), np.int64)
    if a.name == "value_string":
        return np.array(a.s.decode(), dtype=object)
    if a.name == "value_strings":
        return np.array([s.decode() for s in a.strings], dtype=object)
    raise InvalidModel(f"node {label}: unknown Constant attribute {a.name!r}")


def _attr_value(a: onnx.AttributeProto) -> Any:
    v = onnx.helper.get_attribute_value(a)
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, onnx.TensorProto):
        return _to_array(v)
    if isinstance(v, list) and v and isinstance(v[0], bytes):
        return [s.decode("utf-8", "replace") for s in v]
    if isinstance(v, list) and v and isinstance(v[0], onnx.TensorProto):
        return [_to_array(t) for t in v]
    return v


def _type_info(tp: onnx.TypeProto | None):
    if tp is None or not tp.HasField("tensor_type"):
        return None, None
    tt = tp.tensor_type
    if tt.elem_type == 0:
        return None, None
    try:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
    except Exception:
        dtype = None
    if not tt.HasField("shape"):
        return dtype, None
    dims = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return dtype, tuple(dims)


def _free_names(g: onnx.GraphProto) -> set[str]:
    """Names a subgraph reads from its enclosing scopes."""
    defined = {i.name for i in g.input} | {t.name for t in g.initializer}
    defined |= {t.values.name for t in g.sparse_initializer}
    free = set()
    for n in g.node:
        for name in n.input:
            if name and name not in defined:
                free.add(name)
        for a in n.attribute:
            for sg in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                free |= {x for x in _free_names(sg) if x not in defined}
        defined.update(n.output)
    for o in g.output:
        if o.name not in defined:
            free.add(o.name)
    return free
