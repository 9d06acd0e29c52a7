"""ONNX -> Graph.

Import walks the ONNX nodes once, in order. Each node is normalised into the IR's canonical form
(explicit pads, final reshape shapes, non-negative axes, activations as :class:`Activation`), its
output shapes are inferred, and any node whose inputs are all constant is evaluated on the
reference kernels right away. That folding is what turns the Shape/Gather/Concat chains exporters
emit into fixed Reshape targets, so it has to happen during the walk, not after it.
"""
from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import onnx
import onnx.helper
import onnx.numpy_helper
from google.protobuf.message import DecodeError

from .backends.reference.constant_ops import CONSTANT_ONLY_OPS
from .backends.reference.kernels import evaluate
from .errors import EdgeSDKError, ModelLoadError, UnsupportedModelError, UnsupportedOperatorError
from .graph import Graph, Node
from .runtime.activations import Activation
from .runtime.shapes import RUNTIME_OPS, check_folding, check_tensor_size, infer_node, normalize_axis, same_pads

# Opsets 11-21 are what exporters emit; for the ops imported here the later versions (up to 28,
# onnx 1.23) only add element types, so they import unchanged.
MIN_OPSET, MAX_OPSET = 11, 28
_DEFAULT_DOMAINS = ("", "ai.onnx")

InputShapes = Mapping[str, Sequence[int]]

_log = logging.getLogger(__name__)
_notes_given: set[str] = set()  # fixed-dimension notes already logged in this process


def supported_operators() -> list[str]:
    """Every ONNX op type the importer accepts (some only on constant inputs)."""
    return sorted(_IMPORTERS)


def load_onnx(path: str | os.PathLike, input_shapes: InputShapes | None = None) -> Graph:
    """Read an .onnx file and import it. Errors are one-line :class:`ModelLoadError`s."""
    path = Path(path)
    if not path.is_file():
        raise ModelLoadError(f"model file {str(path)!r} not found" if not path.exists()
                             else f"{str(path)!r} is not a file")
    try:
        model = onnx.load(str(path))
    except (DecodeError, RuntimeWarning, ValueError, TypeError, OSError) as exc:
        raise ModelLoadError(f"{path}: not a readable ONNX model ({_first_line(exc)})") from None
    except Exception as exc:  # onnx raises assorted errors for external-data and parse problems
        raise ModelLoadError(f"{path}: not a readable ONNX model ({type(exc).__name__}: "
                             f"{_first_line(exc)})") from None
    graph = import_model(model, input_shapes, source=str(path))
    return graph


def import_model(model: onnx.ModelProto, input_shapes: InputShapes | None = None,
                 source: str = "<memory>") -> Graph:
    """Import an in-memory ONNX model."""
    if not model.HasField("graph") or not model.graph.output or model.ir_version <= 0:
        raise ModelLoadError(f"{source}: not an ONNX model (no graph, outputs or IR version)")
    model = _upgrade_opset(model, source)
    return _Importer(model, dict(input_shapes or {}), source).run()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


def _opset(model: onnx.ModelProto) -> int:
    versions = [o.version for o in model.opset_import if o.domain in _DEFAULT_DOMAINS]
    return versions[0] if versions else 1


def _upgrade_opset(model: onnx.ModelProto, source: str) -> onnx.ModelProto:
    opset = _opset(model)
    if opset > MAX_OPSET:
        raise UnsupportedModelError(
            f"{source}: opset {opset} is newer than this SDK supports ({MIN_OPSET}-{MAX_OPSET}); "
            f"export with opset_version={MAX_OPSET} or older")
    if opset >= MIN_OPSET:
        return model
    try:  # Old exports (Keras, early torch) convert cleanly in most cases.
        from onnx import version_converter
        return version_converter.convert_version(model, MIN_OPSET)
    except Exception as exc:
        raise UnsupportedModelError(
            f"{source}: opset {opset} is older than {MIN_OPSET} and could not be upgraded "
            f"({_first_line(exc)}); re-export with opset_version>={MIN_OPSET}") from None


