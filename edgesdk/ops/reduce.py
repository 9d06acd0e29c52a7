"""Reductions over axes (ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1,
ReduceL2, ReduceSumSquare, ReduceLogSum, ReduceLogSumExp) and ArgMax / ArgMin.

Canonical attributes: ``axes`` (sorted, non-negative, unique; empty means "over no axis", which
applies the reduction to every element on its own: ReduceL2 then gives |x|, as ONNX Runtime
does with ``noop_with_empty_axes``) and ``keepdims``; ArgMax / ArgMin carry ``axis``,
``keepdims`` and ``select_last_index`` and return int64 indices.

:func:`reduction_passes` is the plan both native backends follow: the reduced axes, merged where
they are adjacent, become one (outer, axis, inner) kernel pass per run of reduced axes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..graph import Node
from .geometry import normalize_axis
from .registry import BOOL, INT, Signature, ints, op

# ONNX op -> the reduction's short name (the native and OpenCL kernels' names for it)
REDUCE_KINDS = {
    "ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min", "ReduceProd": "prod",
    "ReduceL1": "l1", "ReduceL2": "l2", "ReduceSumSquare": "sum_square", "ReduceLogSum": "log_sum",
    "ReduceLogSumExp": "log_sum_exp",
}
REDUCE_OPS = tuple(REDUCE_KINDS)
ARG_OPS = ("ArgMax", "ArgMin")
# Reducing a single value gives it back: over no axis these are a no-op (imported as a view).
_IDENTITY_ON_ONE_VALUE = frozenset({"sum", "mean", "max", "min", "prod", "log_sum_exp"})
# Sums and products that can leave the half range of their inputs stay float32 in fp16 mode.
_WIDE_RESULTS = ("ReduceSum", "ReduceL1", "ReduceSumSquare")

_REDUCE_SIGNATURE = Signature(1, 0, {"axes": ints(), "keepdims": BOOL})
widening = op(*_WIDE_RESULTS, family="reduce", fp32_only=True, signature=_REDUCE_SIGNATURE)
product = op("ReduceProd", family="reduce", fp32_only=True, signature=_REDUCE_SIGNATURE,
             note="cpu: numpy (no native product kernel)")
in_range = op(*(name for name in REDUCE_OPS if name not in _WIDE_RESULTS + ("ReduceProd",)), family="reduce",
              signature=_REDUCE_SIGNATURE)
reduce = op.shared(*REDUCE_OPS)
argreduce = op(*ARG_OPS, family="reduce",
               signature=Signature(1, 0, {"axis": INT, "keepdims": BOOL, "select_last_index": BOOL}),
               note="int64 output; a NaN counts as the extreme value (numpy's argmax/argmin; opencl: "
                    "ONNX Runtime's scan, where a NaN wins only as the first value)")


def reduce_axes(imp, name: str, inputs: list[str], attrs: dict, what: str) -> list[int] | None:
    """The axes attribute (opset < 18) or constant axes input (opset 18), as given."""
    if "axes" in attrs:
        return [int(a) for a in attrs["axes"]]
    value = imp.constant_input(name, inputs, 1, f"{what} axes")
    return None if value is None else [int(a) for a in value.reshape(-1)]


# -- Reduce* --------------------------------------------------------------------------------------
@reduce.importer
def _import_reduce(imp, name, inputs, outputs, attrs):
    op_type = imp.op_type
    shape = imp.shape(inputs[0])
    axes = reduce_axes(imp, name, inputs, attrs, op_type)
    if not axes and not attrs.get("noop_with_empty_axes", 0):
        axes = list(range(len(shape)))  # no axes: over every axis
    axes = tuple(sorted({normalize_axis(a, len(shape), f"{op_type} axis") for a in axes or ()}))
    keepdims = bool(attrs.get("keepdims", 1))
    if not axes and REDUCE_KINDS[op_type] in _IDENTITY_ON_ONE_VALUE:
        return imp.alias(name, inputs[0], outputs[0])
    if op_type == "ReduceMean" and len(shape) == 4 and axes == (2, 3) and imp.graph.const(inputs[0]) is None:
        # A spatial mean is global average pooling, which every backend has a kernel for.
        if keepdims:
            return Node("GlobalAveragePool", name, inputs[:1], outputs[:1], {})
        pooled = imp.graph.unique_name(f"{name}.pooled")
        imp.add(Node("GlobalAveragePool", f"{name}.pool", inputs[:1], [pooled], {}))
        return imp.reshape_node(name, pooled, outputs[0], shape[:2])
    return Node(op_type, name, inputs[:1], outputs[:1], {"axes": axes, "keepdims": keepdims})


@reduce.shape
def _reduce_shape(node, shapes):
    return [reduced_shape(shapes[0], tuple(node.attrs["axes"]), node.attrs["keepdims"])]


def reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    return tuple(1 if i in axes else d for i, d in enumerate(shape) if keepdims or i not in axes)


@reduce.reference
def _reduce_reference(node, x: np.ndarray) -> np.ndarray:
    kind = REDUCE_KINDS[node.op]
    axes, keep = tuple(node.attrs["axes"]), bool(node.attrs["keepdims"])
    # Floats accumulate in float32 (float16 storage included); integers (constant folding of
    # shape arithmetic, e.g. ReduceProd of a Shape) keep their dtype.
    acc = np.float32 if x.dtype.kind == "f" else x.dtype
    result = _REFERENCE[kind](x.astype(acc, copy=False), axes, keep)
    return np.asarray(result).astype(x.dtype, copy=False)


def _extreme(fn, identity: float):
    def run(x: np.ndarray, axes, keep) -> np.ndarray:
        # An empty reduction gives the identity (-inf for max), as ONNX Runtime does.
        if x.dtype.kind == "f":
            initial = identity
        else:  # integers (folded shape arithmetic): their own extreme
            initial = np.iinfo(x.dtype).min if identity < 0 else np.iinfo(x.dtype).max
        return fn(x, axis=axes, keepdims=keep, initial=initial)
    return run


def _log_sum_exp(x: np.ndarray, axes, keep) -> np.ndarray:
    """Max-subtracted; a row whose max is +-inf gives that max (ONNX Runtime: all -inf gives -inf)."""
    m = np.max(x, axis=axes, keepdims=True, initial=-np.inf)
    safe = np.where(np.isinf(m), 0, m)
    result = np.where(np.isinf(m), m, safe + np.log(np.sum(np.exp(x - safe), axis=axes, keepdims=True)))
    return result if keep else result.reshape(reduced_shape(x.shape, axes, False))


_REFERENCE = {
    "sum": lambda x, axes, keep: np.sum(x, axis=axes, keepdims=keep),
    "mean": lambda x, axes, keep: np.mean(x, axis=axes, keepdims=keep),
    "max": _extreme(np.max, -np.inf),
    "min": _extreme(np.min, np.inf),
    "prod": lambda x, axes, keep: np.prod(x, axis=axes, keepdims=keep),
    "l1": lambda x, axes, keep: np.sum(np.abs(x), axis=axes, keepdims=keep),
    "l2": lambda x, axes, keep: np.sqrt(np.sum(np.square(x), axis=axes, keepdims=keep)),
    "sum_square": lambda x, axes, keep: np.sum(np.square(x), axis=axes, keepdims=keep),
    "log_sum": lambda x, axes, keep: np.log(np.sum(x, axis=axes, keepdims=keep)),
    "log_sum_exp": _log_sum_exp,
}


@reduce.torch
def _reduce_torch(m, node, x):
    import torch
    axes, keep = tuple(node.attrs["axes"]), bool(node.attrs["keepdims"])
    kind = REDUCE_KINDS[node.op]
    if not axes:  # each value on its own
        return {"l1": torch.abs, "l2": torch.abs, "sum_square": torch.square, "log_sum": torch.log}.get(
            kind, lambda t: t)(x)
    if kind in ("max", "min"):
        return torch.amax(x, dim=axes, keepdim=keep) if kind == "max" else torch.amin(x, dim=axes, keepdim=keep)
    if kind == "prod":
        for axis in sorted(axes, reverse=True):  # torch.prod takes one dim at a time
            x = torch.prod(x, dim=axis, keepdim=keep)
        return x
    if kind == "log_sum_exp":
        return torch.logsumexp(x, dim=axes, keepdim=keep)
    if kind == "mean":
        return x.mean(dim=axes, keepdim=keep)
    summed = {"l1": torch.abs, "l2": torch.square, "sum_square": torch.square}.get(kind, lambda t: t)(x)
    total = summed.sum(dim=axes, keepdim=keep)
    return torch.sqrt(total) if kind == "l2" else torch.log(total) if kind == "log_sum" else total


# -- the kernel plan ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReducePass:
    """One kernel call: ``kind`` over the middle axis of the current tensor seen as (outer, axis,
    inner), giving outer * inner values."""
    kind: str
    outer: int
    axis: int
    inner: int

    @property
    def out_size(self) -> int:
        return self.outer * self.inner


def reduction_passes(shape: tuple[int, ...], axes: tuple[int, ...], kind: str) -> list[ReducePass]:
    """The passes that reduce ``shape`` (C order) over ``axes``: size-1 axes drop out, adjacent
    axes of the same kind merge, and each remaining run of reduced axes is one pass, the largest
    first (the smallest intermediates). Reductions that compose with themselves (sum, mean of
    equal-sized groups, max, min, prod, L2, log-sum-exp) repeat; sum-square and L1 sum their
    partial sums and log-sum takes the log only in its last pass. No axis to reduce: one pass
    over runs of one value (the reduction of each value on its own)."""
    groups: list[list] = []  # [size, reduced]
    for i, d in enumerate(shape):
        if d == 1:
            continue
        if groups and groups[-1][1] == (i in axes):
            groups[-1][0] *= d
        else:
            groups.append([d, i in axes])
    sizes = [d for d, _ in groups]
    runs = sorted((i for i, (_, reduced) in enumerate(groups) if reduced), key=lambda i: -sizes[i])
    if not runs:
        return [ReducePass(_pass_kind(kind, 0, 1), math.prod(shape), 1, 1)]
    passes = []
    for n, i in enumerate(runs):
        passes.append(ReducePass(_pass_kind(kind, n, len(runs)), math.prod(sizes[:i]), sizes[i],
                                 math.prod(sizes[i + 1:])))
        sizes[i] = 1
    return passes


def _pass_kind(kind: str, index: int, count: int) -> str:
    if kind in ("sum_square", "l1"):  # partial results are already squared / absolute
        return kind if index == 0 else "sum"
    if kind == "log_sum":
        return "log_sum" if index == count - 1 else "sum"
    return kind


# -- ArgMax / ArgMin ------------------------------------------------------------------------------
@argreduce.importer
def _import_argreduce(imp, name, inputs, outputs, attrs):
    rank = len(imp.shape(inputs[0]))
    axis = normalize_axis(int(attrs.get("axis", 0)), rank, f"{imp.op_type} axis")
    return Node(imp.op_type, name, inputs[:1], outputs[:1], {
        "axis": axis, "keepdims": bool(attrs.get("keepdims", 1)),
        "select_last_index": bool(attrs.get("select_last_index", 0))})


@argreduce.shape
def _argreduce_shape(node, shapes):
    return [reduced_shape(shapes[0], (node.attrs["axis"],), node.attrs["keepdims"])]


@argreduce.dtypes
def _argreduce_dtypes(node, dtypes):
    return [np.dtype(np.int64)]


@argreduce.reference
def _argreduce_reference(node, x: np.ndarray) -> np.ndarray:
    axis, find = node.attrs["axis"], np.argmax if node.op == "ArgMax" else np.argmin
    if node.attrs["select_last_index"]:
        index = x.shape[axis] - 1 - find(np.flip(x, axis), axis=axis)
    else:
        index = find(x, axis=axis)
    index = index.astype(np.int64)
    return np.expand_dims(index, axis) if node.attrs["keepdims"] else index


@argreduce.torch
def _argreduce_torch(m, node, x):
    import torch
    axis, keep = node.attrs["axis"], bool(node.attrs["keepdims"])
    find = torch.argmax if node.op == "ArgMax" else torch.argmin
    if node.attrs["select_last_index"]:
        return x.shape[axis] - 1 - find(torch.flip(x, (axis,)), dim=axis, keepdim=keep)
    return find(x, dim=axis, keepdim=keep)
