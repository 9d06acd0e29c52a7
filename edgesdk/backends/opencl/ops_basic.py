"""Lowerings of the memory-bound ops: element-wise, pooling, normalisation and data movement."""
from __future__ import annotations

import math

import numpy as np

from ...graph import Node
from ...runtime.shapes import pool_sweep
from .kernels import (DeviceBuffer, Launch, LoweringContext, NotLowerable, activation_defines, ceil_div,
                      kernel, storage_defines)

MAX_RANK = 6
_BINARY_OPS = {"Add": 0, "Sub": 1, "Mul": 2, "Div": 3}


def _operand(ctx: LoweringContext, name: str) -> tuple[DeviceBuffer, bool, tuple[int, ...]]:
    shape = ctx.graph.tensors[name].shape
    if ctx.is_const(name):
        buffer, half = ctx.dense(name)
        return buffer, half, shape
    ref = ctx.act(name)
    return ref.buffer, ref.half, shape


def _padded(shape: tuple[int, ...], rank: int = MAX_RANK) -> tuple[int, ...]:
    if len(shape) > rank:
        raise NotLowerable(f"rank {len(shape)} is above the kernels' {rank}")
    return (1,) * (rank - len(shape)) + tuple(shape)


def _strides(shape: tuple[int, ...]) -> list[int]:
    strides, running = [0] * len(shape), 1
    for i in range(len(shape) - 1, -1, -1):
        strides[i] = running
        running *= shape[i]
    return strides


def _broadcast_strides(shape: tuple[int, ...], out: tuple[int, ...]) -> list[int]:
    """Element strides of ``shape`` broadcast to ``out`` (both padded to MAX_RANK), 0 where broadcast."""
    padded = _padded(shape)
    return [s if d > 1 else 0 for s, d in zip(_strides(padded), padded)]


@kernel("Add", "Sub", "Mul", "Div")
def binary(ctx: LoweringContext, node: Node) -> list[Launch]:
    y = ctx.act(node.outputs[0])
    a, a_half, a_shape = _operand(ctx, node.inputs[0])
    b, b_half, b_shape = _operand(ctx, node.inputs[1])
    common = {"OP": _BINARY_OPS[node.op], "TOTAL": y.size, **storage_defines(A=a_half, B=b_half, Y=y.half),
              **activation_defines(node.attrs.get("fused_activation"))}
    if a_shape == b_shape == y.shape:
        return [ctx.launch("eltwise.cl", "binary_same", {"BINARY_SAME": 1, **common}, [a, b, y.buffer],
                           (ceil_div(y.size, ctx.vec),), "eltwise")]
    out = _padded(y.shape)
    defines = {"BINARY_BROADCAST": 1, **common, **{f"D{i}": d for i, d in enumerate(out)},
               **{f"SA{i}": s for i, s in enumerate(_broadcast_strides(a_shape, out))},
               **{f"SB{i}": s for i, s in enumerate(_broadcast_strides(b_shape, out))}}
    return [ctx.launch("eltwise.cl", "binary_broadcast", defines, [a, b, y.buffer], (y.size,), "eltwise")]


@kernel("Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish")
def activation(ctx: LoweringContext, node: Node) -> list[Launch]:
    x, y = ctx.act(node.inputs[0]), ctx.act(node.outputs[0])
    defines = {"UNARY": 1, "TOTAL": y.size, **storage_defines(X=x.half, Y=y.half),
               **activation_defines(node.attrs["activation"])}
    return [ctx.launch("eltwise.cl", "unary", defines, [x.buffer, y.buffer], (ceil_div(y.size, ctx.vec),),
                       "eltwise")]


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


@kernel("MaxPool", "AveragePool")
def pool(ctx: LoweringContext, node: Node) -> list[Launch]:
    x, y = ctx.act(node.inputs[0]), ctx.act(node.outputs[0])
    if len(x.shape) != 4:
        raise NotLowerable("only 2-D pooling has kernels")
    n, c, h, w = x.shape
    a = node.attrs
    (oh, ow), _ = pool_sweep(node, h, w)
    pt, pl, pb, pr = a["pads"]
    counted = (-pt, h + pb, -pl, w + pr) if a.get("count_include_pad") else (0, h, 0, w)
    defines = {"POOL2D": 1, "IS_MAX": int(node.op == "MaxPool"), "N": n, "C": c, "H": h, "W": w, "OH": oh,
               "OW": ow, "KH": a["kernel_shape"][0], "KW": a["kernel_shape"][1], "SH": a["strides"][0],
               "SW": a["strides"][1], "DH": a["dilations"][0], "DW": a["dilations"][1], "PT": pt, "PL": pl,
               "CH0": counted[0], "CH1": counted[1], "CW0": counted[2], "CW1": counted[3],
               **storage_defines(X=x.half, Y=y.half)}
    return [ctx.launch("pool.cl", "pool2d", defines, [x.buffer, y.buffer], (y.size,), "pool")]


