"""BatchNormalization (when not folded), LRN, Softmax and ReduceMean."""
from __future__ import annotations

import math

import numpy as np

from ...graph import Node
from .kernels import kernel


def _per_channel(v: np.ndarray, rank: int) -> np.ndarray:
    return v.reshape((1, -1) + (1,) * (rank - 2))


@kernel("BatchNormalization")
def batch_norm(node: Node, x: np.ndarray, scale: np.ndarray, bias: np.ndarray, mean: np.ndarray,
               var: np.ndarray) -> np.ndarray:
    inv_std = scale / np.sqrt(var + var.dtype.type(node.attrs["epsilon"]))
    r = x.ndim
    return (x - _per_channel(mean, r)) * _per_channel(inv_std, r) + _per_channel(bias, r)


@kernel("LRN")
def lrn(node: Node, x: np.ndarray) -> np.ndarray:
    a = node.attrs
    size = a["size"]
    # Channels past either end add nothing, so the window is clipped to them: padding and loop
    # stay under 2C-1 channels whatever the size (alpha is still divided by the full size).
    reach = max(x.shape[1] - 1, 0)
    before, after = min((size - 1) // 2, reach), min(size // 2, reach)
    squares = np.square(x)
    padded = np.pad(squares, [(0, 0), (before, after)] + [(0, 0)] * (x.ndim - 2))
    window = sum(padded[:, i: i + x.shape[1]] for i in range(before + after + 1))
    t = x.dtype.type
    return x / (t(a["bias"]) + t(a["alpha"] / size) * window) ** t(a["beta"])


@kernel("Softmax")
def softmax(node: Node, x: np.ndarray) -> np.ndarray:
    axis = node.attrs["axis"]
    if node.attrs["coerce_2d"]:  # opset < 13: softmax over all axes from `axis` on
        flat = x.reshape(math.prod(x.shape[:axis]), -1)
        return _softmax(flat, 1).reshape(x.shape)
    return _softmax(x, axis)


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    # Two passes: max for stability, then exp and normalise.
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@kernel("ReduceMean")
def reduce_mean(node: Node, x: np.ndarray) -> np.ndarray:
    return x.mean(axis=node.attrs["axes"], keepdims=node.attrs["keepdims"], dtype=np.float32).astype(x.dtype)
