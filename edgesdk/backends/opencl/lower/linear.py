"""The opencl lowering of the linear family (``edgesdk/ops/linear.py``): Gemm (``gemm_nt``, the GEMV
path for batch 1; compressed weights run as a 1x1 convolution) and MatMul (``gemm_nt`` for a
constant 2-D B, else the batched kernels), all in ``linear.cl``."""
from __future__ import annotations

import math

import numpy as np

from ....graph import Node
from ..kernels import (DeviceBuffer, Launch, LoweringContext, NotLowerable, activation_defines, ceil_div,
                       kernel, storage_defines)
from .conv import ConvGeometry, Epilogue, conv_launches, bias_buffer


@kernel("Gemm")
def gemm(ctx: LoweringContext, node: Node) -> list[Launch]:
    a = node.attrs
    x, y = ctx.act(node.inputs[0]), ctx.act(node.outputs[0])
    if a["transA"]:
        raise NotLowerable("Gemm with transA")
    if not ctx.is_const(node.inputs[1]):
        raise NotLowerable("Gemm with a run-time B operand")
    m, k = x.shape
    nout = y.shape[1]
    c_name = node.input(2) if a["beta"] != 0.0 else None
    bias, bias_half = bias_buffer(ctx, c_name)
    c_shape = ctx.graph.tensors[c_name].shape if c_name else ()
    epilogue = Epilogue(bias, bias_half, node.attrs.get("fused_activation"), a["alpha"], a["beta"])
    if ctx.encoding(node.inputs[1]) is not None and ctx.encoding(node.inputs[1]).kind != "fp16":
        # Compressed weights are stored (out, in): a 1x1 convolution over M images of 1x1 pixels.
        if not a["transB"]:
            raise NotLowerable("compressed Gemm weights stored (in, out)")
        if c_name and math.prod(c_shape) not in (1, nout) or (len(c_shape) == 2 and c_shape[0] != 1):
            raise NotLowerable(f"Gemm bias of shape {c_shape} with compressed weights")
        if c_name and math.prod(c_shape) == 1 and nout != 1:
            raise NotLowerable("scalar Gemm bias with compressed weights")
        geom = ConvGeometry(m, k, 1, 1, nout, 1, 1)
        return conv_launches(ctx, node, geom, x.buffer, x.half, y.buffer, y.half, epilogue)
    w, w_half = ctx.dense(node.inputs[1], transpose=not a["transB"])
    return [gemm_nt(ctx, m, k, nout, x.buffer, x.half, w, w_half, y.buffer, y.half, epilogue, c_shape)]


def gemm_nt(ctx: LoweringContext, m: int, k: int, nout: int, x: DeviceBuffer, x_half: bool, w: DeviceBuffer,
            w_half: bool, y: DeviceBuffer, y_half: bool, epilogue: Epilogue, c_shape: tuple[int, ...] = ()
            ) -> Launch:
    c2 = (1,) * (2 - len(c_shape)) + tuple(c_shape)
    bsm = (c2[1] if c2[0] > 1 else 0) if epilogue.bias is not None else 0
    bso = (1 if c2[1] > 1 else 0) if epilogue.bias is not None else 0
    t = ctx.config.tuning("gemm_nt")
    rows = min(t.rows, nout)
    brows = 1 if m == 1 else min(t.vectors, m)
    defines = {"GEMM_NT": 1, "M": m, "K": k, "NOUT": nout, "ROWS": rows, "BROWS": brows, "BSM": bsm, "BSO": bso,
               **storage_defines(X=x_half, W=w_half, Y=y_half), **epilogue.defines()}
    size = (ceil_div(nout, rows), ceil_div(m, brows))
    return ctx.launch("linear.cl", "gemm_nt", defines, [x, w, epilogue.bias or ctx.dummy, y], size, "gemm_nt")


# Below this many rows, x @ W with a constant 2-D W runs as Gemm's kernel (PoCL, K = N = 768, best
# of 5 against matmul_blocked: even at 1 row, 1.8x faster at 8, 1.5x slower at 16, 2.3x at 32).
GEMV_ROWS = 16


@kernel("MatMul")
def matmul(ctx: LoweringContext, node: Node) -> list[Launch]:
    a_name, b_name = node.inputs
    b_shape = ctx.graph.tensors[b_name].shape
    if ctx.is_const(b_name) and len(b_shape) == 2 and not ctx.is_const(a_name):
        x, y = ctx.act(a_name), ctx.act(node.outputs[0])
        k, nout = b_shape
        if x.size // k < GEMV_ROWS:  # the rows of x's flattened leading axes
            w, w_half = ctx.dense(b_name, transpose=True)
            return [gemm_nt(ctx, x.size // k, k, nout, x.buffer, x.half, w, w_half, y.buffer, y.half,
                            Epilogue(None, False, node.attrs.get("fused_activation")))]
    return [_batched_matmul(ctx, node)]


