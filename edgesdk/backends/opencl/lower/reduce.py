"""The opencl lowering of the reduce family (``edgesdk/ops/reduce.py``): Reduce* on any axes with
``reduce.cl`` (one (outer, axis, inner) pass per run of reduced axes, see ``reduction_passes``;
the partial results of a multi-pass reduction live in the node's arena scratch), ArgMax / ArgMin
with ``argreduce_axis`` writing the int64 indices directly."""
from __future__ import annotations

import math

from ....graph import Graph, Node
from ....ops.reduce import ARG_OPS, REDUCE_KINDS, REDUCE_OPS, ReducePass, reduction_passes
from ..kernels import DeviceBuffer, Launch, LoweringContext, kernel, storage_defines

__all__ = ["REDUCE_OPS", "reduce_scratch_bytes"]

# reduce.cl's REDUCE_OP ids
_REDUCE_OP_IDS = {"sum": 0, "mean": 1, "max": 2, "min": 3, "l2": 4, "sum_square": 5, "l1": 6, "log_sum": 7,
                  "log_sum_exp": 8, "prod": 9}


def _passes(node: Node, shape: tuple[int, ...]) -> list[ReducePass]:
    return reduction_passes(shape, tuple(node.attrs["axes"]), REDUCE_KINDS[node.op])


def _align(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


def _scratch_halves(passes: list[ReducePass], alignment: int) -> tuple[int, int]:
    """Bytes of the two float regions the partial results alternate between (pass i writes
    region i % 2), the first aligned so that the second starts on a sub-buffer boundary."""
    partial = [4 * p.out_size for p in passes[:-1]]
    return _align(max(partial[0::2], default=0), alignment), max(partial[1::2], default=0)


def reduce_scratch_bytes(node: Node, graph: Graph, alignment: int) -> int:
    """Arena scratch a reduction node needs while it runs: its partial results (0 in one pass)."""
    first, second = _scratch_halves(_passes(node, graph.tensors[node.inputs[0]].shape), alignment)
    return first + second if first else 0


@kernel(*REDUCE_OPS)
def reduce(ctx: LoweringContext, node: Node) -> list[Launch]:
    x, y = ctx.act(node.inputs[0]), ctx.act(node.outputs[0])
    passes = _passes(node, x.shape)
    partials = _partial_buffers(ctx, node, passes)
    launches = []
    source, source_half = x.buffer, x.half
    for index, p in enumerate(passes):
        target, target_half = (y.buffer, y.half) if index == len(passes) - 1 else (partials[index], False)
        launches.append(_reduce_launch(ctx, p, source, source_half, target, target_half))
        source, source_half = target, target_half
    return launches


def _partial_buffers(ctx: LoweringContext, node: Node, passes: list[ReducePass]) -> list[DeviceBuffer]:
    """Float sub-buffers of the node's scratch for each pass but the last. A sub-buffer cannot
    be carved from a sub-buffer, so these are regions of the arena the scratch block is part of."""
    if len(passes) == 1:
        return []
    scratch = ctx.scratch[node.name]
    alignment = max(ctx.device.info.mem_base_addr_align_bits // 8, 64)
    second_region = _scratch_halves(passes, alignment)[0]
    return [DeviceBuffer(ctx.device, 4 * p.out_size, label=f"{node.name}:pass{i}", zero_copy=scratch.zero_copy,
                         parent=scratch.parent, origin=scratch.origin + (second_region if i % 2 else 0))
            for i, p in enumerate(passes[:-1])]


def _reduce_launch(ctx: LoweringContext, p: ReducePass, source: DeviceBuffer, source_half: bool,
                   target: DeviceBuffer, target_half: bool) -> Launch:
    defines = {"REDUCE_OP": _REDUCE_OP_IDS[p.kind], "OUTER": p.outer, "AXIS": p.axis, "INNER": p.inner,
               **storage_defines(X=source_half, Y=target_half)}
    local = _group_size(ctx, p)
    if local > 1:
        return ctx.launch("reduce.cl", "reduce_axis_wg", {"REDUCE_AXIS_WG": 1, "LOCAL": local, **defines},
                          [source, target], (p.out_size * local,), local_size=(local,))
    return ctx.launch("reduce.cl", "reduce_axis", {"REDUCE_AXIS": 1, **defines}, [source, target], (p.out_size,),
                      "reduce")


def _group_size(ctx: LoweringContext, p: ReducePass) -> int:
    """Work-items that share one output: a power of two up to the tuned ``reduce`` work-group
    size for rows of contiguous values (INNER 1) at least that long; 1 (a work-item per output)
    otherwise, and on devices whose configuration sets no work-group size (CPUs, where a
    work-group runs on one core anyway)."""
    tuned = ctx.config.tuning("reduce").local
    if not tuned or p.inner != 1 or p.axis < tuned[0]:
        return 1
    local = 1
    while local * 2 <= min(tuned[0], ctx.device.info.max_work_group_size):
        local *= 2
    return local


@kernel(*ARG_OPS)
def argreduce(ctx: LoweringContext, node: Node) -> list[Launch]:
    x, y = ctx.act(node.inputs[0]), ctx.act(node.outputs[0])
    axis = node.attrs["axis"]
    outer, inner = math.prod(x.shape[:axis]), math.prod(x.shape[axis + 1:])
    which = "ARG_MAX" if node.op == "ArgMax" else "ARG_MIN"
    # ARG_LONG: int64 written by the kernel (every full-profile device has 64-bit integers).
    defines = {"ARGREDUCE_AXIS": 1, which: 1, "SELECT_LAST": int(node.attrs["select_last_index"]), "ARG_LONG": 1,
               "OUTER": outer, "AXIS": x.shape[axis], "INNER": inner, **storage_defines(X=x.half)}
    return [ctx.launch("reduce.cl", "argreduce_axis", defines, [x.buffer, y.buffer], (outer * inner,), "reduce")]
