"""Static shape inference and the size checks that run before anything is allocated.

Each runtime op's shape rule lives with the op (``edgesdk.ops``, ``OpSpec.shape``) and works on
its *normalised* attributes (see ``onnx_import``): Conv/pool pads are always explicit ``(top,
left, bottom, right)``, Reshape carries its final shape, axes are non-negative. Outputs are
``(shape, dtype)`` pairs. The geometry helpers and size limits are re-exported here for the
modules that import them from their old home.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from ..errors import EdgeSDKError, UnsupportedModelError
from ..graph import Graph, Node
from ..ops import OPS, runtime_ops
from ..ops.geometry import (broadcast_shapes, conv_output_size, normalize_axis, pool_output_size,  # noqa: F401
                            pool_sweep, same_pads)
from .sizes import (INT32_MAX, INT64_MAX, MAX_BYTES_ENV, SizeLimit, check_element_counts,  # noqa: F401
                    check_tensor_size, format_bytes, max_tensor_bytes, size_limit, tensor_nbytes)

Shape = tuple[int, ...]
# ONNX TensorProto.DataType -> numpy dtype, for the folding predictions (without importing onnx,
# which a Session running a package never needs)
_ONNX_DTYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32,
                7: np.int64, 9: np.bool_, 10: np.float16, 11: np.float64, 12: np.uint32, 13: np.uint64}
RUNTIME_OPS = runtime_ops()


def output_dtypes(node: Node, dtypes: list[np.dtype], count: int) -> list[np.dtype]:
    """The dtype of each output: the op's rule, else the first input's."""
    rule = OPS[node.op].dtypes
    return list(rule(node, dtypes)) if rule is not None else [dtypes[0]] * count


def infer_node(node: Node, graph: Graph, limit: SizeLimit | None = None) -> list[tuple[Shape, np.dtype]]:
    """Output shapes and dtypes of ``node`` from its input tensors in ``graph``. Raises
    ModelTooLargeError when an output, the node's scratch or an attribute is beyond what this
    machine holds or the kernels index: this runs before any backend allocates the node."""
    spec = OPS[node.op]
    shapes = [graph.tensors[i].shape if i else () for i in node.inputs]
    dtypes = [graph.tensors[i].dtype if i else None for i in node.inputs]
    outputs = spec.shape(node, shapes)
    out_dtypes = output_dtypes(node, dtypes, len(outputs))
    limit = limit or size_limit()
    for name, shape, dtype in zip(node.outputs, outputs, out_dtypes):
        check_tensor_size(name, shape, dtype, role="activation", node=node, limit=limit)
    check_node(node, shapes, dtypes[0], limit)
    return list(zip(outputs, out_dtypes))


def infer_shapes(graph: Graph) -> None:
    """Create (or check) the tensor of every node output, in node order. For hand-built graphs
    and packages; inputs and constants are size-checked first, each node's outputs as inferred."""
    limit = size_limit()
    for name in graph.inputs:
        tensor = graph.tensors[name]
        check_tensor_size(name, tensor.shape, tensor.dtype, role="input", limit=limit)
    for tensor in graph.constants():
        check_tensor_size(tensor.name, tensor.shape, tensor.dtype, role="constant", limit=limit)
    for node in graph.nodes:
        if node.op not in RUNTIME_OPS:
            raise UnsupportedModelError(f"node {node.name!r}: op {node.op!r} has no runtime kernel; "
                                        f"supported: {', '.join(sorted(RUNTIME_OPS))}")
        for name, (shape, dtype) in zip(node.outputs, infer_node(node, graph, limit)):
            existing = graph.tensors.get(name)
            if existing is None:
                graph.add_tensor(name, shape, dtype)
            elif existing.shape != shape:
                raise UnsupportedModelError(
                    f"node {node.name!r}: output {name!r} is declared {existing.shape} but computes to {shape}")


def check_node(node: Node, shapes: list[Shape], dtype: Any, limit: SizeLimit | None = None) -> None:
    """Attribute ranges and scratch memory of a runtime node on inputs of ``shapes`` (its outputs
    are checked with :func:`check_tensor_size`)."""
    spec = OPS.get(node.op)
    if spec is not None and spec.check is not None:
        spec.check(node, shapes, np.dtype(dtype), limit or size_limit())

