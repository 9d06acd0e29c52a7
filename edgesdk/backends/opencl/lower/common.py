"""What the memory-bound lowerings share: operands, rank padding and broadcast strides."""
from __future__ import annotations


from ..kernels import DeviceBuffer, LoweringContext, NotLowerable

MAX_RANK = 6


def operand(ctx: LoweringContext, name: str) -> tuple[DeviceBuffer, bool, tuple[int, ...]]:
    shape = ctx.graph.tensors[name].shape
    if ctx.is_const(name):
        buffer, half = ctx.dense(name)
        return buffer, half, shape
    ref = ctx.act(name)
    return ref.buffer, ref.half, shape


def pad_rank(shape: tuple[int, ...], rank: int = MAX_RANK) -> tuple[int, ...]:
    if len(shape) > rank:
        raise NotLowerable(f"rank {len(shape)} is above the kernels' {rank}")
    return (1,) * (rank - len(shape)) + tuple(shape)


def strides_of(shape: tuple[int, ...]) -> list[int]:
    strides, running = [0] * len(shape), 1
    for i in range(len(shape) - 1, -1, -1):
        strides[i] = running
        running *= shape[i]
    return strides


def broadcast_strides(shape: tuple[int, ...], out: tuple[int, ...]) -> list[int]:
    """Element strides of ``shape`` broadcast to ``out`` (both padded to MAX_RANK), 0 where broadcast."""
    full = pad_rank(shape)
    return [s if d > 1 else 0 for s, d in zip(strides_of(full), full)]
