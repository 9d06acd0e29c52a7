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
import onnx.shape_inference
from google.protobuf.message import DecodeError

from .errors import EdgeSDKError, ModelLoadError, UnsupportedModelError, UnsupportedOperatorError
from .graph import Graph, Node
from .onnx_read import OnnxFile, read_onnx
from .ops import OPS, evaluate, onnx_operators
from .ops.quantize import accepts_integer_input, keeps_integer_weights
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


def load_onnx(path: str | os.PathLike, input_shapes: InputShapes | None = None,
              outputs: Sequence[str] | None = None) -> Graph:
    """Read an .onnx file and import it (up to ``outputs`` when given: see :func:`import_model`).
    Errors are one-line :class:`ModelLoadError`s."""
    path = Path(path)
    if not path.is_file():
        raise ModelLoadError(f"model file {str(path)!r} not found" if not path.exists()
                             else f"{str(path)!r} is not a file")
    try:
        onnx_file = read_onnx(path)
        if onnx_file is not None and _opset(onnx_file.model) < MIN_OPSET:
            onnx_file = None  # the version converter needs the whole message
        model = onnx_file.model if onnx_file is not None else onnx.load(str(path))
    except (DecodeError, RuntimeWarning, ValueError, TypeError, OSError) as exc:
        raise ModelLoadError(f"{path}: not a readable ONNX model ({_first_line(exc)})") from None
    except Exception as exc:  # onnx raises assorted errors for external-data and parse problems
        raise ModelLoadError(f"{path}: not a readable ONNX model ({type(exc).__name__}: "
                             f"{_first_line(exc)})") from None
    graph = import_model(model, input_shapes, source=str(path), outputs=outputs, onnx_file=onnx_file)
    return graph


def import_model(model: onnx.ModelProto, input_shapes: InputShapes | None = None,
                 source: str = "<memory>", outputs: Sequence[str] | None = None,
                 onnx_file: OnnxFile | None = None) -> Graph:
    """Import an in-memory ONNX model. ``outputs`` cuts the graph: only the nodes these tensors
    depend on are imported and they become the graph's outputs (a detector's exported
    post-processing, with data-dependent shapes, is left out that way). ``onnx_file``: where
    :func:`read_onnx` left the large initializers' bytes (``model`` is its message)."""
    if not model.HasField("graph") or not model.graph.output or model.ir_version <= 0:
        raise ModelLoadError(f"{source}: not an ONNX model (no graph, outputs or IR version)")
    source_opset = _opset(model)
    model = _upgrade_opset(model, source)
    importer = _Importer(model, dict(input_shapes or {}), source, outputs)
    importer.onnx_file = onnx_file
    importer.source_opset = source_opset  # ops the upgrade rewrote keep their old rules (Resize-10)
    return importer.run()


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


# Ops whose output shapes depend on the data: a static-shape runtime cannot plan them. Exported
# detection post-processing uses them after the heads, so the message suggests cutting there.
DATA_DEPENDENT_OPS = frozenset({"NonZero", "TopK", "If", "Loop", "Scan", "NonMaxSuppression", "Unique",
                                "Compress", "RoiAlign", "SequenceConstruct", "SplitToSequence"})
# float16 models run as float32 inside (precision="fp16" stores tensors as half); their float16
# inputs and outputs keep float16 at the Session's interface, as ONNX Runtime gives them.
_STORED_AS = {np.dtype(np.float16): np.dtype(np.float32)}


