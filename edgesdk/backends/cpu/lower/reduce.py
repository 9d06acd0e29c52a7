"""The cpu lowering of the reduce family (``edgesdk/ops/reduce.py``): Reduce* on any axes with the
native ``reduce`` kernel (one (outer, axis, inner) pass per run of reduced axes, see
``reduction_passes``), ReduceProd in numpy (no native kernel), ArgMax / ArgMin with the native
``argreduce`` (int64 output).

A 4-D input stored NHWC is reduced in its storage order when the result's bytes come out in an
order the output can be stored in (keepdims: NHWC; otherwise when the kept axes keep their
logical order, e.g. a mean over the channels), so no layout conversion is made for it.
"""
from __future__ import annotations

import math
from functools import partial

import numpy as np

from ....graph import Node
from ....ops.reduce import ARG_OPS, REDUCE_KINDS, REDUCE_OPS, ReducePass, reduction_passes
from ..program import NCHW, NHWC, PARALLEL_MIN_WORK, Builder, Runner, Slot, Views
from .base import in_order, lowering, native_kernels

# The logical (NCHW) axis each NHWC storage axis holds.
_NHWC_AXES = (0, 2, 3, 1)
# Reductions the native kernel runs as they are; log_sum and l1 are a native sum with a step
# around it, prod has no native kernel.
_NATIVE_KINDS = frozenset({"sum", "mean", "max", "min", "l2", "sum_square", "log_sum_exp"})


def _threads(b: Builder, node: Node) -> int:
    """The session's threads when the input is large enough to split (one pass over it)."""
    return b.threads if math.prod(b.shape(node.inputs[0])) >= PARALLEL_MIN_WORK else 1


def _operands(node: Node, b: Builder, axes: tuple[int, ...]) -> tuple[Slot, Slot, tuple[int, ...], tuple[int, ...]]:
    """(input slot, output slot, shape and reduced axes in the input's storage order), chosen so
    that reducing the stored bytes writes the output slot's bytes."""
    name, out = node.inputs[0], node.outputs[0]
    if b.stored_layout(name) == NHWC:
        kept = [axis for axis in _NHWC_AXES if axis not in axes]
        if node.attrs["keepdims"] or kept == sorted(kept):
            x = b.read(name, NHWC)
            y = b.write(out, NHWC if node.attrs["keepdims"] else NCHW)
            stored_axes = tuple(i for i, axis in enumerate(_NHWC_AXES) if axis in axes)
            return x, y, x.storage_shape, stored_axes
    x = b.read(name, NCHW)
    return x, b.write(out, NCHW), b.shape(name), axes


@lowering(*REDUCE_OPS)
def reduce(node: Node, b: Builder) -> None:
    kind = REDUCE_KINDS[node.op]
    if kind == "prod":
        return _reduce_prod(node, b)
    x, y, shape, axes = _operands(node, b, tuple(node.attrs["axes"]))
    passes = reduction_passes(shape, axes, kind)
    between = [b.scratch((p.out_size,)) for p in passes[:-1]]  # each pass's result, but the last
    absolute = b.scratch((math.prod(shape),)) if passes[0].kind == "l1" else None
    threads = _threads(b, node)

    def bind(v: Views) -> Runner:
        sources = [v[x].reshape(-1)] + [v[s] for s in between]
        targets = [v[s] for s in between] + [v[y].reshape(-1)]
        steps = [_pass(p, src, dst, v[absolute] if absolute else None, threads)
                 for p, src, dst in zip(passes, sources, targets)]
        return in_order(steps)
    kinds = " then ".join(p.kind for p in passes)
    b.emit(node, "native", bind, f"{kinds} over {'x'.join(str(p.axis) for p in passes)} values")


def _pass(p: ReducePass, src: np.ndarray, dst: np.ndarray, scratch: np.ndarray | None, threads: int) -> Runner:
    k = native_kernels()
    if p.kind in _NATIVE_KINDS:
        return partial(k.reduce, src, dst, p.outer, p.axis, p.inner, p.kind, threads)
    summed = partial(k.reduce, scratch if p.kind == "l1" else src, dst, p.outer, p.axis, p.inner, "sum", threads)
    if p.kind == "l1":
        return in_order([partial(np.abs, src, out=scratch), summed])
    if p.kind == "log_sum":
        return in_order([summed, k.steps.activation(dst, "log", None, None, threads)])
    raise AssertionError(f"no cpu kernel for a {p.kind} pass")


def _reduce_prod(node: Node, b: Builder) -> None:
    x = b.read_stored(node.inputs[0])
    y = b.write(node.outputs[0], NCHW)
    axes, keep = tuple(node.attrs["axes"]), bool(node.attrs["keepdims"])

    def bind(v: Views) -> Runner:
        return partial(np.prod, v.logical(x), axis=axes, keepdims=keep, out=v[y].reshape(b.shape(node.outputs[0])))
    b.emit(node, "numpy", bind, f"product over axes {axes} (no native product kernel)")


@lowering(*ARG_OPS)
def argreduce(node: Node, b: Builder) -> None:
    k = native_kernels()
    x, y, shape, (axis,) = _operands(node, b, (node.attrs["axis"],))
    outer, inner = math.prod(shape[:axis]), math.prod(shape[axis + 1:])
    find, last = "max" if node.op == "ArgMax" else "min", bool(node.attrs["select_last_index"])
    threads = _threads(b, node)
    b.emit(node, "native", lambda v: partial(k.argreduce, v[x], v[y], outer, shape[axis], inner, find, last, threads),
           f"arg{find} over {shape[axis]} values, int64 out")


