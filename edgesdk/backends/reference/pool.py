"""Max / average / global pooling."""
from __future__ import annotations

import numpy as np

from ...graph import Node
from ...runtime.shapes import pool_sweep
from .conv import sliding_windows
from .kernels import kernel


def _geometry(node: Node, x: np.ndarray):
    a = node.attrs
    out_hw, (top, left, bottom, right) = pool_sweep(node, *x.shape[2:])
    full_pads = ((0, 0), (0, 0), (top, bottom), (left, right))
    return a["kernel_shape"], a["strides"], a["dilations"], out_hw, full_pads


@kernel("MaxPool")
def max_pool(node: Node, x: np.ndarray) -> np.ndarray:
    k, s, d, out_hw, full_pads = _geometry(node, x)
    xp = np.pad(x, full_pads, constant_values=-np.inf)
    return sliding_windows(xp, k, s, d, out_hw).max(axis=(2, 3))


@kernel("AveragePool")
def average_pool(node: Node, x: np.ndarray) -> np.ndarray:
    k, s, d, out_hw, full_pads = _geometry(node, x)
    xp = np.pad(x, full_pads)
    # The divisor counts the window positions that lie on data (and on explicit pads when
    # count_include_pad), never the ceil_mode overhang.
    counted = np.zeros((1, 1) + xp.shape[2:], dtype=x.dtype)
    h, w = x.shape[2:]
    pads = node.attrs["pads"]
    if node.attrs["count_include_pad"]:
        counted[..., : pads[0] + h + pads[2], : pads[1] + w + pads[3]] = 1
    else:
        counted[..., pads[0]: pads[0] + h, pads[1]: pads[1] + w] = 1
    sums = sliding_windows(xp, k, s, d, out_hw).sum(axis=(2, 3), dtype=np.float32)
    counts = sliding_windows(counted, k, s, d, out_hw).sum(axis=(2, 3), dtype=np.float32)
    return (sums / np.maximum(counts, 1)).astype(x.dtype)


@kernel("GlobalAveragePool")
def global_average_pool(node: Node, x: np.ndarray) -> np.ndarray:
    return x.mean(axis=tuple(range(2, x.ndim)), keepdims=True, dtype=np.float32).astype(x.dtype)


@kernel("GlobalMaxPool")
def global_max_pool(node: Node, x: np.ndarray) -> np.ndarray:
    return x.max(axis=tuple(range(2, x.ndim)), keepdims=True)
