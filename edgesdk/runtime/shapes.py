"""Static shape math shared by the importer, the planner and every backend.

Each runtime op has a shape function over its *normalised* attributes (see ``onnx_import``):
Conv/pool pads are always explicit ``(top, left, bottom, right)``, Reshape carries its final shape,
axes are non-negative. Outputs are ``(shape, dtype)`` pairs.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ..errors import UnsupportedModelError
from ..graph import Graph, Node

Shape = tuple[int, ...]
ShapeFn = Callable[[Node, list[Shape]], list[Shape]]


def conv_output_size(size: int, kernel: int, stride: int, dilation: int, pad_begin: int,
                     pad_end: int) -> int:
    extent = (kernel - 1) * dilation + 1
    return (size + pad_begin + pad_end - extent) // stride + 1


def pool_output_size(size: int, kernel: int, stride: int, dilation: int, pad_begin: int,
                     pad_end: int, ceil_mode: bool) -> int:
    """Output length of a pooling window sweep.

    With ceil_mode the last window may hang over the end, but it must start inside the input or
    the begin padding; otherwise it is dropped (the rule PyTorch and ONNX Runtime share).
    """
    extent = (kernel - 1) * dilation + 1
    span = size + pad_begin + pad_end - extent
    if not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    if (out - 1) * stride >= size + pad_begin:
        out -= 1
    return out


def pool_sweep(node: Node, h: int, w: int) -> tuple[tuple[int, int], tuple[int, int, int, int]]:
    """Output size of a pooling node on an h x w input, and the padding its window sweep needs:
    the explicit pads plus the ceil_mode overhang past the end, as (top, left, bottom, right)."""
    a = node.attrs
    (kh, kw), (sh, sw), (dh, dw), (pt, pl, pb, pr) = a["kernel_shape"], a["strides"], a["dilations"], a["pads"]
    oh = pool_output_size(h, kh, sh, dh, pt, pb, a["ceil_mode"])
    ow = pool_output_size(w, kw, sw, dw, pl, pr, a["ceil_mode"])
    over_h = max(0, (oh - 1) * sh + (kh - 1) * dh + 1 - (h + pt + pb))
    over_w = max(0, (ow - 1) * sw + (kw - 1) * dw + 1 - (w + pl + pr))
    return (oh, ow), (pt, pl, pb + over_h, pr + over_w)


def same_pads(auto_pad: str, sizes: Shape, kernel: Shape, strides: Shape, dilations: Shape
              ) -> tuple[int, ...]:
    """Explicit (begin..., end...) pads for ONNX auto_pad SAME_UPPER / SAME_LOWER / VALID."""
    if auto_pad == "VALID":
        return (0,) * (2 * len(sizes))
    begins, ends = [], []
    for size, k, s, d in zip(sizes, kernel, strides, dilations):
        out = -(-size // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        small, big = total // 2, total - total // 2
        begins.append(small if auto_pad == "SAME_UPPER" else big)
        ends.append(big if auto_pad == "SAME_UPPER" else small)
    return tuple(begins + ends)


def broadcast_shapes(*shapes: Shape) -> Shape:
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*shapes))
    except ValueError:
        raise UnsupportedModelError(f"shapes {' and '.join(map(str, shapes))} do not broadcast") from None


def normalize_axis(axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        raise UnsupportedModelError(f"{what} {axis} is out of range for rank {rank}")
    return axis % max(rank, 1)


def _conv(node: Node, shapes: list[Shape]) -> list[Shape]:
    (n, c, h, w), wshape = shapes[0], shapes[1]
    a = node.attrs
    if c != wshape[1] * a["group"]:
        raise UnsupportedModelError(
            f"node {node.name!r}: input has {c} channels but weights expect {wshape[1]} x group {a['group']}")
    kh, kw = a["kernel_shape"]
    if (kh, kw) != tuple(wshape[2:]):  # ONNX requires them equal; kernels follow the weights
        raise UnsupportedModelError(f"node {node.name!r}: kernel_shape {[kh, kw]} does not match the "
                                    f"weights' {list(wshape[2:])}")
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = a["strides"], a["dilations"], a["pads"]
    oh = conv_output_size(h, kh, sh, dh, pt, pb)
    ow = conv_output_size(w, kw, sw, dw, pl, pr)
    if oh <= 0 or ow <= 0:
        raise UnsupportedModelError(f"node {node.name!r}: input {h}x{w} is too small for its kernel")
    return [(n, wshape[0], oh, ow)]


def _pool(node: Node, shapes: list[Shape]) -> list[Shape]:
    n, c, h, w = shapes[0]
    a = node.attrs
    kh, kw = a["kernel_shape"]
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = a["strides"], a["dilations"], a["pads"]
    oh = pool_output_size(h, kh, sh, dh, pt, pb, a["ceil_mode"])
    ow = pool_output_size(w, kw, sw, dw, pl, pr, a["ceil_mode"])
    if oh <= 0 or ow <= 0:
        raise UnsupportedModelError(f"node {node.name!r}: input {h}x{w} is too small for its window")
    return [(n, c, oh, ow)]


def _global_pool(node: Node, shapes: list[Shape]) -> list[Shape]:
    return [shapes[0][:2] + (1,) * (len(shapes[0]) - 2)]


def _gemm(node: Node, shapes: list[Shape]) -> list[Shape]:
    a_shape, b_shape = shapes[0], shapes[1]
    m, k = a_shape[::-1] if node.attrs["transA"] else a_shape
    k2, n = b_shape[::-1] if node.attrs["transB"] else b_shape
    if k != k2:
        raise UnsupportedModelError(f"node {node.name!r}: Gemm inner sizes differ ({k} vs {k2})")
    if len(shapes) > 2 and shapes[2]:
        broadcast_shapes((m, n), shapes[2])
    return [(m, n)]


def _matmul(node: Node, shapes: list[Shape]) -> list[Shape]:
    a, b = shapes
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise UnsupportedModelError(f"node {node.name!r}: MatMul inner sizes differ ({a} x {b})")
    out = broadcast_shapes(a2[:-2], b2[:-2]) + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return [out]


def _eltwise(node: Node, shapes: list[Shape]) -> list[Shape]:
    return [broadcast_shapes(*shapes)]


def _same(node: Node, shapes: list[Shape]) -> list[Shape]:
    return [shapes[0]]


def _reshape(node: Node, shapes: list[Shape]) -> list[Shape]:
    target = tuple(node.attrs["shape"])
    if math.prod(target) != math.prod(shapes[0]):
        raise UnsupportedModelError(f"node {node.name!r}: cannot reshape {shapes[0]} to {target}")
    return [target]


def _transpose(node: Node, shapes: list[Shape]) -> list[Shape]:
    return [tuple(shapes[0][p] for p in node.attrs["perm"])]


def _concat(node: Node, shapes: list[Shape]) -> list[Shape]:
    axis = node.attrs["axis"]
    first = shapes[0]
    for s in shapes[1:]:
        if len(s) != len(first) or any(a != b for i, (a, b) in enumerate(zip(s, first)) if i != axis):
            raise UnsupportedModelError(f"node {node.name!r}: cannot concatenate {first} and {s} on axis {axis}")
    return [first[:axis] + (sum(s[axis] for s in shapes),) + first[axis + 1:]]


def _pad(node: Node, shapes: list[Shape]) -> list[Shape]:
    pads, rank = node.attrs["pads"], len(shapes[0])
    out = tuple(d + pads[i] + pads[i + rank] for i, d in enumerate(shapes[0]))
    if min(out) < 0:
        raise UnsupportedModelError(f"node {node.name!r}: pads {pads} crop {shapes[0]} below zero")
    return [out]


def _reduce(node: Node, shapes: list[Shape]) -> list[Shape]:
    axes, keep = node.attrs["axes"], node.attrs["keepdims"]
    return [tuple(1 if i in axes else d for i, d in enumerate(shapes[0]) if keep or i not in axes)]


SHAPE_FUNCTIONS: dict[str, ShapeFn] = {
    "Conv": _conv,
    "MaxPool": _pool,
    "AveragePool": _pool,
    "GlobalAveragePool": _global_pool,
    "GlobalMaxPool": _global_pool,
    "Gemm": _gemm,
    "MatMul": _matmul,
    "Add": _eltwise, "Sub": _eltwise, "Mul": _eltwise, "Div": _eltwise,
    "Relu": _same, "Clip": _same, "LeakyRelu": _same, "Sigmoid": _same, "Tanh": _same,
    "HardSigmoid": _same, "HardSwish": _same,
    "BatchNormalization": _same, "Softmax": _same, "LRN": _same,
    "Reshape": _reshape,
    "Transpose": _transpose,
    "Concat": _concat,
    "Pad": _pad,
    "ReduceMean": _reduce,
}

RUNTIME_OPS = frozenset(SHAPE_FUNCTIONS)


def infer_node(node: Node, graph: Graph) -> list[tuple[Shape, np.dtype]]:
    """Output shapes and dtypes of ``node`` from its input tensors in ``graph``."""
    fn = SHAPE_FUNCTIONS[node.op]
    shapes = [graph.tensors[i].shape if i else () for i in node.inputs]
    dtype = graph.tensors[node.inputs[0]].dtype
    return [(s, dtype) for s in fn(node, shapes)]


def infer_shapes(graph: Graph) -> None:
    """Create (or check) the tensor of every node output, in node order. For hand-built graphs."""
    for node in graph.nodes:
        if node.op not in SHAPE_FUNCTIONS:
            raise UnsupportedModelError(f"node {node.name!r}: op {node.op!r} has no runtime kernel; "
                                        f"supported: {', '.join(sorted(SHAPE_FUNCTIONS))}")
        for name, (shape, dtype) in zip(node.outputs, infer_node(node, graph)):
            existing = graph.tensors.get(name)
            if existing is None:
                graph.add_tensor(name, shape, dtype)
            elif existing.shape != shape:
                raise UnsupportedModelError(
                    f"node {node.name!r}: output {name!r} is declared {existing.shape} but computes to {shape}")
