"""The opencl lowering of the tensor family (``edgesdk/ops/tensor.py``): Concat, Transpose and Pad (Reshape is a view)."""
from __future__ import annotations

import math

import numpy as np

from ....graph import Node
from ..kernels import Launch, LoweringContext, NotLowerable, kernel, storage_defines
from .common import MAX_RANK, operand, pad_rank, strides_of


@kernel("Concat")
def concat(ctx: LoweringContext, node: Node) -> list[Launch]:
    y = ctx.act(node.outputs[0])
    axis = node.attrs["axis"]
    outer, inner = math.prod(y.shape[:axis]), math.prod(y.shape[axis + 1:])
    launches, offset = [], 0
    for name in node.inputs:
        buffer, half, shape = operand(ctx, name)
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
    in_strides = strides_of(x.shape)
    out = pad_rank(y.shape)
    src = pad_rank(tuple(in_strides[p] for p in perm))
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
               **{f"D{i}": d for i, d in enumerate(pad_rank(y.shape))},
               **{f"E{i}": d for i, d in enumerate(pad_rank(x.shape))},
               **{f"S{i}": s for i, s in enumerate(strides_of(pad_rank(x.shape)))},
               **{f"P{i}": p for i, p in enumerate(begins)}, **storage_defines(X=x.half, Y=y.half)}
    return [ctx.launch("layout.cl", "pad_constant", defines, [x.buffer, y.buffer], (y.size,), "eltwise")]
