"""The opencl lowering of the linear family (``edgesdk/ops/linear.py``): Gemm (``gemm_nt``, the GEMV
path for batch 1; compressed weights run as a 1x1 convolution) and batched MatMul."""
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
    return ctx.launch("conv.cl", "gemm_nt", defines, [x, w, epilogue.bias or ctx.dummy, y], size, "gemm_nt")


def _operand(ctx: LoweringContext, name: str) -> tuple[DeviceBuffer, bool]:
    if ctx.is_const(name):
        return ctx.dense(name)
    ref = ctx.act(name)
    return ref.buffer, ref.half


@kernel("MatMul")
def matmul(ctx: LoweringContext, node: Node) -> list[Launch]:
    a_shape = ctx.graph.tensors[node.inputs[0]].shape
    b_shape = ctx.graph.tensors[node.inputs[1]].shape
    y = ctx.act(node.outputs[0])
    a2 = (1,) + a_shape if len(a_shape) == 1 else a_shape
    b2 = b_shape + (1,) if len(b_shape) == 1 else b_shape
    m, k, nn = a2[-2], a2[-1], b2[-1]
    batch = np.broadcast_shapes(a2[:-2], b2[:-2])
    if len(batch) > 3:
        raise NotLowerable(f"MatMul with {len(batch)} batch dimensions")
    out_batch = (1,) * (3 - len(batch)) + tuple(batch)
    strides = {}
    for tag, shape, matrix in (("A", a2, m * k), ("B", b2, k * nn)):
        dims = (1,) * (3 - len(shape[:-2])) + tuple(shape[:-2])
        stride, running = [0, 0, 0], matrix
        for i in (2, 1, 0):
            stride[i] = running if dims[i] > 1 else 0
            running *= dims[i]
        strides.update({f"S{tag}{i}": s for i, s in enumerate(stride)})
    a, a_half = _operand(ctx, node.inputs[0])
    b, b_half = _operand(ctx, node.inputs[1])
    defines = {"MATMUL": 1, "M": m, "K": k, "NN": nn, "OB0": out_batch[0], "OB1": out_batch[1],
               "OB2": out_batch[2], **strides, **storage_defines(A=a_half, B=b_half, Y=y.half),
               **activation_defines(node.attrs.get("fused_activation"))}
    size = (ceil_div(nn, ctx.vec) * m, math.prod(out_batch))
    return [ctx.launch("conv.cl", "matmul", defines, [a, b, y.buffer], size, "matmul")]