class _Importer:
    def __init__(self, model: onnx.ModelProto, input_shapes: dict[str, Sequence[int]], source: str):
        self.model = model
        self.onnx_graph = model.graph
        self.opset = _opset(model)
        self.source = source
        self.input_shapes = input_shapes
        self.graph = Graph(model.graph.name or Path(source).stem)
        self.fixed_dimensions: list[dict[str, Any]] = []  # dynamic dims given a size at import

    # -- driver -------------------------------------------------------------------------------
    def run(self) -> Graph:
        g, graph = self.onnx_graph, self.graph
        for init in g.initializer:
            graph.add_constant(init.name, self._tensor_value(init, f"initializer {init.name!r}"))
        unknown = set(self.input_shapes) - {vi.name for vi in g.input}
        if unknown:
            raise UnsupportedModelError(
                f"input_shapes names {sorted(unknown)} that are not model inputs "
                f"({', '.join(vi.name for vi in g.input if vi.name not in graph.tensors)})")
        for vi in g.input:
            if vi.name not in graph.tensors:  # old exporters list initializers as inputs too
                self._add_graph_input(vi)
        for index, proto in enumerate(g.node):
            self._import_node(proto, index)
        for out in g.output:
            if out.name not in graph.tensors:
                raise UnsupportedModelError(f"graph output {out.name!r} is not produced by any node")
            graph.outputs.append(out.name)
        graph.metadata.update(
            source=self.source, producer=f"{self.model.producer_name} {self.model.producer_version}".strip(),
            opset=self.opset, ir_version=self.model.ir_version)
        if self.fixed_dimensions:
            graph.metadata["fixed_dimensions"] = self.fixed_dimensions
        graph.remove_unused_tensors()
        return graph

    def _add_graph_input(self, vi: onnx.ValueInfoProto) -> None:
        ttype = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise UnsupportedModelError(f"input {vi.name!r} is not a tensor")
        dtype = onnx.helper.tensor_dtype_to_np_dtype(ttype.elem_type) if ttype.elem_type else None
        if dtype != np.float32:
            raise UnsupportedModelError(
                f"input {vi.name!r} has dtype {dtype}; edgesdk runs float32 models (export the model "
                f"with float32 inputs)")
        declared = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
                    for d in ttype.shape.dim]
        given = self.input_shapes.get(vi.name)
        if given is not None:
            given = tuple(int(d) for d in given)
            clash = len(given) != len(declared) or any(
                d is not None and d != g for d, g in zip(declared, given))
            if clash or min(given, default=1) <= 0:
                raise UnsupportedModelError(
                    f"input_shapes[{vi.name!r}] = {given} does not fit the model's declared shape "
                    f"{_shape_text(ttype.shape)}")
            shape = given
        else:
            missing = [i for i, d in enumerate(declared) if d is None and i != 0]
            if missing:
                raise UnsupportedModelError(
                    f"input {vi.name!r} has dynamic dimensions {_shape_text(ttype.shape)}; "
                    f"pass input_shapes={{{vi.name!r}: (...)}} (CLI: --input-shape {vi.name}=1x3x224x224)")
            shape = tuple(1 if d is None else d for d in declared)  # a dynamic batch defaults to 1
            if declared and declared[0] is None:
                self._note_fixed_batch(vi.name, ttype.shape.dim[0].dim_param, shape)
        # Before any node sees it: a Shape of it folds, a backend allocates it (ModelTooLargeError)
        check_tensor_size(vi.name, shape, np.float32, role="input")
        self.graph.add_input(vi.name, shape, np.float32)

    def _note_fixed_batch(self, name: str, dim_param: str, shape: tuple[int, ...]) -> None:
        """Record (graph metadata, for inspect and packages) and say once that a dynamic batch is 1."""
        self.fixed_dimensions.append({"input": name, "axis": 0, "dim_param": dim_param or None, "size": 1})
        example = (4, *shape[1:])
        note = (f"{self.source}: input {name!r} dimension 0{f' ({dim_param!r})' if dim_param else ''} is "
                f"dynamic and was fixed to 1; choose another size with input_shapes={{{name!r}: {example}}} "
                f"(CLI: --input-shape {name}={'x'.join(map(str, example))})")
        if note not in _notes_given:
            _notes_given.add(note)
            _log.warning(note)

    def _tensor_value(self, proto: onnx.TensorProto, what: str) -> np.ndarray:
        try:
            base = os.path.dirname(self.source) if os.path.exists(self.source) else None
            return onnx.numpy_helper.to_array(proto, base_dir=base or "")
        except Exception as exc:
            raise ModelLoadError(f"{self.source}: cannot read {what} ({_first_line(exc)})") from None

    # -- one node -----------------------------------------------------------------------------
    def _import_node(self, proto: onnx.NodeProto, index: int) -> None:
        name = proto.name or f"{proto.op_type}_{index}"
        if proto.domain not in _DEFAULT_DOMAINS or proto.op_type not in _IMPORTERS:
            op = proto.op_type if proto.domain in _DEFAULT_DOMAINS else f"{proto.domain}.{proto.op_type}"
            raise UnsupportedOperatorError(op, name, supported_operators())
        inputs, outputs = list(proto.input), list(proto.output)
        for i in inputs:
            if i and i not in self.graph.tensors:
                raise UnsupportedModelError(f"node {name!r} reads {i!r}, which no earlier node produces")
        for o in outputs:
            if o and o in self.graph.tensors:  # ONNX graphs are SSA: one definition per name
                raise ModelLoadError(f"{self.source}: node {name!r} redefines tensor {o!r}; not a valid "
                                     f"ONNX graph (onnx.checker.check_model reports it too)")
        self._check_arity(proto, name)
        try:
            attrs = {a.name: _attribute_value(a) for a in proto.attribute}
            node = _IMPORTERS[proto.op_type](self, name, inputs, outputs, attrs)
            if node is not None:
                self.add(node)
        except EdgeSDKError:
            raise
        except Exception as exc:  # malformed attributes or inputs: name the node, not our stack
            raise UnsupportedModelError(
                f"node {name!r} ({proto.op_type}) has malformed attributes or inputs "
                f"({type(exc).__name__}: {_first_line(exc)})") from None

    def _check_arity(self, proto: onnx.NodeProto, name: str) -> None:
        """Input and output counts within what the op's ONNX schema allows at this opset."""
        try:
            schema = onnx.defs.get_schema(proto.op_type, self.opset)
        except onnx.defs.SchemaError:
            raise UnsupportedModelError(f"node {name!r}: {proto.op_type} does not exist in opset {self.opset}") from None
        present = [i for i, n in enumerate(proto.input) if n]
        n_in = present[-1] + 1 if present else 0  # trailing omitted optional inputs do not count
        if not schema.min_input <= n_in <= schema.max_input or not proto.output or \
                len(proto.output) > schema.max_output:
            raise UnsupportedModelError(
                f"node {name!r} ({proto.op_type}) has {n_in} inputs and {len(proto.output)} outputs; "
                f"opset {self.opset} allows {schema.min_input}-{schema.max_input} inputs and "
                f"{schema.min_output}-{schema.max_output} outputs")

    def add(self, node: Node) -> None:
        """Fold ``node`` if its inputs are constant, else infer its outputs and keep it."""
        inputs = [self.graph.const(i) if i else None for i in node.inputs]
        if all(v is not None for v, i in zip(inputs, node.inputs) if i):
            check_folding(node, inputs)  # ConstantOfShape/Expand/Tile/Range...: refuse before allocating
            try:
                values = evaluate(node, inputs)
            except Exception as exc:
                raise UnsupportedModelError(
                    f"node {node.name!r} ({node.op}) failed on its constant inputs: {_first_line(exc)}") from None
            for out, value in zip(node.outputs, values):
                if out:
                    self.graph.add_constant(out, np.asarray(value))
            return
        if node.op not in RUNTIME_OPS:
            raise UnsupportedOperatorError(node.op, node.name, supported_operators()) if (
                node.op not in CONSTANT_ONLY_OPS) else UnsupportedModelError(
                f"node {node.name!r}: {node.op} is only supported on inputs that are constant once "
                f"input shapes are fixed (it is folded at import)")
        for i in node.inputs:
            if i and self.graph.tensors[i].dtype != np.float32:
                raise UnsupportedModelError(
                    f"node {node.name!r} ({node.op}) gets {self.graph.tensors[i].dtype} input {i!r}; "
                    f"edgesdk runs float32 tensors")
        inferred = infer_node(node, self.graph)
        node.outputs = node.outputs[:len(inferred)]
        for out, (shape, dtype) in zip(node.outputs, inferred):
            self.graph.add_tensor(out, shape, dtype)
        self.graph.nodes.append(node)

    # -- helpers for op importers -------------------------------------------------------------
    def shape(self, name: str) -> tuple[int, ...]:
        return self.graph.tensors[name].shape

    def constant_input(self, node_name: str, inputs: list[str], index: int, what: str) -> np.ndarray | None:
        """Value of optional input ``index``, which must be constant when present."""
        if index >= len(inputs) or not inputs[index]:
            return None
        value = self.graph.const(inputs[index])
        if value is None:
            raise UnsupportedModelError(
                f"node {node_name!r}: {what} must be constant (it is computed at run time here)")
        return value

    def alias(self, name: str, source: str, target: str) -> Node:
        """A no-op view (Identity, Dropout): a Reshape to the same shape, removed by the optimiser."""
        return Node("Reshape", name, [source], [target], {"shape": self.shape(source)})


