"""The cpu lowering of the normalization family (``edgesdk/ops/normalization.py``): BatchNormalization, Softmax and LRN."""
from __future__ import annotations

import math
from functools import partial

import numpy as np

from ....graph import Node
from ..program import NCHW, NHWC, Builder, Runner, Views
from .base import NO_ACT, fused_act, native_kernels, then_activate, fallback, lowering


@lowering("BatchNormalization")
def batch_norm(node: Node, b: Builder) -> None:
    """Per-channel x * scale + shift (two native passes), for BatchNorms the passes kept."""
    k = native_kernels()
    shape = b.shape(node.inputs[0])
    scale_, bias_, mean, var = (np.asarray(b.graph.const(n), dtype=np.float32) if b.graph.const(n) is not None else None
                                for n in node.inputs[1:5])
    if len(shape) not in (2, 4) or any(p is None for p in (scale_, bias_, mean, var)):
        return fallback(node, b, "BatchNormalization with non-constant statistics or rank other than 2 and 4")
    inv_std = scale_ / np.sqrt(var + np.float32(node.attrs["epsilon"]))
    scale = np.ascontiguousarray(inv_std, dtype=np.float32)
    shift = np.ascontiguousarray(bias_ - mean * inv_std, dtype=np.float32)
    x = b.read(node.inputs[0], NHWC)
    y = b.write(node.outputs[0], NHWC)
    act, threads = fused_act(node), b.threads_for(node)

    def bind(v: Views) -> Runner:
        multiply = partial(k.binary, "mul", v[x], scale, v[y], False, *NO_ACT, threads)
        add = partial(k.binary, "add", v[y], shift, v[y], False, *act, threads)

        def run() -> None:
            multiply()
            add()
        return run
    b.emit(node, "native", bind, "per-channel scale and shift")


@lowering("Softmax")
def softmax(node: Node, b: Builder) -> None:
    k = native_kernels()
    shape = b.shape(node.inputs[0])
    axis, coerce = node.attrs["axis"], node.attrs["coerce_2d"]
    rank = len(shape)
    threads = b.threads_for(node)
    if rank == 4 and axis == 1 and not coerce and shape[2] * shape[3] > 1 and b.stored_layout(node.inputs[0]) == NHWC:
        x = b.read(node.inputs[0], NHWC)  # channels are innermost: one softmax per pixel row
        y = b.write(node.outputs[0], NHWC)
    elif axis == rank - 1 or coerce:
        x = b.read(node.inputs[0], NCHW)
        y = b.write(node.outputs[0], NCHW)
        rows = math.prod(shape[:axis])
        b.emit(node, "native", lambda v: then_activate(
            partial(k.softmax, v[x].reshape(rows, -1), v[y].reshape(rows, -1), threads), v[y], fused_act(node), threads),
            "two-pass softmax")
        return
    else:
        return fallback(node, b, f"Softmax over axis {axis} of a rank-{rank} tensor")
    b.emit(node, "native", lambda v: then_activate(partial(k.softmax, v[x], v[y], threads), v[y], fused_act(node),
                                                    threads), "two-pass softmax over channels")


# -- pooling ------------------------------------------------------------------------------------
@lowering("LRN")
def lrn(node: Node, b: Builder) -> None:
    fallback(node, b, "no native LRN kernel")
