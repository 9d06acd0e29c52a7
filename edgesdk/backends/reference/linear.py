"""Gemm and MatMul."""
from __future__ import annotations

import numpy as np

from ...graph import Node
from .kernels import kernel


@kernel("Gemm")
def gemm(node: Node, a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None) -> np.ndarray:
    attrs = node.attrs
    a = a.T if attrs["transA"] else a
    b = b.T if attrs["transB"] else b
    y = a @ b
    if attrs["alpha"] != 1.0:
        y *= y.dtype.type(attrs["alpha"])
    if c is not None and attrs["beta"] != 0.0:
        y += c * c.dtype.type(attrs["beta"]) if attrs["beta"] != 1.0 else c
    return y


@kernel("MatMul")
def matmul(node: Node, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.matmul(a, b)