def _attribute_value(attr: onnx.AttributeProto) -> Any:
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode("utf-8", "replace") for v in value]
    return value


def _shape_text(shape: onnx.TensorShapeProto) -> str:
    dims = [str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in shape.dim]
    return "(" + ", ".join(dims) + ")"


# ---------------------------------------------------------------------------------------------
# Op importers: (importer, node name, inputs, outputs, raw attributes) -> canonical Node or None.
# ---------------------------------------------------------------------------------------------
Importer = Callable[[_Importer, str, list[str], list[str], dict[str, Any]], "Node | None"]
_IMPORTERS: dict[str, Importer] = {}


def _importer(*ops: str) -> Callable[[Importer], Importer]:
    def register(fn: Importer) -> Importer:
        for op in ops:
            _IMPORTERS[op] = fn
        return fn
    return register


def _require_2d(imp: _Importer, name: str, op: str, x: str) -> None:
    rank = len(imp.shape(x))
    if rank != 4:
        raise UnsupportedModelError(
            f"node {name!r}: {op} on a rank-{rank} input; only 2-D (NCHW) {op} is supported")


def _window_attrs(imp: _Importer, name: str, op: str, x: str, attrs: dict, kernel: Sequence[int]
                  ) -> dict[str, Any]:
    """kernel_shape, strides, dilations and explicit (top, left, bottom, right) pads."""
    _require_2d(imp, name, op, x)
    kernel = tuple(int(k) for k in kernel)
    strides = tuple(attrs.get("strides", (1, 1)))
    dilations = tuple(attrs.get("dilations", (1, 1)))
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER", "VALID"):
        pads = same_pads(auto_pad, imp.shape(x)[2:], kernel, strides, dilations)
    elif auto_pad == "NOTSET":
        pads = tuple(attrs.get("pads", (0, 0, 0, 0)))
    else:
        raise UnsupportedModelError(f"node {name!r}: unknown auto_pad {auto_pad!r}")
    if len(kernel) != 2 or len(strides) != 2 or len(dilations) != 2 or len(pads) != 4:
        raise UnsupportedModelError(f"node {name!r}: {op} window attributes are not 2-D")
    if min(strides) < 1 or min(dilations) < 1 or min(pads) < 0:
        raise UnsupportedModelError(f"node {name!r}: {op} has non-positive strides/dilations or negative pads")
    return {"kernel_shape": kernel, "strides": strides, "dilations": dilations, "pads": pads}


