"""What a package's graph must satisfy, beyond a sound file, before any backend sees it.

A file whose checksum is valid can still lie: a crafted or buggy writer can give an attribute of
the wrong kind, a node that reads a tensor of another dtype or writes a constant, an encoding whose
index stream is shorter than its tensor. The kernels trust the Graph they are given (the C++ ones
cannot check what they index), so the reader checks here what they take for granted, in the form
the ONNX importer produces (:mod:`edgesdk.onnx_import`: float32 tensors, one output per node,
canonical attributes); each encoding checks itself (:meth:`Encoding.validate`). Every problem is
one :class:`Invalid` naming the node, tensor or field.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..graph import Graph, Node
from ..ops import OPS
from ..ops.registry import Signature
from ..ops.quantize import INTEGER_PASSTHROUGH, QUANTIZED_DTYPES, integer_node_problem
from ..ops.reduce import ARG_OPS, REDUCE_OPS
from ..ops.tensor import PAD_MODES
from ..runtime.activations import ACTIVATION_PARAMS, Activation
from ..runtime.shapes import RUNTIME_OPS, output_dtypes


class Invalid(Exception):
    """One semantic problem in a package; the reader adds the file and the way out."""


# -- op signatures: each op's lives with it (``OpSpec.signature`` in ``edgesdk.ops``) --------------
SIGNATURES: dict[str, Signature] = {name: spec.signature for name, spec in OPS.items()
                                    if spec.runs and spec.signature is not None}
# Ops a fused activation may ride on (``OpSpec.fusable``): the backends apply
# ``fused_activation`` only there, so anywhere else it would mean different things to each.
FUSABLE = frozenset(name for name, spec in OPS.items() if spec.fusable)


# -- the graph ---------------------------------------------------------------------------------
def check_graph(graph: Graph) -> None:
    """Graph inputs, then every node in order: arity, attribute kinds and ranges, dtypes, and
    single assignment (a node writes a fresh activation tensor, never a constant, an input or
    what another node wrote). Shapes are checked afterwards by shape inference."""
    written = set(graph.inputs)
    if len(written) != len(graph.inputs):
        raise Invalid("a graph input is listed twice")
    for name in graph.inputs:
        tensor = graph.tensors[name]
        if tensor.is_constant:
            raise Invalid(f"graph input {name!r} is a constant")
        if tensor.dtype != _FLOAT32:
            raise Invalid(f"graph input {name!r} is {tensor.dtype}; edgesdk runs float32 tensors")
    for node in graph.nodes:
        _check_node(graph, node)
        for output in (graph.tensors[name] for name in node.outputs):
            if output.is_constant or output.name in written:
                what = "a constant" if output.is_constant else "a tensor already computed"
                raise Invalid(f"node {node.name!r} ({node.op}) writes {output.name!r}, {what}")
            written.add(output.name)


def _where(node: Node) -> str:
    op = node.op if node.op in SIGNATURES else repr(node.op)  # an unknown op type may hold anything
    return f"node {node.name!r} ({op})"


def _check_node(graph: Graph, node: Node) -> None:
    signature = SIGNATURES.get(node.op)
    if signature is None or node.op not in RUNTIME_OPS:
        raise Invalid(f"{_where(node)}: no runtime kernel for op {node.op!r}")
    _check_arity(node, signature)
    tensors = graph.tensors
    if OPS[node.op].family == "quantize" or (node.op in INTEGER_PASSTHROUGH
                                            and tensors[node.inputs[0]].dtype in QUANTIZED_DTYPES):
        problem = integer_node_problem(graph, node)
        if problem:
            raise Invalid(f"{_where(node)} {problem}")
        _check_attributes(node, signature)
        return
    # float32 inputs; outputs of the op's dtype (ArgMax's int64 indices), float32 for most
    expected = dict(zip(node.outputs, output_dtypes(node, [_FLOAT32] * len(node.inputs), len(node.outputs))))
    for name in (*node.inputs, *node.outputs):
        if name and tensors[name].dtype != expected.get(name, _FLOAT32):
            role = "output" if name in node.outputs else "input"
            want = expected.get(name, _FLOAT32)
            raise Invalid(f"{_where(node)} {role} {name!r} is {tensors[name].dtype}; "
                          + ("edgesdk runs float32 tensors" if want == _FLOAT32 else f"this op computes {want}"))
    _check_attributes(node, signature)
    check = _RANGE_CHECKS.get(node.op)
    if check is not None:
        check(graph, node, _where(node))


def _check_arity(node: Node, signature: Signature) -> None:
    n = len(node.inputs)
    most = n if signature.variadic else signature.required + signature.optional
    if not signature.required <= n <= most:
        allowed = f"{signature.required}" + (f"-{most}" if most > signature.required else "")
        raise Invalid(f"{_where(node)} has {n} inputs; it takes {allowed}")
    required = node.inputs if signature.variadic else node.inputs[:signature.required]
    if not all(name or i in signature.omittable for i, name in enumerate(required)):
        raise Invalid(f"{_where(node)}: a required input is omitted")
    outputs = len(node.outputs)
    if not all(node.outputs) or outputs < signature.outputs or (outputs > signature.outputs
                                                               and not signature.variadic_outputs):
        expected = f"at least {signature.outputs}" if signature.variadic_outputs else f"exactly {signature.outputs}"
        raise Invalid(f"{_where(node)} has outputs {node.outputs}; it computes {expected}")


def _check_attributes(node: Node, signature: Signature) -> None:
    attrs = node.attrs
    for name, kind in signature.attrs.items():
        if name not in attrs:
            raise Invalid(f"{_where(node)} has no attribute {name!r}")
        if not kind.test(attrs[name]):
            raise Invalid(f"{_where(node)} attribute {name!r} is {attrs[name]!r}, expected {kind.words}")
    if node.op in ACTIVATION_PARAMS and attrs["activation"].kind != node.op:
        raise Invalid(f"{_where(node)} attribute 'activation' is {attrs['activation']}, not {node.op}")
    if "fused_activation" in attrs:
        fused = attrs["fused_activation"]
        if node.op not in FUSABLE or not isinstance(fused, Activation):
            raise Invalid(f"{_where(node)} attribute 'fused_activation' is {fused!r}; only "
                          f"{', '.join(sorted(FUSABLE))} nodes carry one, an activation")


_FLOAT32 = np.dtype(np.float32)


def _rank(graph: Graph, name: str) -> int:
    return len(graph.tensors[name].shape)


# -- value ranges the shape functions and kernels assume ------------------------------------------
def _require_rank(graph: Graph, node: Node, index: int, ranks: tuple[int, ...], where: str) -> None:
    name = node.inputs[index]
    if _rank(graph, name) not in ranks:
        raise Invalid(f"{where} input {name!r} has shape {list(graph.tensors[name].shape)}; "
                      f"expected rank {' or '.join(map(str, ranks))}")


def _check_window(graph: Graph, node: Node, where: str) -> None:
    a = node.attrs
    _require_rank(graph, node, 0, (4,), where)
    for attr, low in (("kernel_shape", 1), ("strides", 1), ("dilations", 1), ("pads", 0)):
        if min(a[attr]) < low:
            raise Invalid(f"{where} attribute {attr!r} is {a[attr]!r}; values below {low} are invalid")


def _check_conv(graph: Graph, node: Node, where: str) -> None:
    _check_window(graph, node, where)
    _require_rank(graph, node, 1, (4,), where)
    out_channels, group = graph.tensors[node.inputs[1]].shape[0], node.attrs["group"]
    if group < 1 or out_channels % group:
        raise Invalid(f"{where}: group {group} does not divide the {out_channels} output channels")
    bias = node.input(2)
    if bias and graph.tensors[bias].shape != (out_channels,):
        raise Invalid(f"{where} bias {bias!r} has shape {list(graph.tensors[bias].shape)}, "
                      f"expected [{out_channels}]")


def _check_gemm(graph: Graph, node: Node, where: str) -> None:
    _require_rank(graph, node, 0, (2,), where)
    _require_rank(graph, node, 1, (2,), where)
    bias = node.input(2)
    if not bias:
        return
    a, b = graph.tensors[node.inputs[0]].shape, graph.tensors[node.inputs[1]].shape
    out = (a[1] if node.attrs["transA"] else a[0], b[0] if node.attrs["transB"] else b[1])
    c = graph.tensors[bias].shape
    # C broadcasts to the output, not the output to C (shape inference accepts either way)
    if len(c) > 2 or any(d not in (1, o) for d, o in zip(reversed(c), reversed(out))):
        raise Invalid(f"{where} C {bias!r} has shape {list(c)}, which does not broadcast to the output's {list(out)}")


def _check_global_pool(graph: Graph, node: Node, where: str) -> None:
    if _rank(graph, node.inputs[0]) < 3:
        raise Invalid(f"{where} input {node.inputs[0]!r} has no spatial axes")


def _check_batch_norm(graph: Graph, node: Node, where: str) -> None:
    x = graph.tensors[node.inputs[0]].shape
    if len(x) < 2:
        raise Invalid(f"{where} input {node.inputs[0]!r} has no channel axis")
    for name in node.inputs[1:]:
        t = graph.tensors[name]
        if not t.is_constant or t.shape != (x[1],):
            raise Invalid(f"{where} parameter {name!r} must be a constant of shape [{x[1]}]")


def _check_axis(graph: Graph, node: Node, where: str) -> None:
    rank, axis = _rank(graph, node.inputs[0]), node.attrs["axis"]
    if not 0 <= axis < max(rank, 1):
        raise Invalid(f"{where} attribute 'axis' is {axis}; the input has rank {rank}")


def _check_reduce(graph: Graph, node: Node, where: str) -> None:
    rank, axes = _rank(graph, node.inputs[0]), tuple(node.attrs["axes"])
    # () is a reduction over no axis (ReduceL2 of each value: |x|)
    if axes != tuple(sorted(set(axes))) or (axes and not 0 <= axes[0] <= axes[-1] < rank):
        raise Invalid(f"{where} attribute 'axes' is {axes!r}; expected increasing axes of a rank-{rank} input")


def _check_transpose(graph: Graph, node: Node, where: str) -> None:
    rank, perm = _rank(graph, node.inputs[0]), node.attrs["perm"]
    if sorted(perm) != list(range(rank)):
        raise Invalid(f"{where} attribute 'perm' is {perm!r}; not a permutation of {rank} axes")


def _check_reshape(graph: Graph, node: Node, where: str) -> None:
    if min(node.attrs["shape"], default=0) < 0:
        raise Invalid(f"{where} attribute 'shape' is {node.attrs['shape']!r}; dimensions cannot be negative")


def _check_pad(graph: Graph, node: Node, where: str) -> None:
    rank, a = _rank(graph, node.inputs[0]), node.attrs
    if len(a["pads"]) != 2 * rank or a["mode"] not in PAD_MODES:
        raise Invalid(f"{where}: pads {a['pads']!r} and mode {a['mode']!r} do not fit a rank-{rank} input "
                      f"(2 x rank pads; modes {', '.join(PAD_MODES)})")


def _check_lrn(graph: Graph, node: Node, where: str) -> None:
    if _rank(graph, node.inputs[0]) < 2:  # every LRN kernel indexes (N, C, ...)
        raise Invalid(f"{where} input {node.inputs[0]!r} has no channel axis")
    if node.attrs["size"] < 1:
        raise Invalid(f"{where} attribute 'size' is {node.attrs['size']}; it must be at least 1")


_RANGE_CHECKS: dict[str, Callable[[Graph, Node, str], None]] = {
    "Conv": _check_conv, "MaxPool": _check_window, "AveragePool": _check_window,
    "GlobalAveragePool": _check_global_pool, "GlobalMaxPool": _check_global_pool,
    "Gemm": _check_gemm, "BatchNormalization": _check_batch_norm,
    "Softmax": _check_axis, "Concat": _check_axis, **dict.fromkeys(REDUCE_OPS, _check_reduce),
    **dict.fromkeys(ARG_OPS, _check_axis),
    "Transpose": _check_transpose, "Reshape": _check_reshape, "Pad": _check_pad, "LRN": _check_lrn,
}
