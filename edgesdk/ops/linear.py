"""Gemm and MatMul (any rank, numpy broadcasting of the batch dimensions)."""
from __future__ import annotations

import math

import numpy as np

from ..errors import UnsupportedModelError
from ..graph import Node
from . import blas
from .geometry import broadcast_shapes
from .registry import BOOL, FLOAT, Signature, op

gemm = op("Gemm", family="linear", fusable=True,
          signature=Signature(2, 1, {"alpha": FLOAT, "beta": FLOAT, "transA": BOOL, "transB": BOOL}),
          note="reference kernel for: a run-time B; cpu: a C other than a row vector; opencl: transA")
matmul = op("MatMul", family="linear", fusable=True, signature=Signature(2),
            note="batch dims broadcast; opencl: at most 3 batch dims once neighbours merge")


# -- Gemm -----------------------------------------------------------------------------------------
@gemm.importer
def _import_gemm(imp, name, inputs, outputs, attrs):
    if len(imp.shape(inputs[0])) != 2 or len(imp.shape(inputs[1])) != 2:
        raise UnsupportedModelError(f"node {name!r}: Gemm inputs must be 2-D")
    return Node("Gemm", name, inputs[:3], outputs[:1], {
        "alpha": float(attrs.get("alpha", 1.0)), "beta": float(attrs.get("beta", 1.0)),
        "transA": bool(attrs.get("transA", 0)), "transB": bool(attrs.get("transB", 0))})


@gemm.shape
def _gemm_shape(node, shapes):
    a_shape, b_shape = shapes[0], shapes[1]
    m, k = a_shape[::-1] if node.attrs["transA"] else a_shape
    k2, n = b_shape[::-1] if node.attrs["transB"] else b_shape
    if k != k2:
        raise UnsupportedModelError(f"node {node.name!r}: Gemm inner sizes differ ({k} vs {k2})")
    if len(shapes) > 2 and shapes[2]:
        broadcast_shapes((m, n), shapes[2])
    return [(m, n)]


@gemm.macs
def _gemm_macs(node, graph):
    a = graph.tensors[node.inputs[0]].shape
    return math.prod(graph.tensors[node.outputs[0]].shape) * (a[0] if node.attrs["transA"] else a[1])


@gemm.reference
def _gemm_reference(node, a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None) -> np.ndarray:
    attrs = node.attrs
    a = a.T if attrs["transA"] else a
    b = b.T if attrs["transB"] else b
    y = blas.matmul(a, b)
    if attrs["alpha"] != 1.0:
        y *= y.dtype.type(attrs["alpha"])
    if c is not None and attrs["beta"] != 0.0:
        y += c * c.dtype.type(attrs["beta"]) if attrs["beta"] != 1.0 else c
    return y


@gemm.torch
def _gemm_torch(m, node, a, b, c=None):
    attrs = node.attrs
    a = a.t() if attrs["transA"] else a
    b = b.t() if attrs["transB"] else b
    y = a @ b
    if attrs["alpha"] != 1.0:
        y = y * attrs["alpha"]
    if c is not None and attrs["beta"] != 0.0:
        y = y + (c * attrs["beta"] if attrs["beta"] != 1.0 else c)
    return y


# -- MatMul ---------------------------------------------------------------------------------------
@matmul.importer
def _import_matmul(imp, name, inputs, outputs, attrs):
    return Node("MatMul", name, inputs[:2], outputs[:1], {})


@matmul.shape
def _matmul_shape(node, shapes):
    a, b = shapes
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise UnsupportedModelError(f"node {node.name!r}: MatMul inner sizes differ ({a} x {b})")
    out = broadcast_shapes(a2[:-2], b2[:-2]) + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return [out]


@matmul.macs
def _matmul_macs(node, graph):
    return math.prod(graph.tensors[node.outputs[0]].shape) * graph.tensors[node.inputs[0]].shape[-1]


@matmul.reference
def _matmul_reference(node, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return blas.matmul(a, b)


@matmul.torch
def _matmul_torch(m, node, a, b):
    import torch
    return torch.matmul(a, b)
