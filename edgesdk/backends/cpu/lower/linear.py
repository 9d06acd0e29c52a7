"""The cpu lowering of the linear family (``edgesdk/ops/linear.py``): Gemm and MatMul."""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import numpy as np

from ....compress.encodings import NNM, Clustered
from ....graph import Node
from ....runtime.precision import round_constant
from .. import weights as W
from ..program import NCHW, Builder, Runner, Slot, Views
from .base import NO_ACT, fused_act, in_order, native_kernels, fallback, lowering
from .lq import bitwise_layer, gemm_bitwise


@lowering("Gemm")
def gemm(node: Node, b: Builder) -> None:
    g, k = b.graph, native_kernels()
    w_name, c_name = node.inputs[1], node.input(2)
    attrs = node.attrs
    wt = g.tensors[w_name]
    if not wt.is_constant:
        return fallback(node, b, "Gemm with a non-constant B")
    m, n = b.shape(node.outputs[0])
    alpha, beta = float(attrs["alpha"]), float(attrs["beta"])
    c_value = g.const(c_name) if c_name else None
    if c_name and (c_value is None or c_value.size not in (1, n) or (c_value.ndim == 2 and c_value.shape[0] != 1)):
        return fallback(node, b, "Gemm with a C that is not a constant row vector")
    bias = W.bias_vector(g, c_name, n, b.precision, scale=beta) if beta != 0.0 else None
    if bitwise_layer(node, b):
        return gemm_bitwise(node, b, wt.encoding, bias)
    enc = W.uncoded(wt.encoding)
    if attrs["transB"] and isinstance(enc, Clustered):
        weights = W.pack_clustered(k, enc, bias, b.precision, scale=alpha)
        return _emit_linear(node, b, k.steps.clustered_gemm, weights, f"clustered {enc.describe()}{W.coding_note(wt)}")
    if attrs["transB"] and isinstance(enc, NNM) and enc.mode == "shared":
        return _gemm_nnm(node, b, enc, bias, alpha)
    matrix, how = W.stored_matrix(wt)
    if alpha != 1.0:
        matrix = matrix.astype(np.float32) * np.float32(alpha)
    packed = W.pack_dense(k, matrix, bias, b.precision, "nk" if attrs["transB"] else "kn")
    _emit_linear(node, b, k.steps.gemm, packed, ("GEMV" if m == 1 else "GEMM") + f", {how}")


def _linear_input(node: Node, b: Builder) -> tuple[Slot, Slot | None]:
    """Gemm's A as (M, K): transA goes through a scratch transpose."""
    a = b.read(node.inputs[0], NCHW)
    if not node.attrs.get("transA"):
        return a, None
    return a, b.scratch(tuple(reversed(b.shape(node.inputs[0]))))


def _emit_linear(node: Node, b: Builder, fn, weights, note: str) -> None:
    a, transposed = _linear_input(node, b)
    y = b.write(node.outputs[0], NCHW)
    act, threads = fused_act(node), b.threads_for(node)

    def bind(v: Views) -> Runner:
        call = fn(v[transposed] if transposed else v[a], weights, v[y], *act, threads)
        if transposed is None:
            return call
        return in_order([partial(np.copyto, v[transposed], v[a].T), call])
    b.emit(node, "native", bind, note)


def _gemm_nnm(node: Node, b: Builder, enc: NNM, bias: np.ndarray | None, alpha: float) -> None:
    k = native_kernels()
    centroids = enc.centroids if alpha == 1.0 else enc.centroids.astype(np.float32) * np.float32(alpha)
    packed = W.pack_dense(k, centroids.reshape(centroids.shape[0], -1), None, b.precision)
    assign = W.nnm_assignment(enc)
    a, transposed = _linear_input(node, b)
    m, _ = b.shape(node.outputs[0])
    y = b.write(node.outputs[0], NCHW)
    cent = b.scratch((m, centroids.shape[0]))
    act, threads = fused_act(node), b.threads_for(node)

    def bind(v: Views) -> Runner:
        steps = []
        if transposed is not None:
            steps.append(partial(np.copyto, v[transposed], v[a].T))
        steps.append(k.steps.gemm(v[transposed] if transposed else v[a], packed, v[cent], *NO_ACT, threads))
        steps.append(k.steps.nnm_gather(v[cent], assign, bias, v[y], *act, threads))
        return in_order(steps)
    b.emit(node, "native", bind, f"{enc.describe()}: centroid GEMM + gather")


