"""The cpu lowering of the conv_transpose family (``edgesdk/ops/conv_transpose.py``): ConvTranspose
on the native kernel (per group a GEMM of the input pixels with the packed weights, then a col2im
gather that adds the bias and applies the fused activation), NHWC like Conv. The weights are
packed once, here."""
from __future__ import annotations

import math
from functools import partial

from ....graph import Node
from .. import weights as W
from ..program import NHWC, Builder
from .base import fallback, fused_act, lowering, native_kernels

MAX_REACHING_TAPS = 1024  # the native gather's limit on kernel taps landing on one output pixel


def reaching_taps(kernel: int, stride: int, dilation: int) -> int:
    """Kernel taps along one axis that can land on the same output position."""
    return -(-kernel // (stride // math.gcd(stride, dilation)))


@lowering("ConvTranspose")
def conv_transpose(node: Node, b: Builder) -> None:
    k, g = native_kernels(), b.graph
    x_name, w_name, bias_name = node.inputs[0], node.inputs[1], node.input(2)
    wt = g.tensors[w_name]
    if not wt.is_constant or (bias_name and not g.tensors[bias_name].is_constant):
        return fallback(node, b, "ConvTranspose with weights or bias computed at run time")
    a = node.attrs
    (kh, kw), (sh, sw), (dh, dw) = a["kernel_shape"], a["strides"], a["dilations"]
    if reaching_taps(kh, sh, dh) * reaching_taps(kw, sw, dw) > MAX_REACHING_TAPS:
        return fallback(node, b, "ConvTranspose with more kernel taps per output pixel than the native kernel takes")
    matrix, how = W.stored_matrix(wt)
    packed = k.pack_conv_transpose(W.as_fp32(matrix, b.precision), a["group"])
    out_channels = b.shape(node.outputs[0])[1]
    bias = W.bias_vector(g, bias_name, out_channels, b.precision)
    x = b.read(x_name, NHWC)
    y = b.write(node.outputs[0], NHWC)
    geometry = dict(kernel=(kh, kw), stride=(sh, sw), dilation=(dh, dw), pads=list(a["pads"]),
                    output_padding=tuple(a["output_padding"]))
    (act, alpha, beta), threads = fused_act(node), b.threads_for(node)
    kind = "depthwise" if packed.depthwise else f"{a['group']} group{'s' if a['group'] > 1 else ''}"
    b.emit(node, "native", lambda v: partial(k.conv_transpose_nhwc, v[x], packed, bias, v[y], act=act, alpha=alpha,
                                             beta=beta, threads=threads, **geometry), f"GEMM + col2im, {kind}, {how}")