# Register blocking of linear.cl's batched MatMul. Device families that configure no ``matmul``
# work-group size (CPUs: a work-group runs on one core, local memory buys nothing) get
# matmul_blocked, a work-item computing RM rows x NV vectors of VEC columns (conv_oc's 6 x 2
# vectors tile); the others (GPUs) matmul_tiled, a work-group of (TN / RN) x (TM / RM) = 64
# work-items computing a TM x TN tile, K staged TK at a time in local memory.
_BLOCKED = {"RM": 6, "NV": 2}
_TILED = {"TM": 32, "TN": 32, "TK": 8, "RM": 4, "RN": 4}


def _batched_matmul(ctx: LoweringContext, node: Node) -> Launch:
    """linear.cl's batched MatMul on A (..., M, K) @ B (..., K, N), batch dims broadcast as numpy
    does, 1-D operands as (1, K) / (K, 1); either operand a run-time tensor or a constant."""
    a_shape, b_shape = (ctx.graph.tensors[name].shape for name in node.inputs)
    y = ctx.act(node.outputs[0])
    a2 = (1,) + a_shape if len(a_shape) == 1 else a_shape
    b2 = b_shape + (1,) if len(b_shape) == 1 else b_shape
    m, k, nn = a2[-2], a2[-1], b2[-1]
    batch = _batch_dims(np.broadcast_shapes(a2[:-2], b2[:-2]), a2[:-2], b2[:-2], m * k, k * nn)
    if len(batch) > 3:
        raise NotLowerable(f"MatMul with {len(batch)} batch dimensions that do not merge (the kernels index 3)")
    batch = [(1, 0, 0)] * (3 - len(batch)) + batch
    a, a_half = _operand(ctx, node.inputs[0])
    b, b_half = _operand(ctx, node.inputs[1])
    defines = {"M": m, "K": k, "NN": nn, "TRANSPOSE_B": 0, "HAS_BIAS": 0, "ALPHA": 1.0,
               **{f"OB{i}": size for i, (size, _, _) in enumerate(batch)},
               **{f"SA{i}": sa for i, (_, sa, _) in enumerate(batch)},
               **{f"SB{i}": sb for i, (_, _, sb) in enumerate(batch)},
               **storage_defines(A=a_half, B=b_half, W=False, Y=y.half),
               **activation_defines(node.attrs.get("fused_activation"))}
    batches = math.prod(size for size, _, _ in batch)
    args = [a, b, ctx.dummy, y.buffer]
    if ctx.config.tuning("matmul").local is None:
        t = _BLOCKED
        size = (ceil_div(nn, t["NV"] * ctx.vec), ceil_div(m, t["RM"]), batches)
        return ctx.launch("linear.cl", "matmul_blocked", {"MATMUL_BLOCKED": 1, **t, **defines}, args, size)
    t = _TILED
    lx, ly = t["TN"] // t["RN"], t["TM"] // t["RM"]
    size = (ceil_div(nn, t["TN"]) * lx, ceil_div(m, t["TM"]) * ly, batches)
    return ctx.launch("linear.cl", "matmul_tiled", {"MATMUL_TILED": 1, **t, **defines}, args, size,
                      local_size=(lx, ly, 1))


def _batch_dims(out: tuple[int, ...], a: tuple[int, ...], b: tuple[int, ...], a_matrix: int, b_matrix: int
                ) -> list[tuple[int, int, int]]:
    """(size, A stride, B stride) of each output batch dim in elements (stride 0: broadcast),
    size-1 dims dropped and neighbours merged where both operands step through them evenly."""
    dims: list[tuple[int, int, int]] = []
    for size, sa, sb in zip(out, _batch_strides(a, len(out), a_matrix), _batch_strides(b, len(out), b_matrix)):
        if size == 1:
            continue
        if dims and dims[-1][1] == sa * size and dims[-1][2] == sb * size:
            dims[-1] = (dims[-1][0] * size, sa, sb)
        else:
            dims.append((size, sa, sb))
    return dims


def _batch_strides(dims: tuple[int, ...], rank: int, matrix: int) -> list[int]:
    dims = (1,) * (rank - len(dims)) + tuple(dims)
    strides, running = [0] * rank, matrix
    for i in range(rank - 1, -1, -1):
        strides[i] = running if dims[i] > 1 else 0
        running *= dims[i]
    return strides


def _operand(ctx: LoweringContext, name: str) -> tuple[DeviceBuffer, bool]:
    if ctx.is_const(name):
        return ctx.dense(name)
    ref = ctx.act(name)
    return ref.buffer, ref.half
