"""The cpu lowering of the pool family (``edgesdk/ops/pool.py``): Max / average / global pooling."""
from __future__ import annotations

from functools import partial

import numpy as np

from ....graph import Node
from ....ops.geometry import pool_sweep
from ..program import NCHW, NHWC, Builder, reads_chw
from .base import fused_act, native_kernels, then_activate, fallback, lowering


@lowering("MaxPool", "AveragePool")
def pool(node: Node, b: Builder) -> None:
    if b.graph.tensors[node.inputs[0]].dtype != np.float32:
        from .quantize import uint8_max_pool
        return uint8_max_pool(node, b)
    k = native_kernels()
    shape = b.shape(node.inputs[0])
    if len(shape) != 4:
        return fallback(node, b, "pooling over a rank other than 4")
    a = node.attrs
    sweep_pads, why_not = swept_pads(node, b)
    if why_not:
        return fallback(node, b, why_not)
    average = node.op == "AveragePool"
    include_pad = bool(average and a["count_include_pad"])
    x = b.read(node.inputs[0], NHWC)
    y = b.write(node.outputs[0], NHWC)
    fn = k.steps.avg_pool if average else k.steps.max_pool
    args = (tuple(a["kernel_shape"]), tuple(a["strides"]), tuple(a["dilations"]), list(sweep_pads), include_pad)
    act, threads = fused_act(node), b.threads_for(node)
    b.emit(node, "native", lambda v: fn(v[x], v[y], *args, *act, threads), node.op)


def swept_pads(node: Node, b: Builder) -> tuple[list[int], str | None]:
    """The pads the native pools sweep (ceil_mode's overhang is more end padding: skipped taps),
    and why they cannot take them, if so: an average counting pads would count the overhang as
    padding, and the reference does not. The float and the uint8 pools both ask here."""
    shape = b.shape(node.inputs[0])
    pads = list(pool_sweep(node, shape[2], shape[3])[1])
    if node.op.endswith("AveragePool") and node.attrs["count_include_pad"] and pads != list(node.attrs["pads"]):
        return pads, f"{node.op} counting pads with a ceil_mode overhang"
    return pads, None


@lowering("GlobalAveragePool", "GlobalMaxPool")
def global_pool(node: Node, b: Builder) -> None:
    k = native_kernels()
    shape = b.shape(node.inputs[0])
    if len(shape) != 4:
        return fallback(node, b, "global pooling over a rank other than 4")
    n, c = shape[:2]
    act, threads = fused_act(node), b.threads_for(node)
    if node.op == "GlobalAveragePool" and reads_chw(b, node.inputs[0]):
        x, y = b.read(node.inputs[0], NCHW), b.write(node.outputs[0], NCHW)
        b.emit(node, "native", lambda v: k.steps.global_avgpool_chw(v[x], v[y].reshape(n, c), *act, threads),
               "global average (CHW)")
        return
    x = b.read(node.inputs[0], NHWC)
    y = b.write(node.outputs[0], NHWC)
    if node.op == "GlobalAveragePool":
        b.emit(node, "native", lambda v: k.steps.global_avg_pool(v[x], v[y].reshape(n, c), *act, threads),
               "global average")
        return
    b.emit(node, "numpy", lambda v: then_activate(
        partial(np.max, v[x], axis=(1, 2), out=v[y].reshape(n, c)), v[y], act, threads), "max over H, W")
