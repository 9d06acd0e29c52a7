"""Ops that only ever run on constants, at import time (shape arithmetic that exporters emit).

A model may use them only where their inputs are constant once shapes are known, e.g. torch's
``x.view(x.size(0), -1)`` becomes Shape -> Gather -> Unsqueeze -> Concat -> Reshape, which the
importer folds into a Reshape with a fixed shape. Attributes here are the raw ONNX ones.
"""
from __future__ import annotations

import numpy as np

from ...graph import Node
from .kernels import kernel

CONSTANT_ONLY_OPS = frozenset({
    "Shape", "Size", "Gather", "Cast", "Slice", "ConstantOfShape", "Range", "Expand", "Equal",
    "Less", "Greater", "Where", "Not", "Neg", "Floor", "Ceil", "Sqrt", "Pow", "Min", "Max",
    "ReduceProd", "Tile",
})


@kernel("Shape")
def shape(node: Node, x: np.ndarray) -> np.ndarray:
    dims = np.array(x.shape, dtype=np.int64)
    start, end = node.attrs.get("start", 0), node.attrs.get("end", len(dims))
    return dims[start:end]


@kernel("Size")
def size(node: Node, x: np.ndarray) -> np.ndarray:
    return np.array(x.size, dtype=np.int64)


@kernel("Gather")
def gather(node: Node, data: np.ndarray, indices: np.ndarray) -> np.ndarray:
    axis = node.attrs.get("axis", 0) % data.ndim
    indices = np.where(indices < 0, indices + data.shape[axis], indices)
    return np.take(data, indices, axis=axis)


@kernel("Cast")
def cast(node: Node, x: np.ndarray) -> np.ndarray:
    import onnx.helper  # only the ONNX importer folds these ops; running a package never imports onnx

    return x.astype(onnx.helper.tensor_dtype_to_np_dtype(node.attrs["to"]))


@kernel("Slice")
def slice_(node: Node, data: np.ndarray, starts: np.ndarray | None = None, ends: np.ndarray | None = None,
           axes: np.ndarray | None = None, steps: np.ndarray | None = None) -> np.ndarray:
    if starts is None:  # opset < 10: attributes
        starts, ends = node.attrs["starts"], node.attrs["ends"]
        axes = node.attrs.get("axes")
    starts, ends = list(np.asarray(starts)), list(np.asarray(ends))
    axes = list(range(len(starts))) if axes is None else [int(a) % data.ndim for a in np.asarray(axes)]
    steps = [1] * len(starts) if steps is None else list(np.asarray(steps))
    index = [slice(None)] * data.ndim
    for axis, start, end, step in zip(axes, starts, ends, steps):
        index[axis] = slice(int(start), int(end), int(step))
    return data[tuple(index)]


@kernel("ConstantOfShape")
def constant_of_shape(node: Node, shape_: np.ndarray) -> np.ndarray:
    import onnx.numpy_helper  # only the ONNX importer folds these ops; running a package never imports onnx

    value = node.attrs.get("value")
    fill = onnx.numpy_helper.to_array(value).reshape(-1)[0] if value is not None else np.float32(0)
    return np.full(tuple(int(d) for d in shape_), fill, dtype=np.asarray(fill).dtype)


@kernel("Range")
def range_(node: Node, start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> np.ndarray:
    return np.arange(start, limit, delta, dtype=start.dtype)


@kernel("Expand")
def expand(node: Node, x: np.ndarray, shape_: np.ndarray) -> np.ndarray:
    target = np.broadcast_shapes(x.shape, tuple(int(d) for d in shape_))
    return np.broadcast_to(x, target).copy()


@kernel("Tile")
def tile(node: Node, x: np.ndarray, repeats: np.ndarray) -> np.ndarray:
    return np.tile(x, tuple(int(r) for r in repeats))


@kernel("ReduceProd")
def reduce_prod(node: Node, x: np.ndarray, axes: np.ndarray | None = None) -> np.ndarray:
    axes = node.attrs.get("axes") if axes is None else axes
    axis = None if axes is None else tuple(int(a) for a in np.asarray(axes).reshape(-1))
    return np.prod(x, axis=axis, keepdims=bool(node.attrs.get("keepdims", 1)))


def _unary(fn):
    return lambda node, x: fn(x)


def _binary(fn):
    return lambda node, a, b: fn(a, b)


for _op, _fn in {"Not": np.logical_not, "Neg": np.negative, "Floor": np.floor, "Ceil": np.ceil,
                 "Sqrt": np.sqrt}.items():
    kernel(_op)(_unary(_fn))
for _op, _fn in {"Equal": np.equal, "Less": np.less, "Greater": np.greater}.items():
    kernel(_op)(_binary(_fn))
kernel("Pow")(lambda node, a, b: np.power(a, b).astype(a.dtype))
kernel("Where")(lambda node, cond, a, b: np.where(cond, a, b))
kernel("Min")(lambda node, *xs: np.minimum.reduce(np.broadcast_arrays(*xs)))
kernel("Max")(lambda node, *xs: np.maximum.reduce(np.broadcast_arrays(*xs)))