@_importer("Conv")
def _conv(imp, name, inputs, outputs, attrs):
    w_shape = imp.shape(inputs[1])
    window = _window_attrs(imp, name, "Conv", inputs[0], attrs, attrs.get("kernel_shape", w_shape[2:]))
    return Node("Conv", name, inputs[:3], outputs[:1], {**window, "group": int(attrs.get("group", 1))})


def _make_pool(op: str) -> Importer:
    def importer(imp, name, inputs, outputs, attrs):
        if len(outputs) > 1 and outputs[1]:
            raise UnsupportedModelError(f"node {name!r}: MaxPool's Indices output is not supported")
        window = _window_attrs(imp, name, op, inputs[0], attrs, attrs["kernel_shape"])
        window["ceil_mode"] = bool(attrs.get("ceil_mode", 0))
        if op == "AveragePool":
            window["count_include_pad"] = bool(attrs.get("count_include_pad", 0))
        return Node(op, name, inputs[:1], outputs[:1], window)
    return importer


_IMPORTERS["MaxPool"] = _make_pool("MaxPool")
_IMPORTERS["AveragePool"] = _make_pool("AveragePool")


def _make_global_pool(op: str) -> Importer:
    def importer(imp, name, inputs, outputs, attrs):
        if len(imp.shape(inputs[0])) < 3:
            raise UnsupportedModelError(f"node {name!r}: {op} needs an input with spatial axes")
        return Node(op, name, inputs[:1], outputs[:1], {})
    return importer


