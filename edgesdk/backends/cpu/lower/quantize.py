"""The cpu lowering of the quantize family (``edgesdk/ops/quantize.py``): QuantizeLinear and
DequantizeLinear as numpy passes in the tensor's stored layout (they touch the graph's inputs and
outputs only, where a pass over the tensor is the whole cost), and the integer ops."""
from __future__ import annotations

import numpy as np

from ....graph import Node
from ....ops.quantize import dtype_range, scalar, zero_point
from ..program import Builder, Runner, Views
from .base import fallback, lowering


def _per_tensor(b: Builder, node: Node) -> bool:
    return b.graph.const(node.inputs[1]).size == 1 and (node.input(2) is None or b.graph.const(node.inputs[2]).size == 1)


@lowering("QuantizeLinear")
def quantize_linear(node: Node, b: Builder) -> None:
    if not _per_tensor(b, node):
        return fallback(node, b, "per-axis QuantizeLinear")
    scale = np.float32(scalar(b.graph.const(node.inputs[1])))
    zp = np.float32(zero_point(b.graph.const(node.input(2))))
    lo, hi = dtype_range(b.graph.tensors[node.outputs[0]].dtype)
    x = b.read_stored(node.inputs[0])
    y = b.write(node.outputs[0], x.layout)
    scratch = b.scratch(b.shape(node.inputs[0]))

    def bind(v: Views) -> Runner:
        xs, out, tmp = v[x], v[y], v[scratch].reshape(v[x].shape)

        def run() -> None:
            # The reference's arithmetic: float32 division, round half to even, then + zero point.
            np.divide(xs, scale, out=tmp)
            np.rint(tmp, out=tmp)
            np.add(tmp, zp, out=tmp)
            np.nan_to_num(tmp, copy=False, nan=0.0)
            np.clip(tmp, lo, hi, out=tmp)
            out[...] = tmp
        return run
    b.emit(node, "numpy", bind, "per-tensor")


@lowering("DequantizeLinear")
def dequantize_linear(node: Node, b: Builder) -> None:
    if not _per_tensor(b, node):
        return fallback(node, b, "per-axis DequantizeLinear")
    scale = np.float32(scalar(b.graph.const(node.inputs[1])))
    zp = np.int32(zero_point(b.graph.const(node.input(2))))
    x = b.read_stored(node.inputs[0])
    y = b.write(node.outputs[0], x.layout)

    def bind(v: Views) -> Runner:
        xs, out = v[x], v[y]

        def run() -> None:
            np.subtract(xs, zp, out=out, dtype=np.float32)
            np.multiply(out, scale, out=out)
        return run
    b.emit(node, "numpy", bind, "per-tensor")


INTEGER_OPS = ("QLinearConv", "QLinearMatMul", "QGemm", "QLinearAdd", "QLinearMul", "QLinearGlobalAveragePool",
               "QLinearAveragePool", "QLinearConcat", "QLinearLookup")


@lowering(*INTEGER_OPS)
def integer_op(node: Node, b: Builder) -> None:
    fallback(node, b, "no native int8 kernel yet")
