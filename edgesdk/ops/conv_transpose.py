"""ConvTranspose (2-D; 1-D ones are imported as 2-D over a height of 1, as Conv).

The IR node keeps ``kernel_shape``, ``strides``, ``dilations``, ``group``, explicit ``pads``
(top, left, bottom, right) and ``output_padding`` (extra rows / columns at the end): auto_pad and
output_shape are resolved into pads at import (the ONNX rules, which ONNX Runtime follows), so
every kernel computes output pixel oy from the input rows iy with oy = iy * stride - top + ky *
dilation, and the output size is (in - 1) * stride + (k - 1) * dilation + 1 + output_padding -
top - bottom.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import UnsupportedModelError
from ..graph import Node
from ..runtime.sizes import check_attribute, check_tensor_size
from . import blas
from .conv import WINDOW_ATTRS, import_1d
from .registry import INT, Signature, ints, op

conv_transpose = op("ConvTranspose", family="conv_transpose", fusable=True,
                    signature=Signature(2, 1, {**WINDOW_ATTRS, "output_padding": ints(2), "group": INT}),
                    note="1-D and 2-D")


# -- import ---------------------------------------------------------------------------------------
@conv_transpose.importer
def _import(imp, name, inputs, outputs, attrs):
    rank = len(imp.shape(inputs[0]))
    if rank == 3:
        attrs = dict(attrs)
        if len(attrs.get("output_shape", ())) == 3:  # (N, C, L) given: keep the spatial size
            attrs["output_shape"] = attrs["output_shape"][2:]
        return import_1d(imp, name, inputs, outputs, attrs, _import)
    if rank != 4:
        raise UnsupportedModelError(
            f"node {name!r}: ConvTranspose on a rank-{rank} input; only 1-D and 2-D ConvTranspose are supported")
    x_shape, w_shape = imp.shape(inputs[0]), imp.shape(inputs[1])
    if len(w_shape) != 4:
        raise UnsupportedModelError(f"node {name!r}: ConvTranspose weights of shape {list(w_shape)} are not "
                                    f"(C_in, C_out / group, KH, KW)")
    kernel = tuple(int(k) for k in attrs.get("kernel_shape", w_shape[2:]))
    strides = tuple(int(s) for s in attrs.get("strides", (1, 1)))
    dilations = tuple(int(d) for d in attrs.get("dilations", (1, 1)))
    output_padding = tuple(int(p) for p in attrs.get("output_padding", (0, 0)))
    pads = tuple(int(p) for p in attrs.get("pads", (0, 0, 0, 0)))
    if (len(kernel), len(strides), len(dilations), len(output_padding), len(pads)) != (2, 2, 2, 2, 4):
        raise UnsupportedModelError(f"node {name!r}: ConvTranspose window attributes are not 2-D")
    if min(strides) < 1 or min(dilations) < 1 or min(pads) < 0 or min(output_padding) < 0:
        raise UnsupportedModelError(f"node {name!r}: ConvTranspose has non-positive strides/dilations or "
                                    f"negative pads/output_padding")
    output_shape = [int(d) for d in attrs.get("output_shape", ())]
    if len(output_shape) == 4:  # (N, C, H, W) given: the spatial part
        output_shape = output_shape[2:]
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if auto_pad not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
        raise UnsupportedModelError(f"node {name!r}: unknown auto_pad {auto_pad!r}")
    if output_shape and len(output_shape) != 2:
        raise UnsupportedModelError(f"node {name!r}: ConvTranspose output_shape {output_shape} is not 2-D")
    per_axis = [_axis_pads(x_shape[2 + i], kernel[i], strides[i], dilations[i], output_padding[i],
                           (pads[i], pads[i + 2]), auto_pad, output_shape[i] if output_shape else None)
                for i in range(2)]
    (top, bottom, extra_h), (left, right, extra_w) = per_axis
    return Node("ConvTranspose", name, inputs[:3], outputs[:1], {
        "kernel_shape": kernel, "strides": strides, "dilations": dilations, "pads": (top, left, bottom, right),
        "output_padding": (extra_h, extra_w), "group": int(attrs.get("group", 1))})


def _axis_pads(size: int, kernel: int, stride: int, dilation: int, output_padding: int,
               pads: tuple[int, int], auto_pad: str, output_size: int | None) -> tuple[int, int, int]:
    """(begin pad, end pad, output padding) of one axis. With output_shape, or SAME_* (whose
    output size is size * stride), the total padding full - output is split as ONNX says: the
    odd one at the end for SAME_UPPER, at the beginning otherwise. An output larger than the
    full one (ONNX Runtime allows less than one stride more) grows at the end, as with
    output_padding."""
    full = (size - 1) * stride + (kernel - 1) * dilation + 1 + output_padding
    if output_size is None and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        output_size = size * stride
    if output_size is None:
        return (0, 0, output_padding) if auto_pad == "VALID" else (*pads, output_padding)
    total = full - output_size
    if total < 0:
        return 0, 0, output_padding - total
    small, big = total // 2, total - total // 2
    return (small, big, output_padding) if auto_pad == "SAME_UPPER" else (big, small, output_padding)


# -- shape, cost, checks --------------------------------------------------------------------------
def output_size(size: int, kernel: int, stride: int, dilation: int, begin: int, end: int, extra: int) -> int:
    return (size - 1) * stride + (kernel - 1) * dilation + 1 + extra - begin - end


def full_extent(node: Node, h: int, w: int) -> tuple[int, int]:
    """Rows and columns the scattered windows and the output span together, from row / column 0
    of the uncropped result (what the reference kernel materialises)."""
    a = node.attrs
    (kh, kw), (sh, sw), (dh, dw), (top, left, _, _) = a["kernel_shape"], a["strides"], a["dilations"], a["pads"]
    oh, ow = output_hw(node, h, w)
    return (max((h - 1) * sh + (kh - 1) * dh + 1, top + oh), max((w - 1) * sw + (kw - 1) * dw + 1, left + ow))


def output_hw(node: Node, h: int, w: int) -> tuple[int, int]:
    a = node.attrs
    (kh, kw), (sh, sw), (dh, dw), (pt, pl, pb, pr), (eh, ew) = (
        a["kernel_shape"], a["strides"], a["dilations"], a["pads"], a["output_padding"])
    return output_size(h, kh, sh, dh, pt, pb, eh), output_size(w, kw, sw, dw, pl, pr, ew)


@conv_transpose.shape
def _shape(node, shapes):
    x, w = shapes[0], shapes[1]
    what = f"node {node.name!r}: ConvTranspose"
    if len(x) != 4 or len(w) != 4:
        raise UnsupportedModelError(f"{what} input {list(x)} and weights {list(w)} are not 4-D")
    group = node.attrs["group"]
    if group < 1 or x[1] != w[0] or x[1] % group:
        raise UnsupportedModelError(f"{what}: input has {x[1]} channels, weights {w[0]}, group {group}; the "
                                    f"weights must be (C_in, C_out / group, KH, KW) with group dividing C_in")
    if tuple(node.attrs["kernel_shape"]) != tuple(w[2:]):
        raise UnsupportedModelError(f"{what} kernel_shape {list(node.attrs['kernel_shape'])} does not match "
                                    f"the weights' {list(w[2:])}")
    if len(shapes) > 2 and shapes[2] and tuple(shapes[2]) != (w[1] * group,):
        raise UnsupportedModelError(f"{what} bias of shape {list(shapes[2])} is not ({w[1] * group},)")
    oh, ow = output_hw(node, x[2], x[3])
    if oh <= 0 or ow <= 0:
        raise UnsupportedModelError(f"{what}: its pads remove the whole {x[2]}x{x[3]} output")
    return [(x[0], w[1] * group, oh, ow)]


@conv_transpose.macs
def _macs(node, graph):
    x, w = graph.tensors[node.inputs[0]].shape, graph.tensors[node.inputs[1]].shape
    return math.prod(x) * math.prod(w[1:])  # every input value times every tap of its group's outputs


@conv_transpose.check
def _check(node, shapes, dtype, limit) -> None:
    """Attribute ranges, and the uncropped result the reference kernel scatters into."""
    a = node.attrs
    for attr, low in (("kernel_shape", 1), ("strides", 1), ("dilations", 1), ("pads", 0), ("output_padding", 0)):
        check_attribute(node, attr, a[attr], low)
    if len(shapes[0]) != 4 or len(shapes[1]) != 4:
        return  # the shape rule says what is wrong
    n, _, h, w = shapes[0]
    fh, fw = full_extent(node, h, w)
    check_tensor_size(f"uncropped output of {node.name!r}", (n, shapes[1][1] * a["group"], fh, fw), dtype,
                      role="scratch", node=node, limit=limit)


# -- reference ------------------------------------------------------------------------------------
@conv_transpose.reference
def _reference(node, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """Every kernel tap scatters the whole input, strided, into the uncropped result (one
    batched matmul over the groups per tap), which is then cropped by the pads."""
    a = node.attrs
    (kh, kw), (sh, sw), (dh, dw), (top, left, _, _) = a["kernel_shape"], a["strides"], a["dilations"], a["pads"]
    group = a["group"]
    n, c, h, wd = x.shape
    ocg = w.shape[1]
    oh, ow = output_hw(node, h, wd)
    full = np.zeros((n, group, ocg) + full_extent(node, h, wd), dtype=np.result_type(x, w))
    xg = x.reshape(n, group, c // group, h * wd)
    wg = w.reshape(group, c // group, ocg, kh, kw)
    for ky in range(kh):
        for kx in range(kw):
            tap = blas.matmul(wg[:, :, :, ky, kx].transpose(0, 2, 1), xg).reshape(n, group, ocg, h, wd)
            full[..., ky * dh: ky * dh + (h - 1) * sh + 1: sh, kx * dw: kx * dw + (wd - 1) * sw + 1: sw] += tap
    y = full.reshape(n, group * ocg, *full.shape[3:])[:, :, top: top + oh, left: left + ow]
    if b is not None:
        y = y + b.reshape(1, -1, 1, 1)
    return np.ascontiguousarray(y)


# -- torch ----------------------------------------------------------------------------------------
@conv_transpose.torch
def _torch(m, node, x, w, b=None):
    """F.conv_transpose2d without padding, then the crop (and growth, for output_padding) by
    slicing, so that asymmetric pads and any output_padding work; the bias comes last so the
    grown border gets it too."""
    import torch.nn.functional as F
    a = node.attrs
    top, left, _, _ = a["pads"]
    oh, ow = output_hw(node, *x.shape[2:])
    full = F.conv_transpose2d(x, w, None, stride=tuple(a["strides"]), dilation=tuple(a["dilations"]),
                              groups=a["group"])
    grow_h, grow_w = max(0, top + oh - full.shape[2]), max(0, left + ow - full.shape[3])
    if grow_h or grow_w:
        full = F.pad(full, (0, grow_w, 0, grow_h))
    y = full[:, :, top: top + oh, left: left + ow]
    return y if b is None else y + b.reshape(1, -1, 1, 1)