_IMPORTERS["GlobalAveragePool"] = _make_global_pool("GlobalAveragePool")
_IMPORTERS["GlobalMaxPool"] = _make_global_pool("GlobalMaxPool")


@_importer("Gemm")
def _gemm(imp, name, inputs, outputs, attrs):
    if len(imp.shape(inputs[0])) != 2 or len(imp.shape(inputs[1])) != 2:
        raise UnsupportedModelError(f"node {name!r}: Gemm inputs must be 2-D")
    return Node("Gemm", name, inputs[:3], outputs[:1], {
        "alpha": float(attrs.get("alpha", 1.0)), "beta": float(attrs.get("beta", 1.0)),
        "transA": bool(attrs.get("transA", 0)), "transB": bool(attrs.get("transB", 0))})


def _make_passthrough(op: str) -> Importer:
    return lambda imp, name, inputs, outputs, attrs: Node(op, name, inputs[:2], outputs[:1], {})


for _op in ("MatMul", "Add", "Sub", "Mul", "Div"):
    _IMPORTERS[_op] = _make_passthrough(_op)


def _activation_node(name: str, inputs: list[str], outputs: list[str], act: Activation) -> Node:
    return Node(act.kind, name, inputs[:1], outputs[:1], {"activation": act})


def _make_plain_activation(op: str) -> Importer:
    return lambda imp, name, inputs, outputs, attrs: _activation_node(name, inputs, outputs, Activation(op))


for _op in ("Relu", "Sigmoid", "Tanh", "HardSwish"):
    _IMPORTERS[_op] = _make_plain_activation(_op)


@_importer("LeakyRelu")
def _leaky_relu(imp, name, inputs, outputs, attrs):
    return _activation_node(name, inputs, outputs, Activation("LeakyRelu", (float(attrs.get("alpha", 0.01)),)))


@_importer("HardSigmoid")
def _hard_sigmoid(imp, name, inputs, outputs, attrs):
    params = (float(attrs.get("alpha", 0.2)), float(attrs.get("beta", 0.5)))
    return _activation_node(name, inputs, outputs, Activation("HardSigmoid", params))


@_importer("Clip")
def _clip(imp, name, inputs, outputs, attrs):
    # An omitted bound is the float range's end (ONNX spec, as ONNX Runtime): Clip(+-inf) = +-3.4e38.
    lowest, highest = float(-np.finfo(np.float32).max), float(np.finfo(np.float32).max)
    if imp.opset < 11:
        lo, hi = attrs.get("min", lowest), attrs.get("max", highest)
    else:
        lo_v = imp.constant_input(name, inputs, 1, "Clip min")
        hi_v = imp.constant_input(name, inputs, 2, "Clip max")
        lo = lowest if lo_v is None else float(lo_v)
        hi = highest if hi_v is None else float(hi_v)
    return _activation_node(name, inputs, outputs, Activation("Clip", (float(lo), float(hi))))


