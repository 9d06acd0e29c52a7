"""The opencl lowering of the tensor family (``edgesdk/ops/tensor.py``): Concat (one copy per
input), constant Pad, Gather (``gather_axis``) and every op with a strided element mapping -
Transpose, Split (one launch per output), Slice, Expand, Tile, DepthToSpace, SpaceToDepth, and
Gather of evenly spaced indices - on tensor.cl's ``strided_copy``. Reshape is a view."""
from __future__ import annotations

import math

import numpy as np

from ....graph import Node
from ....ops.tensor import Strided, strided_of
from ..kernels import DeviceBuffer, Launch, LoweringContext, NotLowerable, TensorRef, kernel, storage_defines
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
        launches.append(ctx.launch("tensor.cl", "concat_copy", defines, [buffer, y.buffer],
                                   (math.prod(shape),), "eltwise"))
        offset += shape[axis]
    return launches


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
    return [ctx.launch("tensor.cl", "pad_constant", defines, [x.buffer, y.buffer], (y.size,), "eltwise")]


# -- strided copies ---------------------------------------------------------------------------------
def strided_copy(ctx: LoweringContext, x: DeviceBuffer, x_half: bool, y: TensorRef, mapping: Strided) -> Launch:
    """One strided_copy launch writing all of ``y`` from ``x`` as ``mapping`` says (dims merged
    first; more than 6 after that go to the kernel as brace lists)."""
    m = mapping.coalesced()
    defines = {"STRIDED_COPY": 1, "TOTAL": y.size, "BASE": m.offset, **storage_defines(X=x_half, Y=y.half)}
    if len(m.dims) <= MAX_RANK:
        defines.update({f"D{i}": d for i, d in enumerate(pad_rank(m.dims))})
        defines.update({f"S{i}": s for i, s in enumerate((0,) * (MAX_RANK - len(m.strides)) + m.strides)})
    else:
        defines.update(RANK=len(m.dims), DIMS=_brace_list(m.dims), STRIDES=_brace_list(m.strides))
    return ctx.launch("tensor.cl", "strided_copy", defines, [x, y.buffer], (y.size,), "eltwise")


def _brace_list(values: tuple[int, ...]) -> str:
    return "{" + ",".join(str(int(v)) for v in values) + "}"


@kernel("Transpose", "Split", "Slice", "Expand", "Tile", "DepthToSpace", "SpaceToDepth")
def strided(ctx: LoweringContext, node: Node) -> list[Launch]:
    buffer, half, shape = operand(ctx, node.inputs[0])
    return [strided_copy(ctx, buffer, half, ctx.act(name), mapping)
            for name, mapping in zip(node.outputs, strided_of(node, shape)) if name]


@kernel("Gather")
def gather(ctx: LoweringContext, node: Node) -> list[Launch]:
    buffer, half, shape = operand(ctx, node.inputs[0])
    y = ctx.act(node.outputs[0])
    mappings = strided_of(node, shape)
    if mappings:  # evenly spaced indices (x[:, 0]): no index buffer
        return [strided_copy(ctx, buffer, half, y, mappings[0])]
    axis, indices = node.attrs["axis"], node.attrs["indices"]
    index = ctx.raw(f"{node.name}:indices", "gather-indices", np.array(indices, dtype=np.int32))
    defines = {"GATHER_AXIS": 1, "OUTER": math.prod(shape[:axis]), "AXIS_IN": shape[axis],
               "INNER": math.prod(shape[axis + 1:]), "NIDX": len(indices), "IDX_LONG": 0,
               **storage_defines(X=half, Y=y.half)}
    return [ctx.launch("tensor.cl", "gather_axis", defines, [buffer, index, y.buffer], (y.size,), "eltwise")]