def check_graph_sizes(graph: Graph, limit: SizeLimit | None = None) -> SizeLimit:
    """Every tensor of ``graph`` (inputs, constants, activations, outputs) and every node's
    attributes and scratch against :func:`size_limit`, from the shapes alone; returns the limit.
    Whatever built the graph (ONNX import, a package, a pass, a hand-built Graph), this runs
    before a backend allocates anything for it."""
    limit = limit or size_limit()
    tensors = graph.tensors
    for name in graph.inputs:
        check_tensor_size(name, tensors[name].shape, tensors[name].dtype, role="input", limit=limit)
    for tensor in graph.constants():  # shapes only: an encoded weight is not decoded for this
        check_tensor_size(tensor.name, tensor.shape, tensor.dtype, role="constant", limit=limit)
    for node in graph.nodes:
        for name in node.outputs:
            if name and name in tensors and not tensors[name].is_constant:
                check_tensor_size(name, tensors[name].shape, tensors[name].dtype, node=node, limit=limit)
        if node.inputs and node.inputs[0] in tensors:
            check_node(node, [tensors[i].shape if i in tensors else () for i in node.inputs],
                       tensors[node.inputs[0]].dtype, limit)
    return limit


# -- constant folding --------------------------------------------------------------------------
def _onnx_dtype(code: Any, default: Any = np.float64) -> np.dtype:
    # Unknown codes count as 8 bytes an element: the prediction may overestimate, never under.
    return np.dtype(_ONNX_DTYPES.get(int(code), default)) if code is not None else np.dtype(default)


def _range_length(start: Any, limit: Any, delta: Any) -> int | None:
    start, limit, delta = (np.asarray(v).reshape(-1)[0].item() for v in (start, limit, delta))
    if isinstance(start, int) and isinstance(limit, int) and isinstance(delta, int):
        return max(0, -(-(limit - start) // delta)) if delta else None
    if not all(math.isfinite(v) for v in (start, limit, delta)) or delta == 0:
        return None  # numpy refuses these itself, without allocating
    return max(0, math.ceil((limit - start) / delta))


def folded_outputs(node: Node, values: Sequence[np.ndarray | None]) -> list[tuple[Shape, np.dtype]] | None:
    """The (shape, dtype) of each output of ``node`` when it is evaluated on the constant
    ``values``, computed without evaluating it, for the ops whose output can be far larger than
    their inputs (ConstantOfShape, Range, broadcasting ops, Cast, and every runtime op: Expand,
    Tile and Gather among them, by their shape rules). None when it cannot be predicted
    (malformed inputs: evaluating then raises) or the output is no larger than an input already
    in memory."""
    op = node.op
    arrays = [np.asarray(v) if v is not None else None for v in values]
    try:
        if op == "ConstantOfShape":
            fill = node.attrs.get("value")
            dtype = _onnx_dtype(getattr(fill, "data_type", None)) if fill is not None else np.dtype(np.float32)
            return [(tuple(int(d) for d in arrays[0].reshape(-1)), dtype)]
        if op == "Range":
            length = _range_length(*arrays[:3])
            return None if length is None else [((length,), arrays[0].dtype)]
        if op in ("Equal", "Less", "Greater", "Where", "Pow", "Min", "Max"):
            shape = broadcast_shapes(*(a.shape for a in arrays if a is not None))
            dtype = (np.dtype(bool) if op in ("Equal", "Less", "Greater") else
                     arrays[1].dtype if op == "Where" else arrays[0].dtype if op == "Pow" else
                     np.result_type(*[a for a in arrays if a is not None]))
            return [(shape, dtype)]
        if op == "Cast":
            return [(arrays[0].shape, _onnx_dtype(node.attrs.get("to")))]
        if op in RUNTIME_OPS:
            shapes = [a.shape if a is not None else () for a in arrays]
            out = OPS[op].shape(node, shapes)
            return list(zip(out, output_dtypes(node, [a.dtype if a is not None else None for a in arrays],
                                               len(out))))
    except (EdgeSDKError, ValueError, TypeError, IndexError, KeyError, AttributeError, OverflowError):
        return None  # not predictable: evaluating the node reports what is wrong with it
    return None


def check_folding(node: Node, values: Sequence[np.ndarray | None], limit: SizeLimit | None = None) -> None:
    """ModelTooLargeError before a constant ``node`` is evaluated (constant folding, at import or
    in a pass) when an output it would allocate, or a runtime op's scratch, is beyond the limit."""
    predicted = folded_outputs(node, values)
    if predicted is None:
        return
    limit = limit or size_limit()
    for name, (shape, dtype) in zip(node.outputs, predicted):
        check_tensor_size(name or f"{node.name}:output", shape, dtype, role="constant", node=node, limit=limit)
    if OPS.get(node.op) is not None and OPS[node.op].check is not None:
        check_node(node, [np.shape(v) if v is not None else () for v in values],
                   np.asarray(values[0]).dtype, limit)
