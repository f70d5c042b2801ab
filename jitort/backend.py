"""An ``onnx.backend.base.Backend`` adapter, so onnx's own BackendTest (and anything else written
against the ONNX backend API) can run models through jitort.

    from jitort.backend import JitortBackend
    outputs = JitortBackend.run_model(model, [x, y])

``prepare`` compiles the model once (:func:`jitort.compile`); the returned :class:`JitortRep`
takes inputs positionally (a list/tuple, or a single array for one-input models) or by name (a
dict) and returns the outputs as a tuple in graph output order.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep, Device, DeviceType

from .runtime import CompiledModel, compile as _compile

__all__ = ["JitortBackend", "JitortRep", "prepare", "run_model", "run_node", "supports_device"]


class JitortRep(BackendRep):
    """A prepared (compiled) model. ``run(inputs)`` returns a tuple of outputs."""

    def __init__(self, compiled: CompiledModel):
        self.compiled = compiled

    @property
    def input_names(self) -> list[str]:
        return self.compiled.input_names

    @property
    def output_names(self) -> list[str]:
        return self.compiled.output_names

    def run(self, inputs: Any, **kwargs: Any) -> tuple:
        names = self.compiled.input_names
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray) or not isinstance(inputs, (list, tuple)):
                # one array for a one-input model (an ndarray is not a list of inputs)
                inputs = [inputs]
            if len(inputs) > len(names):
                # BackendTest data sets may carry values for initializer-backed inputs (IR < 4
                # models list initializers among the graph inputs): only real inputs are fed
                inputs = inputs[:len(names)]
            feeds = dict(zip(names, inputs))
        return tuple(self.compiled.run(None, feeds))


class JitortBackend(Backend):
    """ONNX backend API over :func:`jitort.compile`. Only the CPU device is supported."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        return cls.supports_device(device)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        try:
            d = Device(device)
        except Exception:
            return False
        return d.type == DeviceType.CPU

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> JitortRep:
        if not cls.supports_device(device):
            raise RuntimeError(f"jitort cannot run on device {device!r} (CPU only)")
        if isinstance(model, onnx.NodeProto):
            raise TypeError("prepare() takes a model; use run_node() for a single node")
        options = {k: kwargs[k] for k in ("threads", "base_dir", "optimize", "strict") if k in kwargs}
        return JitortRep(_compile(model, **options))

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU",
                 outputs_info: Sequence[tuple[np.dtype, tuple]] | None = None,
                 **kwargs: Any) -> tuple:
        """Run one node: wrap it in a one-node model typed from ``inputs``."""
        if isinstance(inputs, dict):
            arrays = [np.asarray(inputs[name]) for name in node.input if name]
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            arrays = [np.asarray(a) for a in inputs]
        in_names = [name for name in node.input if name]
        if len(arrays) < len(in_names):
            raise ValueError(f"node {node.op_type} takes {len(in_names)} inputs, got {len(arrays)}")
        graph_inputs = [onnx.helper.make_tensor_value_info(
            name, onnx.helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for name, a in zip(in_names, arrays)]
        if outputs_info is not None:
            graph_outputs = [onnx.helper.make_tensor_value_info(
                name, onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dt)), shape)
                for name, (dt, shape) in zip(node.output, outputs_info)]
        else:
            graph_outputs = [onnx.ValueInfoProto(name=name) for name in node.output if name]
        opset = kwargs.pop("opset_version", None)
        opsets = [onnx.helper.make_opsetid(node.domain or "",
                                           opset or onnx.defs.onnx_opset_version())]
        if node.domain not in ("", "ai.onnx"):
            opsets.append(onnx.helper.make_opsetid("", onnx.defs.onnx_opset_version()))
        model = onnx.helper.make_model(
            onnx.helper.make_graph([node], f"run_node_{node.op_type}", graph_inputs, graph_outputs),
            opset_imports=opsets)
        return cls.run_model(model, dict(zip(in_names, arrays)), device, **kwargs)


prepare = JitortBackend.prepare
run_model = JitortBackend.run_model
run_node = JitortBackend.run_node
supports_device = JitortBackend.supports_device
