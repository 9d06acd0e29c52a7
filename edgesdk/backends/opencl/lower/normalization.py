"""The opencl lowering of the normalization family (``edgesdk/ops/normalization.py``): BatchNormalization (unfused), Softmax and LRN."""
from __future__ import annotations

import math

import numpy as np

from ....graph import Node
from ..kernels import Launch, LoweringContext, NotLowerable, activation_defines, kernel, storage_defines


@kernel("BatchNormalization")
def batch_norm(ctx: LoweringContext, node: Node) -> list[Launch]:
    x, y = ctx.act(node.inputs[0]), ctx.act(node.outputs[0])
    if not all(ctx.is_const(n) for n in node.inputs[1:5]):
        raise NotLowerable("BatchNormalization with run-time statistics")
    gamma, beta, mean, var = (ctx.graph.const(n).astype(np.float32) for n in node.inputs[1:5])
    scale = gamma / np.sqrt(var + np.float32(node.attrs["epsilon"]))
    shift = beta - mean * scale
    defines = {"CHANNEL_AFFINE": 1, "TOTAL": y.size, "CH": x.shape[1], "INNER": math.prod(x.shape[2:]),
               **storage_defines(X=x.half, Y=y.half), **activation_defines(node.attrs.get("fused_activation"))}
    args = [x.buffer, ctx.small_float(node.inputs[1], "bn-scale", scale),
            ctx.small_float(node.inputs[2], "bn-shift", shift), y.buffer]
    return [ctx.launch("eltwise.cl", "channel_affine", defines, args, (y.size,), "eltwise")]


@kernel("Softmax")
def softmax(ctx: LoweringContext, node: Node) -> list[Launch]:
    x, y = ctx.act(node.inputs[0]), ctx.act(node.outputs[0])
    if y.half:
        raise AssertionError("Softmax output must be float32 (FP32_ONLY_OPS)")
    axis = node.attrs["axis"]
    outer = math.prod(x.shape[:axis])
    if node.attrs["coerce_2d"]:
        d, inner = math.prod(x.shape[axis:]), 1
    else:
        d, inner = x.shape[axis], math.prod(x.shape[axis + 1:])
    # A power-of-two work-group (the tree reduction halves it), no larger than the row needs.
    wanted = (ctx.config.tuning("softmax").local or (64,))[0]
    local = 1
    while local * 2 <= min(wanted, d, ctx.device.info.max_work_group_size):
        local *= 2
    rows = outer * inner
    defines = {"SOFTMAX": 1, "D": d, "INNER": inner, "LOCAL": local, **storage_defines(X=x.half)}
    return [ctx.launch("normalization.cl", "softmax", defines, [x.buffer, y.buffer], (rows * local,),
                       local_size=(local,))]


@kernel("LRN")
def lrn(ctx: LoweringContext, node: Node) -> list[Launch]:
    x, y = ctx.act(node.inputs[0]), ctx.act(node.outputs[0])
    a = node.attrs
    size = a["size"]
    defines = {"LRN": 1, "TOTAL": y.size, "CH": x.shape[1], "INNER": math.prod(x.shape[2:]),
               "BEFORE": (size - 1) // 2, "AFTER": math.ceil((size - 1) / 2),
               "ALPHA_N": float(np.float32(a["alpha"] / size)), "BETA_P": float(np.float32(a["beta"])),
               "BIAS": float(np.float32(a["bias"])), **storage_defines(X=x.half)}
    return [ctx.launch("normalization.cl", "lrn", defines, [x.buffer, y.buffer], (y.size,), "eltwise")]