@_importer("BatchNormalization")
def _batch_norm(imp, name, inputs, outputs, attrs):
    if attrs.get("training_mode", 0) or any(o for o in outputs[1:]):
        raise UnsupportedModelError(f"node {name!r}: BatchNormalization in training mode is not supported; "
                                    f"export the model in eval mode")
    if len(imp.shape(inputs[0])) < 2:
        raise UnsupportedModelError(f"node {name!r}: BatchNormalization needs an input with a channel axis")
    channels = imp.shape(inputs[0])[1]
    for i, what in zip(range(1, 5), ("scale", "bias", "mean", "variance")):
        value = imp.constant_input(name, inputs, i, f"BatchNormalization {what}")
        if value is None or value.shape != (channels,):
            got = "missing" if value is None else f"of shape {tuple(value.shape)}"
            raise UnsupportedModelError(f"node {name!r}: BatchNormalization {what} must have one value per "
                                        f"channel, shape ({channels},), got {got}; the model file is malformed")
    if (imp.graph.const(inputs[4]) + attrs.get("epsilon", 1e-5) <= 0).any():
        raise UnsupportedModelError(f"node {name!r}: BatchNormalization variance + epsilon is not positive")
    return Node("BatchNormalization", name, inputs[:5], outputs[:1],
                {"epsilon": float(attrs.get("epsilon", 1e-5))})


def _reshape_to(name: str, source: str, target: str, shape: Sequence[int]) -> Node:
    return Node("Reshape", name, [source], [target], {"shape": tuple(int(d) for d in shape)})


@_importer("Identity", "Dropout")
def _identity(imp, name, inputs, outputs, attrs):
    training = imp.constant_input(name, inputs, 2, "Dropout training_mode")
    if training is not None and bool(training):
        raise UnsupportedModelError(f"node {name!r}: Dropout with training_mode=True is random; export the "
                                    f"model in eval mode")
    if len(outputs) > 1 and outputs[1]:  # Dropout's mask: all kept at inference
        imp.graph.add_constant(outputs[1], np.ones(imp.shape(inputs[0]), dtype=bool))
    return imp.alias(name, inputs[0], outputs[0])


@_importer("Flatten")
def _flatten(imp, name, inputs, outputs, attrs):
    shape = imp.shape(inputs[0])
    axis = int(attrs.get("axis", 1))  # in [-rank, rank]: rank itself means "flatten everything"
    if not -len(shape) <= axis <= len(shape):
        raise UnsupportedModelError(f"node {name!r}: Flatten axis {axis} is out of range for {shape}")
    axis %= len(shape) + (axis >= 0)
    return _reshape_to(name, inputs[0], outputs[0], (math.prod(shape[:axis]), math.prod(shape[axis:])))


@_importer("Reshape")
def _reshape(imp, name, inputs, outputs, attrs):
    target = imp.constant_input(name, inputs, 1, "Reshape shape")
    if target is None:
        raise UnsupportedModelError(f"node {name!r}: Reshape has no shape input")
    shape = imp.shape(inputs[0])
    dims = [int(d) for d in target.reshape(-1)]
    if not attrs.get("allowzero", 0):
        dims = [shape[i] if d == 0 else d for i, d in enumerate(dims)]
    if dims.count(-1) > 1:
        raise UnsupportedModelError(f"node {name!r}: Reshape shape {dims} has more than one -1")
    if -1 in dims:
        known = math.prod(d for d in dims if d != -1)
        if known == 0 or math.prod(shape) % known:
            raise UnsupportedModelError(f"node {name!r}: cannot reshape {shape} to {dims}")
        dims[dims.index(-1)] = math.prod(shape) // known
    return _reshape_to(name, inputs[0], outputs[0], dims)


def _axes(imp: _Importer, name: str, inputs: list[str], attrs: dict, what: str) -> list[int] | None:
    if "axes" in attrs:
        return [int(a) for a in attrs["axes"]]
    value = imp.constant_input(name, inputs, 1, f"{what} axes")
    return None if value is None else [int(a) for a in value.reshape(-1)]