@kernel("GlobalAveragePool", "GlobalMaxPool")
def global_pool(ctx: LoweringContext, node: Node) -> list[Launch]:
    x, y = ctx.act(node.inputs[0]), ctx.act(node.outputs[0])
    planes = x.shape[0] * x.shape[1]
    defines = {"GLOBAL_POOL": 1, "IS_MAX": int(node.op == "GlobalMaxPool"), "PLANES": planes,
               "SPATIAL": math.prod(x.shape[2:]), **storage_defines(X=x.half, Y=y.half)}
    return [ctx.launch("pool.cl", "global_pool", defines, [x.buffer, y.buffer], (planes,), "reduce")]


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


@kernel("ReduceMean")
def reduce_mean(ctx: LoweringContext, node: Node) -> list[Launch]:
    x, y = ctx.act(node.inputs[0]), ctx.act(node.outputs[0])
    axes = set(node.attrs["axes"])
    strides = _strides(x.shape)
    kept = [(d, s) for i, (d, s) in enumerate(zip(x.shape, strides)) if i not in axes]
    reduced = [(d, s) for i, (d, s) in enumerate(zip(x.shape, strides)) if i in axes]
    if len(kept) > 4 or len(reduced) > 4:
        raise NotLowerable("ReduceMean over more than 4 kept or reduced dims")
    kept = [(1, 0)] * (4 - len(kept)) + kept
    reduced = [(1, 0)] * (4 - len(reduced)) + reduced
    defines = {"REDUCE_MEAN": 1, "OUT_TOTAL": y.size, **storage_defines(X=x.half, Y=y.half)}
    for i, ((kd, ks), (rd, rs)) in enumerate(zip(kept, reduced)):
        defines.update({f"K{i}": kd, f"KS{i}": ks, f"R{i}": rd, f"RS{i}": rs})
    return [ctx.launch("normalization.cl", "reduce_mean", defines, [x.buffer, y.buffer], (y.size,), "reduce")]


@kernel("Concat")
def concat(ctx: LoweringContext, node: Node) -> list[Launch]:
    y = ctx.act(node.outputs[0])
    axis = node.attrs["axis"]
    outer, inner = math.prod(y.shape[:axis]), math.prod(y.shape[axis + 1:])
    launches, offset = [], 0
    for name in node.inputs:
        buffer, half, shape = _operand(ctx, name)
        defines = {"CONCAT_COPY": 1, "OUTER": outer, "AX": shape[axis], "INNER": inner, "YAX": y.shape[axis],
                   "OFF": offset, **storage_defines(X=half, Y=y.half)}
        launches.append(ctx.launch("layout.cl", "concat_copy", defines, [buffer, y.buffer],
                                   (math.prod(shape),), "eltwise"))
        offset += shape[axis]
    return launches


@kernel("Transpose")
def transpose(ctx: LoweringContext, node: Node) -> list[Launch]:
    x, y = ctx.act(node.inputs[0]), ctx.act(node.outputs[0])
    perm = node.attrs["perm"]
    in_strides = _strides(x.shape)
    out = _padded(y.shape)
    src = _padded(tuple(in_strides[p] for p in perm))
    defines = {"TRANSPOSE": 1, "TOTAL": y.size, **{f"D{i}": d for i, d in enumerate(out)},
               **{f"S{i}": s for i, s in enumerate(src)}, **storage_defines(X=x.half, Y=y.half)}
    return [ctx.launch("layout.cl", "transpose", defines, [x.buffer, y.buffer], (y.size,), "eltwise")]


@kernel("Pad")
def pad(ctx: LoweringContext, node: Node) -> list[Launch]:
    if node.attrs["mode"] != "constant":
        raise NotLowerable(f"Pad mode {node.attrs['mode']!r} (only constant padding has a kernel)")
    x, y = ctx.act(node.inputs[0]), ctx.act(node.outputs[0])
    rank = len(x.shape)
    if rank > MAX_RANK:
        raise NotLowerable(f"rank {rank} is above the kernels' {MAX_RANK}")
    begins = (0,) * (MAX_RANK - rank) + tuple(node.attrs["pads"][:rank])
    defines = {"PAD_CONSTANT": 1, "TOTAL": y.size, "VALUE": float(np.float32(node.attrs["value"])),
               **{f"D{i}": d for i, d in enumerate(_padded(y.shape))},
               **{f"E{i}": d for i, d in enumerate(_padded(x.shape))},
               **{f"S{i}": s for i, s in enumerate(_strides(_padded(x.shape)))},
               **{f"P{i}": p for i, p in enumerate(begins)}, **storage_defines(X=x.half, Y=y.half)}
    return [ctx.launch("layout.cl", "pad_constant", defines, [x.buffer, y.buffer], (y.size,), "eltwise")]
