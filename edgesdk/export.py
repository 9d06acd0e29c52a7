"""Graph -> ONNX: write any model edgesdk reads (a package, an ONNX model, a Graph) as a standard
ONNX model that Netron and ONNX Runtime open.

Compressed weights (clustered, CSR, NNM, fp16) are decoded to the float32 values the model computes
with and stored as plain initializers; activations the optimiser fused into Conv/Gemm/MatMul/Add/
BatchNormalization become stand-alone ONNX nodes again. Shapes are the fixed shapes the graph runs
with (a dynamic batch fixed to 1 at import stays 1; ``graph.metadata["fixed_dimensions"]`` says so
and is copied into the model's ``metadata_props``).

>>> export_onnx("model.edgepkg", "model.onnx")          # or: edgesdk export model.edgepkg -o model.onnx
>>> proto = to_onnx(edgesdk.Session("model.edgepkg").graph)
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from . import __version__
from .errors import EdgeSDKError, UnsupportedModelError
from .fileio import atomic_path
from .graph import Graph, Node
from .ops.reduce import ARG_OPS, REDUCE_OPS
from .ops.resize import onnx_form
from .runtime.activations import ACTIVATION_PARAMS, Activation
from .runtime.shapes import pool_output_size

if TYPE_CHECKING:
    import onnx

__all__ = ["export_onnx", "to_onnx", "save_onnx", "exportable_operators", "ExportError"]

# Opset 17 is what exporters emit by default and what ONNX Runtime 1.12+ runs; a graph that needs a
# newer op version (AveragePool dilations, Pad "wrap": both opset 19) is written at that version.
BASE_OPSET = 17
WIDE_OPSET = 19
IR_VERSION = 8  # the IR that goes with opset 17-18; opset 19 needs IR 9


class ExportError(EdgeSDKError):
    """The ONNX file cannot be written (a directory, no permission, the model's own file)."""


def export_onnx(model: Any, path: str | os.PathLike, *, input_shapes: dict | None = None,
                outputs: list[str] | None = None) -> Path:
    """Write ``model`` as an ONNX file at ``path`` (temp file + rename: never half a file).

    ``model`` is a path to an .edgepkg or .onnx file (recognised by content), an
    ``onnx.ModelProto`` or an :class:`edgesdk.Graph`; ``input_shapes`` fixes dynamic input
    dimensions of ONNX models and ``outputs`` cuts the graph as for :class:`edgesdk.Session`. Weights are decoded to float32 and
    fused activations written as separate nodes. The result passes
    ``onnx.checker.check_model(full_check=True)``. Returns the path written."""
    from .loader import load_model
    _refuse_overwriting_source(model, path)
    proto = to_onnx(load_model(model, input_shapes, outputs))
    return save_onnx(proto, path)


def _refuse_overwriting_source(model: Any, path: str | os.PathLike) -> None:
    if isinstance(model, (str, os.PathLike)) and Path(model).is_file() and Path(path).exists() and \
            Path(model).resolve() == Path(path).resolve():
        raise ExportError(f"output {str(path)!r} is the model being exported; choose another file with -o")


def save_onnx(proto: "onnx.ModelProto", path: str | os.PathLike) -> Path:
    """Serialise ``proto`` to ``path`` atomically; an :class:`ExportError` when it cannot."""
    path = Path(path)
    if path.is_dir():
        raise ExportError(f"output {str(path)!r} is a directory; give a file name such as model.onnx")
    try:
        data = proto.SerializeToString()
    except ValueError as exc:  # protobuf refuses messages over 2 GB
        raise ExportError(f"cannot write {str(path)!r} as one ONNX file ({str(exc).splitlines()[0][:120]}); "
                          f"ONNX files with external weight data are not supported by export") from None
    try:
        with atomic_path(path) as tmp:
            tmp.write_bytes(data)
    except OSError as exc:
        raise ExportError(f"cannot write {str(path)!r}: {exc.strerror or exc}; choose a writable "
                          f"location with -o") from None
    return path


def to_onnx(graph: Graph) -> "onnx.ModelProto":
    """The ONNX model that computes what ``graph`` computes (decoded weights, unfused activations)."""
    return _Exporter(graph).build()


class _Exporter:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.nodes: list[Any] = []  # onnx.NodeProto
        self.initializers: dict[str, np.ndarray] = {}
        self.taken = set(graph.tensors) | {n.name for n in graph.nodes}
        self.opset = _required_opset(graph)

    def fresh(self, base: str) -> str:
        """A tensor or node name not used anywhere in the graph or the export so far."""
        name, i = base, 0
        while name in self.taken:
            i += 1
            name = f"{base}_{i}"
        self.taken.add(name)
        return name

    def constant(self, base: str, value: np.ndarray) -> str:
        name = self.fresh(base)
        self.initializers[name] = np.asarray(value)
        return name

    def emit(self, op: str, inputs: list[str], outputs: list[str], name: str, **attrs: Any) -> None:
        import onnx.helper
        self.nodes.append(onnx.helper.make_node(op, inputs, outputs, name=name, **attrs))

    # -- whole graph --------------------------------------------------------------------------
    def build(self) -> "onnx.ModelProto":
        import onnx
        import onnx.helper
        import onnx.numpy_helper
        graph = self.graph
        for node in graph.nodes:
            self._node(node)
        used = {i for n in self.nodes for i in n.input if i}
        outputs, op_nodes = set(graph.outputs), self.nodes
        self.nodes = []
        for tensor in graph.constants():
            if tensor.name in outputs:
                # an output must be produced by a node: a Constant node (first, as others may read it)
                self.emit("Constant", [], [tensor.name], self.fresh(f"{tensor.name}.constant"),
                          value=onnx.numpy_helper.from_array(_dense(tensor), tensor.name))
            elif tensor.name in used:
                self.initializers[tensor.name] = _dense(tensor)
        self.nodes += op_nodes
        inputs = [_value_info(graph, n) for n in graph.inputs]
        outputs_vi = [_value_info(graph, n) for n in graph.outputs]
        interface = set(graph.inputs) | set(graph.outputs)
        produced = {o for n in self.nodes for o in n.output}
        inner = [_value_info(graph, n) for n, t in graph.tensors.items()
                 if n in produced and n not in interface and not t.is_constant]
        onnx_graph = onnx.helper.make_graph(
            self.nodes, graph.name, inputs, outputs_vi,
            [onnx.numpy_helper.from_array(v, k) for k, v in self.initializers.items()], value_info=inner)
        model = onnx.helper.make_model(onnx_graph, opset_imports=[onnx.helper.make_opsetid("", self.opset)],
                                       producer_name="edgesdk", producer_version=__version__)
        model.ir_version = IR_VERSION if self.opset < 19 else 9
        onnx.helper.set_model_props(model, _metadata_props(graph))
        return model

    # -- one node -----------------------------------------------------------------------------
    def _node(self, node: Node) -> None:
        writer = _WRITERS.get(node.op)
        if writer is None:
            raise UnsupportedModelError(f"node {node.name!r}: cannot export op {node.op!r} to ONNX "
                                        f"(exportable: {', '.join(sorted(_WRITERS))})")
        activation: Activation | None = node.attrs.get("fused_activation")
        try:
            if activation is None:
                writer(self, node, node.outputs[0], node.name)
                return
            # the fused activation becomes its own node again, after the op that computed its input
            pre = self.fresh(f"{node.outputs[0]}.pre_activation")
            writer(self, node, pre, node.name)
            self._activation(activation, pre, node.outputs[0], self.fresh(f"{node.name}.activation"))
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            # a hand-built Graph can lack what the importer always sets: name the node, not our stack
            raise UnsupportedModelError(f"node {node.name!r} ({node.op}) cannot be exported: missing or "
                                        f"malformed attribute ({type(exc).__name__}: {exc})") from None

    def _activation(self, act: Activation, x: str, y: str, name: str) -> None:
        if act.kind == "Clip":
            lo, hi = act.params
            bounds = [self.constant(f"{name}.min", np.float32(lo)) if lo != -np.inf else "",
                      self.constant(f"{name}.max", np.float32(hi)) if hi != np.inf else ""]
            while bounds and not bounds[-1]:
                bounds.pop()
            self.emit("Clip", [x, *bounds], [y], name)
        elif act.kind == "LeakyRelu":
            self.emit("LeakyRelu", [x], [y], name, alpha=act.param("alpha"))
        elif act.kind == "HardSigmoid":
            self.emit("HardSigmoid", [x], [y], name, alpha=act.param("alpha"), beta=act.param("beta"))
        elif act.kind in _FORMULAS:
            self._formula(_FORMULAS[act.kind](act), x, y, name)
        else:  # Relu, Sigmoid, Tanh, HardSwish and the math functions: no parameters
            self.emit(act.kind, [x], [y], name)

    def _formula(self, steps: list[tuple[str, list]], x: str, y: str, name: str) -> None:
        """A chain of nodes: operand "x" is the input, "$" the previous step's result, a number a
        scalar initializer; the last step writes ``y``."""
        previous = x
        for i, (op, operands) in enumerate(steps):
            last = i == len(steps) - 1
            inputs = [x if o == "x" else previous if o == "$" else self.constant(f"{name}.c{i}", np.float32(o))
                      for o in operands]
            out = y if last else self.fresh(f"{name}.{op.lower()}")
            self.emit(op, inputs, [out], name if last else self.fresh(f"{name}.{op.lower()}"))
            previous = out


# Activations whose ONNX ops are newer than opset 17 (Gelu 20, Mish 18, Swish 24), written as the
# opset-17 formulas torch's exporter emits (the importer fuses them back into one node).
def _gelu_formula(act: Activation) -> list[tuple[str, list]]:
    if act.gelu_approximation == "none":  # 0.5 x (1 + erf(x / sqrt 2))
        return [("Div", ["x", math.sqrt(2.0)]), ("Erf", ["$"]), ("Add", ["$", 1.0]), ("Mul", ["x", "$"]),
                ("Mul", ["$", 0.5])]
    # 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
    return [("Mul", ["x", "x"]), ("Mul", ["$", "x"]), ("Mul", ["$", 0.044715]), ("Add", ["x", "$"]),
            ("Mul", ["$", math.sqrt(2.0 / math.pi)]), ("Tanh", ["$"]), ("Add", ["$", 1.0]), ("Mul", ["x", "$"]),
            ("Mul", ["$", 0.5])]


def _swish_formula(act: Activation) -> list[tuple[str, list]]:  # x sigmoid(alpha x)
    alpha = act.param("alpha")
    gate = [("Sigmoid", ["x"])] if alpha == 1.0 else [("Mul", ["x", alpha]), ("Sigmoid", ["$"])]
    return gate + [("Mul", ["x", "$"])]


_FORMULAS: dict[str, Callable[[Activation], list[tuple[str, list]]]] = {
    "Gelu": _gelu_formula,
    "Mish": lambda act: [("Softplus", ["x"]), ("Tanh", ["$"]), ("Mul", ["x", "$"])],  # x tanh(softplus(x))
    "Swish": _swish_formula,
}


def _dense(tensor) -> np.ndarray:
    """The value a constant computes with (encodings decoded); onnx copies it into the proto."""
    return np.asarray(tensor.data)


def _value_info(graph: Graph, name: str) -> Any:
    import onnx.helper
    tensor = graph.tensors[name]
    elem = onnx.helper.np_dtype_to_tensor_dtype(tensor.dtype)
    return onnx.helper.make_tensor_value_info(name, elem, list(tensor.shape))


def _metadata_props(graph: Graph) -> dict[str, str]:
    """What the graph's metadata says about where it came from, as ONNX string properties."""
    props = {}
    for key in ("source", "producer", "fixed_dimensions"):
        value = graph.metadata.get(key)
        if value:
            props[f"edgesdk.{key}"] = value if isinstance(value, str) else json.dumps(value)
    package = graph.metadata.get("package") or {}
    for key in ("source_sha256", "recipe", "accuracy", "accuracy_dataset"):
        if package.get(key) is not None:
            value = package[key]
            props[f"edgesdk.package.{key}"] = value if isinstance(value, str) else json.dumps(value)
    return props


# ---------------------------------------------------------------------------------------------
# Op writers: (exporter, IR node, output name, node name) -> emit ONNX nodes.
# ---------------------------------------------------------------------------------------------
Writer = Callable[[_Exporter, Node, str, str], None]
_WRITERS: dict[str, Writer] = {}


def _writer(*ops: str) -> Callable[[Writer], Writer]:
    def register(fn: Writer) -> Writer:
        for op in ops:
            _WRITERS[op] = fn
        return fn
    return register


def _ints(values) -> list[int]:
    return [int(v) for v in values]


@_writer("Conv")
def _conv(ex, node, out, name):
    a = node.attrs
    ex.emit("Conv", [i for i in node.inputs if i], [out], name, kernel_shape=_ints(a["kernel_shape"]),
            strides=_ints(a["strides"]), dilations=_ints(a["dilations"]), pads=_ints(a["pads"]),
            group=int(a.get("group", 1)))


@_writer("MaxPool", "AveragePool")
def _pool(ex, node, out, name, x: str | None = None):
    """``x``: the exported input when it is not the node's own (a QLinearAveragePool's dequantized
    codes: the pads come from the node's input, of the same shape, which the graph knows)."""
    a = node.attrs
    pads, ceil_mode = _pool_pads(ex.graph, node)
    attrs = dict(kernel_shape=_ints(a["kernel_shape"]), strides=_ints(a["strides"]), pads=pads,
                 ceil_mode=int(ceil_mode))
    dilations = _ints(a.get("dilations", (1, 1)))
    if node.op == "AveragePool":
        attrs["count_include_pad"] = int(bool(a.get("count_include_pad", False)))
        if any(d != 1 for d in dilations):
            attrs["dilations"] = dilations  # _required_opset chose opset 19 for it
    else:
        attrs["dilations"] = dilations
    ex.emit(node.op, [x or node.inputs[0]], [out], name, **attrs)


def _pool_pads(graph: Graph, node: Node) -> tuple[list[int], bool]:
    """Pads and ceil_mode for the ONNX pool node.

    With ceil_mode, a last window that would start in the end padding is dropped (ONNX Runtime,
    PyTorch and edgesdk agree), but onnx's shape inference still counts it, so the checker rejects
    the model. Where that rule drops a window, a smaller end padding gives the same windows without
    the dropped one: the kept windows never reach past it, so no max, and no average (whether or not
    it counts pads), sees a difference."""
    a = node.attrs
    pads, ceil_mode = _ints(a["pads"]), bool(a.get("ceil_mode", False))
    if not ceil_mode:
        return pads, False
    sizes = graph.tensors[node.inputs[0]].shape[2:]
    spans = [(size, a["kernel_shape"][i], a["strides"][i], a["dilations"][i], pads[i], pads[2 + i])
             for i, size in enumerate(sizes)]
    if all(pool_output_size(*span, True) == _ceil_count(*span) for span in spans):
        return pads, True
    ceil_ends = [_end_without_dropped_window(*span, ceil_mode=True) for span in spans]
    if None not in ceil_ends:
        return pads[:2] + ceil_ends, True
    # stride > kernel can leave no such end padding in ceil mode: ceil_mode=0 with the end padding
    # the kept windows reach gives them, unless an average counts pads and a window hangs over
    floor_ends = [_end_without_dropped_window(*span, ceil_mode=False) for span in spans]
    if node.op == "AveragePool" and a.get("count_include_pad") and any(
            e is None or e > span[5] for e, span in zip(floor_ends, spans)):
        return pads, True  # ONNX Runtime runs it right; only onnx's strict shape check disagrees
    return pads[:2] + [e if e is not None else span[5] for e, span in zip(floor_ends, spans)], False


def _end_without_dropped_window(size: int, kernel: int, stride: int, dilation: int, begin: int, end: int,
                                ceil_mode: bool) -> int | None:
    """The smallest end padding, no smaller than the kept windows reach, for which onnx's shape
    inference counts as many windows as ``pool_output_size`` keeps; None if there is none."""
    kept = pool_output_size(size, kernel, stride, dilation, begin, end, True)
    reached = (kept - 1) * stride + (kernel - 1) * dilation + 1 - size - begin
    for candidate in range(max(0, reached), max(end, reached) + 1):
        counted = (_ceil_count(size, kernel, stride, dilation, begin, candidate) if ceil_mode else
                   pool_output_size(size, kernel, stride, dilation, begin, candidate, False))
        if counted == kept:
            return candidate
    return None


def _ceil_count(size: int, kernel: int, stride: int, dilation: int, begin: int, end: int) -> int:
    """Windows per axis as onnx's shape inference counts them with ceil_mode (no drop rule)."""
    return -(-(size + begin + end - (kernel - 1) * dilation - 1) // stride) + 1


@_writer("GlobalAveragePool", "GlobalMaxPool", "MatMul", "Add", "Sub", "Mul", "Div", "Pow", "PRelu")
def _plain(ex, node, out, name):
    ex.emit(node.op, list(node.inputs), [out], name)


@_writer("Gemm")
def _gemm(ex, node, out, name):
    a = node.attrs
    ex.emit("Gemm", [i for i in node.inputs if i], [out], name, alpha=float(a.get("alpha", 1.0)),
            beta=float(a.get("beta", 1.0)), transA=int(bool(a.get("transA"))), transB=int(bool(a.get("transB"))))


@_writer(*ACTIVATION_PARAMS)
def _standalone_activation(ex, node, out, name):
    ex._activation(node.attrs["activation"], node.inputs[0], out, name)


@_writer("BatchNormalization")
def _batch_norm(ex, node, out, name):
    ex.emit("BatchNormalization", node.inputs[:5], [out], name, epsilon=float(node.attrs["epsilon"]))


@_writer("Softmax", "LogSoftmax")
def _softmax(ex, node, out, name):
    axis = int(node.attrs["axis"])
    shape = ex.graph.tensors[node.inputs[0]].shape
    if not node.attrs.get("coerce_2d") or axis == len(shape) - 1:
        ex.emit(node.op, node.inputs[:1], [out], name, axis=axis)
        return
    # opset < 13 Softmax normalises over all axes from ``axis`` on: a 2-D view does the same
    flat = (math.prod(shape[:axis]), math.prod(shape[axis:]))
    flat_in, flat_out = ex.fresh(f"{name}.flat_in"), ex.fresh(f"{name}.flat_out")
    ex.emit("Reshape", [node.inputs[0], ex.constant(f"{name}.flat_shape", np.array(flat, np.int64))],
            [flat_in], ex.fresh(f"{name}.flatten"))
    ex.emit(node.op, [flat_in], [flat_out], name, axis=1)
    ex.emit("Reshape", [flat_out, ex.constant(f"{name}.shape", np.array(shape, np.int64))], [out],
            ex.fresh(f"{name}.unflatten"))


@_writer("LayerNormalization")
def _layer_norm(ex, node, out, name):
    ex.emit("LayerNormalization", [i for i in node.inputs if i], [out], name, axis=int(node.attrs["axis"]),
            epsilon=float(node.attrs["epsilon"]))


@_writer("InstanceNormalization")
def _instance_norm(ex, node, out, name):
    ex.emit("InstanceNormalization", node.inputs[:3], [out], name, epsilon=float(node.attrs["epsilon"]))


@_writer("LRN")
def _lrn(ex, node, out, name):
    a = node.attrs
    ex.emit("LRN", node.inputs[:1], [out], name, size=int(a["size"]), alpha=float(a["alpha"]),
            beta=float(a["beta"]), bias=float(a["bias"]))


@_writer("Reshape")
def _reshape(ex, node, out, name):
    shape = ex.constant(f"{name}.shape", np.array(_ints(node.attrs["shape"]), np.int64))
    ex.emit("Reshape", [node.inputs[0], shape], [out], name)


@_writer("Transpose")
def _transpose(ex, node, out, name):
    ex.emit("Transpose", node.inputs[:1], [out], name, perm=_ints(node.attrs["perm"]))


@_writer("Concat")
def _concat(ex, node, out, name):
    ex.emit("Concat", list(node.inputs), [out], name, axis=int(node.attrs["axis"]))


@_writer("Pad")
def _pad(ex, node, out, name):
    mode = node.attrs.get("mode", "constant")
    inputs = [node.inputs[0], ex.constant(f"{name}.pads", np.array(_ints(node.attrs["pads"]), np.int64))]
    if mode == "constant":
        inputs.append(ex.constant(f"{name}.value", np.array(node.attrs.get("value", 0.0), np.float32)))
    ex.emit("Pad", inputs, [out], name, mode=mode)


@_writer("Split")
def _split(ex, node, out, name):
    sizes = ex.constant(f"{name}.split", np.array(_ints(node.attrs["split"]), np.int64))
    ex.emit("Split", [node.inputs[0], sizes], list(node.outputs), name, axis=int(node.attrs["axis"]))


@_writer("Slice")
def _slice(ex, node, out, name):
    a = node.attrs
    # a backward slice through element 0 ends at -1, which ONNX would read as the last element
    ends = [e if e >= 0 else np.iinfo(np.int64).min for e in _ints(a["ends"])]
    inputs = [node.inputs[0]] + [ex.constant(f"{name}.{what}", np.array(values, np.int64)) for what, values in
                                 (("starts", _ints(a["starts"])), ("ends", ends), ("axes", range(len(ends))),
                                  ("steps", _ints(a["steps"])))]
    ex.emit("Slice", inputs, [out], name)


@_writer("Gather")
def _gather(ex, node, out, name):
    a = node.attrs
    indices = np.array(_ints(a["indices"]), np.int64).reshape(_ints(a["indices_shape"]))
    ex.emit("Gather", [node.inputs[0], ex.constant(f"{name}.indices", indices)], [out], name, axis=int(a["axis"]))


@_writer("Expand", "Tile")
def _expand_tile(ex, node, out, name):
    what = "shape" if node.op == "Expand" else "repeats"
    values = ex.constant(f"{name}.{what}", np.array(_ints(node.attrs[what]), np.int64))
    ex.emit(node.op, [node.inputs[0], values], [out], name)


@_writer("DepthToSpace", "SpaceToDepth")
def _depth_space(ex, node, out, name):
    block, mode = int(node.attrs["blocksize"]), node.attrs["mode"]
    if node.op == "DepthToSpace":
        ex.emit("DepthToSpace", node.inputs[:1], [out], name, blocksize=block, mode=mode)
    elif mode == "DCR":
        ex.emit("SpaceToDepth", node.inputs[:1], [out], name, blocksize=block)
    else:  # SpaceToDepth's mode needs opset 28: the same rearrangement as Reshape, Transpose, Reshape
        n, c, h, w = ex.graph.tensors[node.inputs[0]].shape
        blocks, moved = ex.fresh(f"{out}.blocks"), ex.fresh(f"{out}.moved")
        ex.emit("Reshape", [node.inputs[0], ex.constant(f"{name}.blocks", np.array(
            [n, c, h // block, block, w // block, block], np.int64))], [blocks], ex.fresh(f"{name}.split"))
        ex.emit("Transpose", [blocks], [moved], ex.fresh(f"{name}.move"), perm=[0, 1, 3, 5, 2, 4])
        ex.emit("Reshape", [moved, ex.constant(f"{name}.shape", np.array(
            [n, c * block * block, h // block, w // block], np.int64))], [out], name)


@_writer(*REDUCE_OPS)
def _reduce(ex, node, out, name):
    axes, keepdims = _ints(node.attrs["axes"]), int(bool(node.attrs.get("keepdims", True)))
    if not axes:  # over no axis: the op on each value on its own (ReduceL2 gives |x|)
        x = node.inputs[0]
        inputs = {"ReduceL1": ("Abs", [x]), "ReduceL2": ("Abs", [x]), "ReduceSumSquare": ("Mul", [x, x]),
                  "ReduceLogSum": ("Log", [x])}.get(node.op, ("Identity", [x]))
        ex.emit(inputs[0], inputs[1], [out], name)
    elif ex.opset >= 18 or node.op == "ReduceSum":  # the axes became an input (ReduceSum at 13)
        ex.emit(node.op, [node.inputs[0], ex.constant(f"{name}.axes", np.array(axes, np.int64))], [out],
                name, keepdims=keepdims)
    else:
        ex.emit(node.op, node.inputs[:1], [out], name, axes=axes, keepdims=keepdims)


@_writer(*ARG_OPS)
def _argreduce(ex, node, out, name):
    a = node.attrs
    ex.emit(node.op, node.inputs[:1], [out], name, axis=int(a["axis"]), keepdims=int(bool(a["keepdims"])),
            select_last_index=int(bool(a["select_last_index"])))


@_writer("ConvTranspose")
def _conv_transpose(ex, node, out, name):
    a = node.attrs
    ex.emit("ConvTranspose", [i for i in node.inputs if i], [out], name, kernel_shape=_ints(a["kernel_shape"]),
            strides=_ints(a["strides"]), dilations=_ints(a["dilations"]), pads=_ints(a["pads"]),
            output_padding=_ints(a["output_padding"]), group=int(a["group"]))


@_writer("Resize")
def _resize(ex, node, out, name):
    form = onnx_form(node, ex.graph.tensors[node.inputs[0]].shape)
    scales = ex.constant(f"{name}.scales", np.array(form.scales, np.float32)) if form.scales is not None else ""
    sizes = [ex.constant(f"{name}.sizes", np.array(form.sizes, np.int64))] if form.sizes is not None else []
    ex.emit("Resize", [node.inputs[0], "", scales, *sizes], [out], name, **form.attrs)


# -- 8-bit graphs: written back in the QDQ form (DequantizeLinear -> float op -> QuantizeLinear),
# which ONNX Runtime, OpenVINO and TensorRT fuse into their own integer kernels ------------------
@_writer("QuantizeLinear", "DequantizeLinear")
def _quantize_linear(ex, node, out, name):
    ex.emit(node.op, [i for i in node.inputs if i], [out], name, axis=int(node.attrs.get("axis", 1)))


def _dq(ex, x: str, scale: str, zp: str | None, name: str, axis: int = 1) -> str:
    y = ex.fresh(f"{x}.dequantized")
    ex.emit("DequantizeLinear", [x, scale] + ([zp] if zp else []), [y], ex.fresh(f"{name}.dequantize"), axis=axis)
    return y


def _q_out(ex, node, y_float: str, scale: str, zp: str | None, out: str, name: str) -> None:
    """Q of the op's float result, with the integer op's clamp (a folded Relu/Clip) as a Clip."""
    dtype = ex.graph.tensors[out].dtype
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    qmin, qmax = node.attrs.get("qmin", lo), node.attrs.get("qmax", hi)
    if (qmin, qmax) != (lo, hi):
        s = np.float32(ex.graph.const(scale).reshape(-1)[0])
        z = int(ex.graph.const(zp).reshape(-1)[0]) if zp else 0
        clipped = ex.fresh(f"{y_float}.clamped")
        ex.emit("Clip", [y_float, ex.constant(f"{name}.min", np.float32((qmin - z) * s)),
                         ex.constant(f"{name}.max", np.float32((qmax - z) * s))], [clipped], ex.fresh(f"{name}.clamp"))
        y_float = clipped
    ex.emit("QuantizeLinear", [y_float, scale] + ([zp] if zp else []), [out], ex.fresh(f"{name}.quantize"))


def _bias_dq(ex, bias: str | None, x_scale: str, w_scale: str, name: str) -> str | None:
    if not bias:
        return None
    scale = (np.float32(ex.graph.const(x_scale).reshape(-1)[0]) * ex.graph.const(w_scale).astype(np.float32)).astype(
        np.float32).reshape(-1)
    scale_name = ex.constant(f"{bias}.scale", scale if scale.size > 1 else scale.reshape(()))
    return _dq(ex, bias, scale_name, None, name, axis=0)


@_writer("QLinearConv")
def _qlinear_conv(ex, node, out, name):
    i = node.inputs
    x = _dq(ex, i[0], i[1], i[2], name)
    w = _dq(ex, i[3], i[4], i[5], name, axis=0)
    b = _bias_dq(ex, node.input(8), i[1], i[4], name)
    y = ex.fresh(f"{out}.float")
    _conv(ex, Node("Conv", name, [x, w] + ([b] if b else []), [y], node.attrs), y, name)
    _q_out(ex, node, y, i[6], i[7], out, name)


@_writer("QLinearMatMul")
def _qlinear_matmul(ex, node, out, name):
    i = node.inputs
    y = ex.fresh(f"{out}.float")
    ex.emit("MatMul", [_dq(ex, i[0], i[1], i[2], name), _dq(ex, i[3], i[4], i[5], name, axis=1)], [y], name)
    _q_out(ex, node, y, i[6], i[7], out, name)


@_writer("QGemm")
def _qgemm(ex, node, out, name):
    i = node.inputs
    trans_b = bool(node.attrs["transB"])
    inputs = [_dq(ex, i[0], i[1], i[2], name), _dq(ex, i[3], i[4], i[5], name, axis=0 if trans_b else 1)]
    b = _bias_dq(ex, node.input(6), i[1], i[4], name)
    y = ex.fresh(f"{out}.float")
    ex.emit("Gemm", inputs + ([b] if b else []), [y], name, transB=int(trans_b))
    _q_out(ex, node, y, i[7], i[8], out, name)


@_writer("QLinearAdd", "QLinearMul")
def _qlinear_binary(ex, node, out, name):
    i = node.inputs
    y = ex.fresh(f"{out}.float")
    ex.emit(node.op[len("QLinear"):], [_dq(ex, i[0], i[1], i[2], name), _dq(ex, i[3], i[4], i[5], name)], [y], name)
    _q_out(ex, node, y, i[6], i[7], out, name)


@_writer("QLinearGlobalAveragePool", "QLinearAveragePool")
def _qlinear_pool(ex, node, out, name):
    i = node.inputs
    x = _dq(ex, i[0], i[1], i[2], name)
    y = ex.fresh(f"{out}.float")
    if node.op == "QLinearGlobalAveragePool":
        ex.emit("GlobalAveragePool", [x], [y], name)
    else:
        _pool(ex, Node("AveragePool", name, [i[0]], [y], node.attrs), y, name, x)
    _q_out(ex, node, y, i[3], i[4], out, name)


@_writer("QLinearConcat")
def _qlinear_concat(ex, node, out, name):
    i = node.inputs
    parts = [_dq(ex, i[k], i[k + 1], i[k + 2], name) for k in range(2, len(i), 3)]
    y = ex.fresh(f"{out}.float")
    ex.emit("Concat", parts, [y], name, axis=int(node.attrs["axis"]))
    _q_out(ex, node, y, i[0], i[1], out, name)


@_writer("QLinearLookup")
def _qlinear_lookup(ex, node, out, name):
    """The table's float op between DQ and Q (what it was built from)."""
    i = node.inputs
    y = ex.fresh(f"{out}.float")
    ex._activation(node.attrs["activation"], _dq(ex, i[0], i[2], i[3], name), y, name)
    _q_out(ex, node, y, i[4], i[5], out, name)


@_writer("LQQuantize")
def _lq_quantize(ex, node, out, name):
    """LQ-Nets' nearest-level quantizer in standard ops, exactly: the level index is the count of
    thresholds below x (Greater, so a tie takes the lower level and +-Inf the extreme levels),
    Gather takes the sorted level, and Where keeps NaN (Greater is false for it)."""
    from .ops.lq import level_table
    import onnx
    levels, thresholds, codes = level_table(node)
    x = node.inputs[0]
    column = ex.fresh(f"{out}.column")
    ex.emit("Unsqueeze", [x, ex.constant(f"{name}.last_axis", np.array([-1], np.int64))], [column], ex.fresh(f"{name}/unsqueeze"))
    above = ex.fresh(f"{out}.above")
    ex.emit("Greater", [column, ex.constant(f"{name}.thresholds", thresholds)], [above], ex.fresh(f"{name}/greater"))
    counted = ex.fresh(f"{out}.counted")
    ex.emit("Cast", [above], [counted], ex.fresh(f"{name}/cast"), to=onnx.TensorProto.INT64)
    index = ex.fresh(f"{out}.index")
    ex.emit("ReduceSum", [counted, ex.constant(f"{name}.sum_axis", np.array([-1], np.int64))], [index], ex.fresh(f"{name}/count"),
            keepdims=0)
    level = ex.fresh(f"{out}.level")
    ex.emit("Gather", [ex.constant(f"{name}.levels", levels[codes]), index], [level], ex.fresh(f"{name}/gather"), axis=0)
    nan = ex.fresh(f"{out}.nan")
    ex.emit("IsNaN", [x], [nan], ex.fresh(f"{name}/isnan"))
    ex.emit("Where", [nan, x, level], [out], name)


def _required_opset(graph: Graph) -> int:
    """17, or 19 where a node needs an op version from it (AveragePool dilations, Pad wrap, Resize
    half_pixel_symmetric or keep_aspect_ratio_policy)."""
    for node in graph.nodes:
        dilated = node.op == "AveragePool" and any(d != 1 for d in node.attrs.get("dilations", (1, 1)))
        newer_resize = node.op == "Resize" and onnx_form(node, graph.tensors[node.inputs[0]].shape).opset > BASE_OPSET
        if dilated or newer_resize or (node.op == "Pad" and node.attrs.get("mode") == "wrap"):
            return WIDE_OPSET
    return BASE_OPSET


def exportable_operators() -> list[str]:
    """Every IR op type :func:`to_onnx` writes (all ops the runtime executes)."""
    return sorted(_WRITERS)