class _Importer:
    def __init__(self, model: onnx.ModelProto, input_shapes: dict[str, Sequence[int]], source: str,
                 outputs: Sequence[str] | None = None):
        self.model = model
        self.wanted_outputs = list(outputs) if outputs is not None else None
        self.onnx_graph = model.graph
        self.opset = _opset(model)
        self.source_opset = self.opset  # the opset exported with, before _upgrade_opset
        self.source = source
        self.input_shapes = input_shapes
        self.graph = Graph(model.graph.name or Path(source).stem)
        self.fixed_dimensions: list[dict[str, Any]] = []  # dynamic dims given a size at import
        self.onnx_file: OnnxFile | None = None  # large initializers' bytes, when read_onnx read the file

    # -- driver -------------------------------------------------------------------------------
    def run(self) -> Graph:
        g, graph = self.onnx_graph, self.graph
        for index, init in enumerate(g.initializer):
            if init.name in graph.tensors:  # SSA: one definition per name (the last one used to win)
                raise ModelLoadError(f"{self.source}: initializer {init.name!r} is defined twice; not a valid "
                                     f"ONNX graph: keep one of them")
            graph.add_constant(init.name, self.tensor_value(init, f"initializer {init.name!r}", index))
        unknown = set(self.input_shapes) - {vi.name for vi in g.input}
        if unknown:
            raise UnsupportedModelError(
                f"input_shapes names {sorted(unknown)} that are not model inputs "
                f"({', '.join(vi.name for vi in g.input if vi.name not in graph.tensors)})")
        needed_nodes, needed_tensors = self._needed()
        for vi in g.input:
            if vi.name not in graph.tensors and vi.name in needed_tensors:  # old exporters list initializers as inputs too
                self._add_graph_input(vi)
        for index, proto in enumerate(g.node):
            if index in needed_nodes:
                self._import_node(proto, index)
        declared = {vi.name: vi for vi in g.output}
        if self.wanted_outputs is not None and not set(self.wanted_outputs) <= declared.keys():
            declared.update(self._declared_types(set(self.wanted_outputs) - declared.keys()))
        for name in self.wanted_outputs if self.wanted_outputs is not None else list(declared):
            if name not in graph.tensors:
                raise UnsupportedModelError(f"graph output {name!r} is not produced by any node")
            graph.outputs.append(name)
            self._note_interface_dtype(declared.get(name), name)
        if self.wanted_outputs is not None:
            graph.metadata["cut_at"] = list(self.wanted_outputs)
        graph.metadata.update(
            source=self.source, producer=f"{self.model.producer_name} {self.model.producer_version}".strip(),
            opset=self.opset, ir_version=self.model.ir_version)
        if self.fixed_dimensions:
            graph.metadata["fixed_dimensions"] = self.fixed_dimensions
        graph.remove_unused_tensors()
        return graph

    def _needed(self) -> tuple[set[int], set[str]]:
        """Indices of the ONNX nodes the wanted outputs depend on, and every tensor they read
        (all nodes and inputs when the graph is not cut)."""
        g = self.onnx_graph
        if self.wanted_outputs is None:
            return set(range(len(g.node))), {vi.name for vi in g.input}
        producer = {o: i for i, proto in enumerate(g.node) for o in proto.output if o}
        known = producer.keys() | {vi.name for vi in g.input} | {t.name for t in g.initializer}
        unknown = [o for o in self.wanted_outputs if o not in known]
        if unknown or not self.wanted_outputs or len(set(self.wanted_outputs)) != len(self.wanted_outputs):
            problem = (f"{unknown} are not tensors of the model" if unknown
                       else "must name at least one tensor, each once")
            raise UnsupportedModelError(
                f"outputs {problem}; name tensors the model computes (`edgesdk inspect MODEL` lists the "
                f"graph outputs; onnx.load(...).graph.node[i].output the intermediate ones)")
        nodes, tensors, stack = set(), set(), list(self.wanted_outputs)
        while stack:
            name = stack.pop()
            if name in tensors:
                continue
            tensors.add(name)
            index = producer.get(name)
            if index is not None and index not in nodes:
                nodes.add(index)
                stack.extend(i for i in g.node[index].input if i)
        return nodes, tensors

    def _declared_types(self, names: set[str]) -> dict[str, onnx.ValueInfoProto]:
        """ONNX's element types of intermediate tensors chosen as outputs (a cut float16 model
        returns float16 there too), from the model's value_info or onnx's shape inference."""
        found = {vi.name: vi for vi in self.onnx_graph.value_info if vi.name in names}
        if names - found.keys():
            try:
                inferred = onnx.shape_inference.infer_shapes(self.model).graph.value_info
            except Exception:  # inference is a nicety here: without it the output stays float32
                inferred = []
            found.update({vi.name: vi for vi in inferred if vi.name in names and vi.name not in found})
        return found

    def np_dtype(self, elem_type: int, what: str) -> np.dtype:
        """The numpy dtype of an ONNX data type number; one that this onnx does not define (a
        corrupt file, or one from a newer ONNX) is a one-line error, not a KeyError."""
        try:
            return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
        except (KeyError, TypeError, ValueError):
            raise UnsupportedModelError(
                f"{what} has ONNX data type {elem_type}, which onnx {onnx.__version__} does not define: the "
                f"file is corrupt or from a newer ONNX version (re-export it, or upgrade onnx)") from None

    def _note_interface_dtype(self, vi: onnx.ValueInfoProto | None, name: str) -> None:
        """Remember a float16 graph input or output: the Session converts at its interface."""
        if vi is None or not vi.type.HasField("tensor_type") or not vi.type.tensor_type.elem_type:
            return
        dtype = self.np_dtype(vi.type.tensor_type.elem_type, f"tensor {name!r}")
        if dtype in _STORED_AS and self.graph.tensors[name].dtype == _STORED_AS[dtype]:
            self.graph.metadata.setdefault("interface_dtypes", {})[name] = dtype.name

    def _add_graph_input(self, vi: onnx.ValueInfoProto) -> None:
        ttype = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise UnsupportedModelError(f"input {vi.name!r} is not a tensor")
        dtype = self.np_dtype(ttype.elem_type, f"input {vi.name!r}") if ttype.elem_type else None
        if dtype not in (np.float32, np.float16):
            raise UnsupportedModelError(
                f"input {vi.name!r} has dtype {dtype}; edgesdk runs float32 and float16 models (export "
                f"the model with float inputs)")
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
        self._note_interface_dtype(vi, vi.name)

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

    def tensor_value(self, proto: onnx.TensorProto, what: str, initializer: int | None = None) -> np.ndarray:
        """The tensor as an array; ``initializer``: its index among the graph's initializers, whose
        large payloads :func:`read_onnx` may have left out of the message."""
        try:
            value = self.onnx_file.array(initializer) if self.onnx_file is not None and initializer is not None \
                else None
            if value is None:
                base = os.path.dirname(self.source) if os.path.exists(self.source) else None
                value = onnx.numpy_helper.to_array(proto, base_dir=base or "")
        except Exception as exc:
            raise ModelLoadError(f"{self.source}: cannot read {what} ({_first_line(exc)})") from None
        return value.astype(_STORED_AS[value.dtype]) if value.dtype in _STORED_AS else value

    @staticmethod
    def stored_dtype(dtype: np.dtype) -> np.dtype:
        """The dtype a tensor of ``dtype`` is held in (float16 runs as float32)."""
        return _STORED_AS.get(np.dtype(dtype), np.dtype(dtype))

    # -- one node -----------------------------------------------------------------------------
    def _import_node(self, proto: onnx.NodeProto, index: int) -> None:
        name = proto.name or f"{proto.op_type}_{index}"
        spec = OPS.get(proto.op_type)
        domain = "" if proto.domain in _DEFAULT_DOMAINS else proto.domain
        if spec is not None and spec.domain != domain:
            spec = None
        if spec is None or spec.importer is None:
            op = proto.op_type if proto.domain in _DEFAULT_DOMAINS else f"{proto.domain}.{proto.op_type}"
            if proto.op_type in DATA_DEPENDENT_OPS:
                raise self._data_dependent(proto, name)
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

    def _data_dependent(self, proto: onnx.NodeProto, name: str) -> UnsupportedModelError:
        feeds = [i for i in proto.input if i and i in self.graph.tensors and self.graph.const(i) is None][:3]
        cut = ",".join(feeds) or "TENSOR"
        return UnsupportedModelError(
            f"node {name!r}: {proto.op_type} has data-dependent output shapes, which edgesdk does not run; "
            f"cut the graph before it with outputs=[...] (CLI: --outputs {cut}) and run the rest "
            f"(e.g. NMS) in your own code")

    def _check_arity(self, proto: onnx.NodeProto, name: str) -> None:
        """Input and output counts within what the op's ONNX schema allows at this opset (the
        onnx package has no schemas for ONNX Runtime's com.microsoft ops: their importers check)."""
        if proto.domain not in _DEFAULT_DOMAINS:
            return
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
        if all(v is not None for v, i in zip(inputs, node.inputs) if i) and not keeps_integer_weights(node):
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
            if i and self.graph.tensors[i].dtype != np.float32 and not accepts_integer_input(node, i, self.graph):
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