@lowering("MatMul")
def matmul(node: Node, b: Builder) -> None:
    a_name, w_name = node.inputs
    w_value = b.graph.const(w_name)
    if w_value is not None and w_value.ndim == 2 and b.is_activation(a_name):
        return _matmul_constant_weight(node, b, w_value.shape)
    _matmul_batched(node, b)


def _matmul_constant_weight(node: Node, b: Builder, w_shape: tuple[int, int]) -> None:
    """x @ W with a constant 2-D W: one packed GEMM over the flattened leading axes of x."""
    k = native_kernels()
    a_name, w_name = node.inputs
    kk, n = w_shape
    packed = W.pack_dense(k, W.stored_matrix(b.graph.tensors[w_name])[0], None, b.precision, "kn")
    a = b.read(a_name, NCHW)
    y = b.write(node.outputs[0], NCHW)
    act, threads = fused_act(node), b.threads_for(node)
    b.emit(node, "native", lambda v: k.steps.gemm(v[a].reshape(-1, kk), packed, v[y].reshape(-1, n), *act, threads),
           "GEMM over the flattened leading axes")


def _matmul_batched(node: Node, b: Builder) -> None:
    """Batched A @ B, both operands at run time or one constant, batch dimensions broadcast as
    numpy does, 1-D operands as (1, K) / (K, 1): the native batched_matmul, each output matrix
    reading the A and B matrices an index table names."""
    k = native_kernels()
    plan = BatchedMatmul.of(*(b.shape(name) for name in node.inputs))
    operands = [b.read(name, NCHW) if b.is_activation(name)
                else np.ascontiguousarray(round_constant(np.asarray(b.graph.const(name), np.float32), b.precision))
                for name in node.inputs]
    y = b.write(node.outputs[0], NCHW)
    act, threads = fused_act(node), b.threads_for(node)
    (a_batches, m, kk), (b_batches, _, n) = plan.a_shape, plan.b_shape

    def bind(v: Views) -> Runner:
        lhs, rhs = (v[o] if isinstance(o, Slot) else o for o in operands)
        return partial(k.batched_matmul, lhs.reshape(a_batches, m, kk), rhs.reshape(b_batches, kk, n),
                       v[y].reshape(plan.batches, m, n), plan.a_index, plan.b_index, threads, *act)
    b.emit(node, "native", bind, f"{plan.batches} batched {m}x{kk} @ {kk}x{n}")


@dataclass(frozen=True)
class BatchedMatmul:
    """A MatMul as ``batches`` matrix products: A viewed (a_batches, M, K), B (b_batches, K, N),
    and for each output matrix the index of its A and B matrix (numpy's batch broadcasting)."""
    a_shape: tuple[int, int, int]
    b_shape: tuple[int, int, int]
    batches: int
    a_index: np.ndarray
    b_index: np.ndarray

    @classmethod
    def of(cls, a: tuple[int, ...], b: tuple[int, ...]) -> "BatchedMatmul":
        a2 = (1,) + tuple(a) if len(a) == 1 else tuple(a)
        b2 = tuple(b) + (1,) if len(b) == 1 else tuple(b)
        batch = np.broadcast_shapes(a2[:-2], b2[:-2])
        positions = np.indices(batch).reshape(len(batch), -1) if batch else np.zeros((0, 1), np.int64)
        return cls((math.prod(a2[:-2]),) + a2[-2:], (math.prod(b2[:-2]),) + b2[-2:], math.prod(batch),
                   _batch_index(a2[:-2], batch, positions), _batch_index(b2[:-2], batch, positions))


def _batch_index(dims: tuple[int, ...], batch: tuple[int, ...], positions: np.ndarray) -> np.ndarray:
    """The flat index into an operand's batch dims ``dims`` of each output batch position (size-1
    dims broadcast: index 0)."""
    dims = (1,) * (len(batch) - len(dims)) + tuple(dims)
    index = np.zeros(positions.shape[1], np.int64)
    for axis, size in enumerate(dims):
        index = index * size + (positions[axis] if size > 1 else 0)
    return np.ascontiguousarray(index, np.int64)
