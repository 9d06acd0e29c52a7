"""ONNX -> Graph.

Import walks the ONNX nodes once, in order. Each node is normalised into the IR's canonical form
(explicit pads, final reshape shapes, non-negative axes, activations as :class:`Activation`), its
output shapes are inferred, and any node whose inputs are all constant is evaluated on the
reference kernels right away. That folding is what turns the Shape/Gather/Concat chains exporters
emit into fixed Reshape targets, so it has to happen during the walk, not after it.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import onnx
import onnx.helper
import onnx.numpy_helper
from google.protobuf.message import DecodeError

from .errors import EdgeSDKError, ModelLoadError, UnsupportedModelError, UnsupportedOperatorError
from .graph import Graph, Node
from .ops import OPS, evaluate, onnx_operators
from .runtime.shapes import RUNTIME_OPS, check_folding, check_tensor_size, infer_node

# Opsets 11-21 are what exporters emit; for the ops imported here the later versions (up to 28,
# onnx 1.23) only add element types, so they import unchanged.
MIN_OPSET, MAX_OPSET = 11, 28
_DEFAULT_DOMAINS = ("", "ai.onnx")

InputShapes = Mapping[str, Sequence[int]]

_log = logging.getLogger(__name__)
_notes_given: set[str] = set()  # fixed-dimension notes already logged in this process


def supported_operators() -> list[str]:
    """Every ONNX op type the importer accepts (some only on constant inputs)."""
    return onnx_operators()


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
            graph.add_constant(init.name, self.tensor_value(init, f"initializer {init.name!r}"))
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

    def tensor_value(self, proto: onnx.TensorProto, what: str) -> np.ndarray:
        try:
            base = os.path.dirname(self.source) if os.path.exists(self.source) else None
            return onnx.numpy_helper.to_array(proto, base_dir=base or "")
        except Exception as exc:
            raise ModelLoadError(f"{self.source}: cannot read {what} ({_first_line(exc)})") from None

    # -- one node -----------------------------------------------------------------------------
    def _import_node(self, proto: onnx.NodeProto, index: int) -> None:
        name = proto.name or f"{proto.op_type}_{index}"
        spec = OPS.get(proto.op_type) if proto.domain in _DEFAULT_DOMAINS else None
        if spec is None or spec.importer is None:
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
            self.op_type = proto.op_type  # for importers shared by several op types
            node = spec.importer(self, name, inputs, outputs, attrs)
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
                OPS.get(node.op) is None or OPS[node.op].reference is None) else UnsupportedModelError(
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

    @staticmethod
    def reshape_node(name: str, source: str, target: str, shape: Sequence[int]) -> Node:
        """A Reshape of ``source`` to the final ``shape`` (the IR's only view op)."""
        return Node("Reshape", name, [source], [target], {"shape": tuple(int(d) for d in shape)})

    def add_reshape(self, name: str, source: str, target: str, shape: Sequence[int]) -> None:
        """Add a Reshape node now (importers that expand one ONNX node into several)."""
        self.add(self.reshape_node(name, source, target, shape))


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
