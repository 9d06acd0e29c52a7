"""Storage of int8 weights: CSR over the int8 values where the weights' zeros make it smaller.

A pruned model quantized to int8 (``edgesdk pack --prune 0.8 --int8``) keeps its zeros: a weight
pruned to 0.0 quantizes to exactly 0 (weights are symmetric, zero point 0). :func:`encode_int8_weights`
stores each integer op's weight tensor (QLinearConv, QGemm, QLinearMatMul: input 3, int8) as
:class:`~edgesdk.compress.encodings.SparseCSR` with raw int8 values when that is smaller than the
dense bytes, and dense otherwise. The encoding decodes to exactly the int8 tensor (checked here,
once), so the quantized model computes the same numbers; the CPU backend decodes it once, at
session creation (there is no sparse int8 kernel: the gain is the package's size).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..compress.apply import LayerReport
from ..compress.encode import encode_sparse
from ..graph import Graph, Tensor

INTEGER_WEIGHT_OPS = ("QLinearConv", "QGemm", "QLinearMatMul")  # the weight is input 3
ENCODING_NAME = "int8 csr"  # the report's encoding column for a layer stored so


def encode_int8_weights(graph: Graph, reports: list[LayerReport] | None = None) -> list[LayerReport]:
    """Store, in place, every dense int8 weight of an integer op as int8 CSR where smaller than
    dense (a weight shared by several ops once). Returns ``reports`` with those layers'
    ``encoding`` ("int8 csr") and ``bytes_after`` (the CSR arrays plus the weight scales) updated;
    the other reports are returned as they were."""
    stored: dict[str, int] = {}  # weight name -> its CSR bytes
    for node in graph.nodes:
        if node.op not in INTEGER_WEIGHT_OPS or len(node.inputs) < 4 or node.inputs[3] in stored:
            continue
        name = node.inputs[3]
        tensor = graph.tensors.get(name)
        if tensor is None or tensor.encoding is not None or not tensor.is_constant or tensor.dtype != np.int8 \
                or not tensor.shape:
            continue
        weight = tensor.data
        keep = weight != 0
        if keep.all():
            continue
        encoding = encode_sparse(weight, keep)
        if encoding.nbytes >= weight.nbytes:
            continue
        if not np.array_equal(encoding.decode(), weight):  # the encoder's contract; never expected to fail
            raise AssertionError(f"int8 CSR of {name!r} does not decode to its weights")
        graph.tensors[name] = Tensor(name, tensor.shape, np.int8, encoding=encoding)
        stored[name] = encoding.nbytes
    return [_restated(r, graph, stored[r.weight]) if r.weight in stored else r for r in (reports or [])]


def _restated(report: LayerReport, graph: Graph, weight_bytes: int) -> LayerReport:
    """``report`` with its weight stored as int8 CSR: the encoding and the stored bytes (CSR
    arrays plus the per-channel scales that the int8 report counted next to the weight)."""
    node = next((n for n in graph.nodes if n.name == report.name), None)
    scale = graph.tensors.get(node.inputs[4]) if node is not None and len(node.inputs) > 4 else None
    scale_bytes = scale.stored_nbytes if scale is not None else 0
    return dataclasses.replace(report, encoding=ENCODING_NAME, bytes_after=weight_bytes + scale_bytes)