@_importer("Squeeze")
def _squeeze(imp, name, inputs, outputs, attrs):
    shape = imp.shape(inputs[0])
    axes = _axes(imp, name, inputs, attrs, "Squeeze")
    if axes is None:
        axes = [i for i, d in enumerate(shape) if d == 1]
    axes = {normalize_axis(a, len(shape), "Squeeze axis") for a in axes}
    if any(shape[a] != 1 for a in axes):
        raise UnsupportedModelError(f"node {name!r}: Squeeze axes {sorted(axes)} of {shape} are not all 1")
    return _reshape_to(name, inputs[0], outputs[0], [d for i, d in enumerate(shape) if i not in axes])


@_importer("Unsqueeze")
def _unsqueeze(imp, name, inputs, outputs, attrs):
    shape = imp.shape(inputs[0])
    axes = _axes(imp, name, inputs, attrs, "Unsqueeze")
    if axes is None:
        raise UnsupportedModelError(f"node {name!r}: Unsqueeze needs axes")
    rank = len(shape) + len(axes)
    axes = sorted(normalize_axis(a, rank, "Unsqueeze axis") for a in axes)
    dims = list(shape)
    for a in axes:
        dims.insert(a, 1)
    return _reshape_to(name, inputs[0], outputs[0], dims)


@_importer("Transpose")
def _transpose(imp, name, inputs, outputs, attrs):
    rank = len(imp.shape(inputs[0]))
    perm = tuple(int(p) for p in attrs.get("perm", range(rank - 1, -1, -1)))
    if sorted(perm) != list(range(rank)):
        raise UnsupportedModelError(f"node {name!r}: Transpose perm {perm} is not a permutation of {rank} axes")
    return Node("Transpose", name, inputs[:1], outputs[:1], {"perm": perm})


@_importer("Concat")
def _concat(imp, name, inputs, outputs, attrs):
    rank = len(imp.shape(inputs[0]))
    axis = normalize_axis(int(attrs["axis"]), rank, "Concat axis")
    return Node("Concat", name, [i for i in inputs if i], outputs[:1], {"axis": axis})


@_importer("Softmax")
def _softmax(imp, name, inputs, outputs, attrs):
    rank = len(imp.shape(inputs[0]))
    default = -1 if imp.opset >= 13 else 1
    axis = normalize_axis(int(attrs.get("axis", default)), rank, "Softmax axis")
    return Node("Softmax", name, inputs[:1], outputs[:1], {"axis": axis, "coerce_2d": imp.opset < 13})


@_importer("LRN")
def _lrn(imp, name, inputs, outputs, attrs):
    return Node("LRN", name, inputs[:1], outputs[:1], {
        "size": int(attrs["size"]), "alpha": float(attrs.get("alpha", 1e-4)),
        "beta": float(attrs.get("beta", 0.75)), "bias": float(attrs.get("bias", 1.0))})


