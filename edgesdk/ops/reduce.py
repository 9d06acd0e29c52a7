"""Reductions over axes."""
from __future__ import annotations

import numpy as np

from ..graph import Node
from .geometry import normalize_axis
from .registry import BOOL, Signature, ints, op

reduce_mean = op("ReduceMean", family="reduce", signature=Signature(1, 0, {"axes": ints(), "keepdims": BOOL}))


def reduce_axes(imp, name: str, inputs: list[str], attrs: dict, what: str) -> list[int] | None:
    """The axes attribute (opset < 18) or constant axes input (opset 18), as given."""
    if "axes" in attrs:
        return [int(a) for a in attrs["axes"]]
    value = imp.constant_input(name, inputs, 1, f"{what} axes")
    return None if value is None else [int(a) for a in value.reshape(-1)]


@reduce_mean.importer
def _import_reduce_mean(imp, name, inputs, outputs, attrs):
    shape = imp.shape(inputs[0])
    axes = reduce_axes(imp, name, inputs, attrs, "ReduceMean")
    if axes is None or (not axes and not attrs.get("noop_with_empty_axes", 0)):
        axes = list(range(len(shape)))
    axes = tuple(sorted({normalize_axis(a, len(shape), "ReduceMean axis") for a in axes}))
    keepdims = bool(attrs.get("keepdims", 1))
    if not axes:
        return imp.alias(name, inputs[0], outputs[0])
    if len(shape) == 4 and axes == (2, 3) and imp.graph.const(inputs[0]) is None:
        # A spatial mean is global average pooling, which every backend has a kernel for.
        if keepdims:
            return Node("GlobalAveragePool", name, inputs[:1], outputs[:1], {})
        pooled = imp.graph.unique_name(f"{name}.pooled")
        imp.add(Node("GlobalAveragePool", f"{name}.pool", inputs[:1], [pooled], {}))
        return imp.reshape_node(name, pooled, outputs[0], shape[:2])
    return Node("ReduceMean", name, inputs[:1], outputs[:1], {"axes": axes, "keepdims": keepdims})


@reduce_mean.shape
def _reduce_shape(node, shapes):
    axes, keep = node.attrs["axes"], node.attrs["keepdims"]
    return [tuple(1 if i in axes else d for i, d in enumerate(shapes[0]) if keep or i not in axes)]


@reduce_mean.reference
def _reduce_mean_reference(node, x: np.ndarray) -> np.ndarray:
    return x.mean(axis=node.attrs["axes"], keepdims=node.attrs["keepdims"], dtype=np.float32).astype(x.dtype)


@reduce_mean.torch
def _reduce_mean_torch(m, node, x):
    return x.mean(dim=tuple(node.attrs["axes"]), keepdim=bool(node.attrs["keepdims"]))
