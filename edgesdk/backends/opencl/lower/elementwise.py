"""The opencl lowering of the elementwise family (``edgesdk/ops/elementwise.py``): Add/Sub/Mul/Div/Pow
and PRelu with broadcasting (elementwise.cl's binary kernels) and stand-alone activations."""
from __future__ import annotations


from ....graph import Node
from ....runtime.activations import ACTIVATION_PARAMS
from ..kernels import Launch, LoweringContext, activation_defines, ceil_div, kernel, storage_defines
from .common import broadcast_strides, operand, pad_rank

# elementwise.cl's OP codes. PRelu is a binary op of x and its slope (y = x >= 0 ? x : x * slope).
_BINARY_OPS = {"Add": 0, "Sub": 1, "Mul": 2, "Div": 3, "Pow": 4, "PRelu": 5}


@kernel(*_BINARY_OPS)
def binary(ctx: LoweringContext, node: Node) -> list[Launch]:
    y = ctx.act(node.outputs[0])
    a, a_half, a_shape = operand(ctx, node.inputs[0])
    b, b_half, b_shape = operand(ctx, node.inputs[1])
    common = {"OP": _BINARY_OPS[node.op], "TOTAL": y.size, **storage_defines(A=a_half, B=b_half, Y=y.half),
              **activation_defines(node.attrs.get("fused_activation"))}
    if a_shape == b_shape == y.shape:
        return [ctx.launch("elementwise.cl", "binary_same", {"BINARY_SAME": 1, **common}, [a, b, y.buffer],
                           (ceil_div(y.size, ctx.vec),), "eltwise")]
    out = pad_rank(y.shape)
    defines = {"BINARY_BROADCAST": 1, **common, **{f"D{i}": d for i, d in enumerate(out)},
               **{f"SA{i}": s for i, s in enumerate(broadcast_strides(a_shape, out))},
               **{f"SB{i}": s for i, s in enumerate(broadcast_strides(b_shape, out))}}
    return [ctx.launch("elementwise.cl", "binary_broadcast", defines, [a, b, y.buffer], (y.size,), "eltwise")]


@kernel(*ACTIVATION_PARAMS)
def activation(ctx: LoweringContext, node: Node) -> list[Launch]:
    x, y = ctx.act(node.inputs[0]), ctx.act(node.outputs[0])
    defines = {"UNARY": 1, "TOTAL": y.size, **storage_defines(X=x.half, Y=y.half),
               **activation_defines(node.attrs["activation"])}
    return [ctx.launch("elementwise.cl", "unary", defines, [x.buffer, y.buffer], (ceil_div(y.size, ctx.vec),),
                       "eltwise")]