@_importer("Pad")
def _pad(imp, name, inputs, outputs, attrs):
    rank = len(imp.shape(inputs[0]))
    mode = attrs.get("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise UnsupportedModelError(f"node {name!r}: Pad mode {mode!r} is not supported")
    if imp.opset < 11:
        pads, value = list(attrs["pads"]), float(attrs.get("value", 0.0))
    else:
        pads_v = imp.constant_input(name, inputs, 1, "Pad pads")
        value_v = imp.constant_input(name, inputs, 2, "Pad constant_value")
        axes_v = imp.constant_input(name, inputs, 3, "Pad axes")
        pads = [int(p) for p in pads_v.reshape(-1)]
        value = 0.0 if value_v is None or value_v.size == 0 else float(value_v.reshape(-1)[0])
        if axes_v is not None:  # opset 18: pads only for the listed axes
            axes = [normalize_axis(int(a), rank, "Pad axis") for a in axes_v.reshape(-1)]
            full = [0] * (2 * rank)
            for i, a in enumerate(axes):
                full[a], full[a + rank] = pads[i], pads[i + len(axes)]
            pads = full
    if len(pads) != 2 * rank:
        raise UnsupportedModelError(f"node {name!r}: Pad has {len(pads)} pads for a rank-{rank} input")
    return Node("Pad", name, inputs[:1], outputs[:1], {"pads": tuple(pads), "mode": mode, "value": value})


@_importer("ReduceMean")
def _reduce_mean(imp, name, inputs, outputs, attrs):
    shape = imp.shape(inputs[0])
    axes = _axes(imp, name, inputs, attrs, "ReduceMean")
    if axes is None or (not axes and not attrs.get("noop_with_empty_axes", 0)):
        axes = list(range(len(shape)))
    axes = tuple(sorted({normalize_axis(a, len(shape), "ReduceMean axis") for a in axes}))
    keepdims = bool(attrs.get("keepdims", 1))
    if not axes:
        return imp.alias(name, inputs[0], outputs[0])
    if len(shape) == 4 and axes == (2, 3) and imp.graph.const(inputs[0]) is None:
        # A spatial mean is global average pooling, which every backend has a kernel for.
        if keepdims:
            return Node("GlobalAveragePool", name, inputs[:1], outputs[:1], {})
        pooled = imp.graph.unique_name(f"{name}.pooled")
        imp.add(Node("GlobalAveragePool", f"{name}.pool", inputs[:1], [pooled], {}))
        return _reshape_to(name, pooled, outputs[0], shape[:2])
    return Node("ReduceMean", name, inputs[:1], outputs[:1], {"axes": axes, "keepdims": keepdims})


@_importer("Constant")
def _constant(imp, name, inputs, outputs, attrs):
    if "value" in attrs:
        value = imp._tensor_value(attrs["value"], f"Constant {name!r}")
    elif "value_float" in attrs:
        value = np.array(attrs["value_float"], dtype=np.float32)
    elif "value_floats" in attrs:
        value = np.array(attrs["value_floats"], dtype=np.float32)
    elif "value_int" in attrs:
        value = np.array(attrs["value_int"], dtype=np.int64)
    elif "value_ints" in attrs:
        value = np.array(attrs["value_ints"], dtype=np.int64)
    else:
        raise UnsupportedModelError(f"node {name!r}: Constant with {sorted(attrs)} is not supported")
    imp.graph.add_constant(outputs[0], value)
    return None


def _make_shape_of(op: str) -> Importer:
    # Shapes are static, so Shape/Size are constants even when their input is not.
    def importer(imp, name, inputs, outputs, attrs):
        stand_in = np.broadcast_to(np.float32(0), imp.shape(inputs[0]))
        (value,) = evaluate(Node(op, name, inputs[:1], outputs[:1], attrs), [stand_in])
        imp.graph.add_constant(outputs[0], value)
        return None
    return importer


_IMPORTERS["Shape"] = _make_shape_of("Shape")
_IMPORTERS["Size"] = _make_shape_of("Size")


@_importer("Cast", "CastLike")
def _cast(imp, name, inputs, outputs, attrs):
    if len(inputs) > 1:  # CastLike: the target type is the second input's
        target = imp.graph.tensors[inputs[1]].dtype
    else:
        target = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(attrs["to"]))
    value = imp.graph.const(inputs[0])
    if value is not None:  # CastLike needs only the other input's (static) dtype, not its value
        imp.graph.add_constant(outputs[0], value.astype(target))
        return None
    if imp.graph.tensors[inputs[0]].dtype == target:
        return imp.alias(name, inputs[0], outputs[0])  # a cast to the same type is a no-op
    raise UnsupportedModelError(f"node {name!r}: casting a run-time tensor to {target} is not supported; "
                                f"edgesdk runs float32 tensors")


def _constant_only(op: str) -> Importer:
    return lambda imp, name, inputs, outputs, attrs: Node(op, name, list(inputs), list(outputs), dict(attrs))


for _op in sorted(CONSTANT_ONLY_OPS - {"Shape", "Size", "Cast"}):
    _IMPORTERS[_op] = _constant_only(_op)
