"""The opencl lowering of the normalization family (``edgesdk/ops/normalization.py``): BatchNormalization
(unfused), LayerNormalization, InstanceNormalization, Softmax, LogSoftmax and LRN."""
from __future__ import annotations

import math

import numpy as np

from ....graph import Node
from ....ops.normalization import softmax_view
from ..kernels import (Launch, LoweringContext, NotLowerable, activation_defines, kernel, storage_defines)

# Softmax along a strided axis: one work-item per column when there are enough columns to fill
# the device or the axis is short; else one work-group per column.
COLUMNS_PER_ITEM_KERNEL = 1024
SHORT_AXIS = 32


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
    return [ctx.launch("elementwise.cl", "channel_affine", defines, args, (y.size,), "eltwise")]


# -- work-group sizes -----------------------------------------------------------------------------
def _group_size(ctx: LoweringContext, tuning: str, length: int, default: int) -> int:
    """A power-of-two work-group (the tree reductions halve it) no larger than the row (every
    work-item gets an element), the tuned size or the device allows."""
    wanted = (ctx.config.tuning(tuning).local or (default,))[0]
    limit = min(wanted, length, ctx.device.info.max_work_group_size)
    local = 1
    while local * 2 <= limit:
        local *= 2
    return local


# -- layer and instance norms -------------------------------------------------------------------
def _norm_args(ctx: LoweringContext, node: Node) -> tuple[list, dict]:
    """The scale and optional bias buffers, with the defines for them (W role, B role) and EPS."""
    names = [node.inputs[1], node.input(2)]
    if not all(ctx.is_const(n) for n in names if n):
        raise NotLowerable(f"{node.op} with a scale or bias computed at run time")
    eps = float(np.float32(node.attrs["epsilon"]))
    if math.isnan(eps):  # a NaN cannot be written as a -D constant; every output is NaN anyway
        raise NotLowerable(f"{node.op} with a NaN epsilon")
    scale, scale_half = ctx.dense(names[0])
    bias, bias_half = ctx.dense(names[1]) if names[1] else (ctx.dummy, False)
    return [scale, bias], {"EPS": eps, "HAS_BIAS": int(bool(names[1])), **storage_defines(W=scale_half, B=bias_half)}


@kernel("LayerNormalization")
def layer_norm(ctx: LoweringContext, node: Node) -> list[Launch]:
    x, y = ctx.act(node.inputs[0]), ctx.act(node.outputs[0])
    axis = node.attrs["axis"]
    rows, cols = math.prod(x.shape[:axis]), math.prod(x.shape[axis:])
    affine, affine_defines = _norm_args(ctx, node)
    local = _group_size(ctx, "layer_norm", cols, 128)
    defines = {"LAYER_NORM": 1, "ROWS": rows, "COLS": cols, "LOCAL": local, **affine_defines,
               **storage_defines(X=x.half, Y=y.half), **activation_defines(None)}
    return [ctx.launch("normalization.cl", "layer_norm", defines, [x.buffer, *affine, y.buffer], (rows * local,),
                       local_size=(local,))]


@kernel("InstanceNormalization")
def instance_norm(ctx: LoweringContext, node: Node) -> list[Launch]:
    x, y = ctx.act(node.inputs[0]), ctx.act(node.outputs[0])
    channels, spatial = x.shape[1], math.prod(x.shape[2:])
    rows = x.shape[0] * channels
    affine, affine_defines = _norm_args(ctx, node)
    local = _group_size(ctx, "instance_norm", spatial, 128)
    defines = {"INSTANCE_NORM": 1, "ROWS": rows, "COLS": spatial, "SPATIAL": spatial, "CH": channels, "CPG": 1,
               "LOCAL": local, **affine_defines,
               **storage_defines(X=x.half, Y=y.half), **activation_defines(None)}
    return [ctx.launch("normalization.cl", "instance_norm", defines, [x.buffer, *affine, y.buffer], (rows * local,),
                       local_size=(local,))]


# -- softmax ------------------------------------------------------------------------------------
@kernel("Softmax", "LogSoftmax")
def softmax(ctx: LoweringContext, node: Node) -> list[Launch]:
    """Rows (the last axis, or every axis from ``axis`` on before opset 13): Softmax keeps its
    one-read-of-exp kernel, LogSoftmax the work-group kernel; a strided axis: one work-item per
    column, or one work-group per column when columns are few and the axis long."""
    x, y = ctx.act(node.inputs[0]), ctx.act(node.outputs[0])
    outer, length, inner = softmax_view(node, x.shape)
    log = node.op == "LogSoftmax"
    if inner == 1 and not log:
        if y.half:
            raise AssertionError("Softmax output must be float32 (FP32_ONLY_OPS)")
        local = _group_size(ctx, "softmax", length, 64)
        defines = {"SOFTMAX": 1, "D": length, "INNER": 1, "LOCAL": local, **storage_defines(X=x.half)}
        return [ctx.launch("normalization.cl", "softmax", defines, [x.buffer, y.buffer], (outer * local,),
                           local_size=(local,))]
    defines = {"OUTER": outer, "AXIS": length, "INNER": inner, "LOG_SOFTMAX": int(log),
               **storage_defines(X=x.half, Y=y.half)}
    columns = outer * inner
    if inner > 1 and (columns >= COLUMNS_PER_ITEM_KERNEL or length <= SHORT_AXIS):
        return [ctx.launch("normalization.cl", "softmax_axis", {"SOFTMAX_AXIS": 1, **defines}, [x.buffer, y.buffer],
                           (columns,), "eltwise")]
    local = _group_size(ctx, "softmax", length, 64)
    return [ctx.launch("normalization.cl", "softmax_axis_wg", {"SOFTMAX_AXIS_WG": 1, "LOCAL": local, **defines},
                       [x.buffer, y.buffer], (columns * local,), local_size=(local,))]


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
