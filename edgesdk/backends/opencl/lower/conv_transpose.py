"""The opencl lowering of the conv_transpose family (``edgesdk/ops/conv_transpose.py``):
ConvTranspose on ``conv_transpose.cl`` (each work-item gathers the input pixels that scatter onto
one output pixel, for ROWS output channels of a group), weights in their ONNX layout, bias and
fused activation in the epilogue."""
from __future__ import annotations

from ....graph import Node
from ..kernels import Launch, LoweringContext, NotLowerable, activation_defines, ceil_div, kernel, storage_defines
from .conv import bias_buffer


@kernel("ConvTranspose")
def conv_transpose(ctx: LoweringContext, node: Node) -> list[Launch]:
    x, y = ctx.act(node.inputs[0]), ctx.act(node.outputs[0])
    if len(x.shape) != 4:
        raise NotLowerable("only 2-D ConvTranspose has a kernel")
    if not ctx.is_const(node.inputs[1]):
        raise NotLowerable("ConvTranspose weights computed at run time")
    weights, weights_half = ctx.dense(node.inputs[1])
    bias, bias_half = bias_buffer(ctx, node.input(2))
    a = node.attrs
    n, c, h, w = x.shape
    _, oc, oh, ow = y.shape
    group = a["group"]
    ocg = oc // group
    rows = min(ctx.config.tuning("conv_direct").rows, ocg)  # output channels per work-item
    defines = {"N": n, "C": c, "H": h, "W": w, "OC": oc, "OH": oh, "OW": ow,
               "KH": a["kernel_shape"][0], "KW": a["kernel_shape"][1], "SH": a["strides"][0], "SW": a["strides"][1],
               "DH": a["dilations"][0], "DW": a["dilations"][1], "PT": a["pads"][0], "PL": a["pads"][1],
               "G": group, "CG": c // group, "OCG": ocg, "ROWS": rows, "HAS_BIAS": int(bias is not None),
               **storage_defines(X=x.half, W=weights_half, B=bias_half, Y=y.half),
               **activation_defines(a.get("fused_activation"))}
    size = (ow, oh, n * group * ceil_div(ocg, rows))
    return [ctx.launch("conv_transpose.cl", "conv_transpose2d", defines,
                       [x.buffer, weights, bias or ctx.dummy, y.buffer], size, "conv_direct")]
