"""Conv (2-D; 1-D convolutions are imported as 2-D ones over a height of 1)."""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..errors import UnsupportedModelError
from ..runtime.sizes import check_attribute, check_tensor_size
from . import blas
from .geometry import conv_output_size, pool_sweep, same_pads
from ..graph import Node
from .registry import INT, Signature, ints, op

WINDOW_ATTRS = {"kernel_shape": ints(2), "strides": ints(2), "dilations": ints(2), "pads": ints(4)}

conv = op("Conv", family="conv", fusable=True,
          signature=Signature(2, 1, {**WINDOW_ATTRS, "group": INT}))


# -- import ---------------------------------------------------------------------------------------
def window_attrs(imp: Any, name: str, op_type: str, x: str, attrs: dict, kernel: Sequence[int]) -> dict[str, Any]:
    """kernel_shape, strides, dilations and explicit (top, left, bottom, right) pads of a 2-D
    window op (Conv, ConvTranspose, pooling)."""
    rank = len(imp.shape(x))
    if rank != 4:
        raise UnsupportedModelError(
            f"node {name!r}: {op_type} on a rank-{rank} input; only 1-D and 2-D {op_type} are supported")
    kernel = tuple(int(k) for k in kernel)
    strides = tuple(attrs.get("strides", (1, 1)))
    dilations = tuple(attrs.get("dilations", (1, 1)))
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER", "VALID"):
        pads = same_pads(auto_pad, imp.shape(x)[2:], kernel, strides, dilations)
    elif auto_pad == "NOTSET":
        pads = tuple(attrs.get("pads", (0, 0, 0, 0)))
    else:
        raise UnsupportedModelError(f"node {name!r}: unknown auto_pad {auto_pad!r}")
    if len(kernel) != 2 or len(strides) != 2 or len(dilations) != 2 or len(pads) != 4:
        raise UnsupportedModelError(f"node {name!r}: {op_type} window attributes are not 2-D")
    if min(strides) < 1 or min(dilations) < 1 or min(pads) < 0:
        raise UnsupportedModelError(f"node {name!r}: {op_type} has non-positive strides/dilations or negative pads")
    return {"kernel_shape": kernel, "strides": strides, "dilations": dilations, "pads": pads}


def window_1d_as_2d(attrs: dict) -> dict:
    """The attributes of a 1-D window op over (N, C, L) as those of the 2-D op over (N, C, 1, L)."""
    out = dict(attrs)
    for key, unit in (("kernel_shape", 1), ("strides", 1), ("dilations", 1)):
        if key in attrs:
            out[key] = (unit, *attrs[key])
    if "pads" in attrs:
        begin, end = attrs["pads"]
        out["pads"] = (0, begin, 0, end)
    if "output_padding" in attrs:
        out["output_padding"] = (0, *attrs["output_padding"])
    if "output_shape" in attrs:
        out["output_shape"] = (1, *attrs["output_shape"])
    return out


def as_2d(imp: Any, name: str, x: str) -> str:
    """A (N, C, 1, L) view of the rank-3 tensor ``x`` (a Reshape node, added now)."""
    n, c, length = imp.shape(x)
    view = imp.graph.unique_name(f"{name}.as2d")
    imp.add_reshape(f"{name}.unsqueeze", x, view, (n, c, 1, length))
    return view


def import_1d(imp: Any, name: str, inputs: list[str], outputs: list[str], attrs: dict, import_2d) -> None:
    """Import a 1-D window op as its 2-D twin between two Reshapes (what ONNX Runtime's CPU
    provider does too): audio models' Conv1d/pooling run on every backend's 2-D kernels."""
    x2 = as_2d(imp, name, inputs[0])
    weight = inputs[1] if len(inputs) > 1 and inputs[1] else None
    new_inputs = [x2, *inputs[1:]]
    if weight is not None and imp.graph.const(weight) is not None and len(imp.shape(weight)) == 3:
        w = imp.graph.const(weight)
        w2 = imp.graph.unique_name(f"{weight}.as2d")
        imp.graph.add_constant(w2, w.reshape(w.shape[0], w.shape[1], 1, w.shape[2]))
        new_inputs[1] = w2
    elif weight is not None and len(imp.shape(weight)) == 3:
        raise UnsupportedModelError(f"node {name!r}: a 1-D convolution needs constant weights")
    y2 = imp.graph.unique_name(f"{outputs[0]}.as2d")
    node = import_2d(imp, name, new_inputs, [y2, *outputs[1:]], window_1d_as_2d(attrs))
    if node is not None:
        imp.add(node)
    shape = imp.shape(y2)
    imp.add_reshape(f"{name}.squeeze", y2, outputs[0], (shape[0], shape[1], shape[3]))


@conv.importer
def _import(imp, name, inputs, outputs, attrs):
    if len(imp.shape(inputs[0])) == 3:
        return import_1d(imp, name, inputs, outputs, attrs, _import)
    w_shape = imp.shape(inputs[1])
    window = window_attrs(imp, name, "Conv", inputs[0], attrs, attrs.get("kernel_shape", w_shape[2:]))
    return Node("Conv", name, inputs[:3], outputs[:1], {**window, "group": int(attrs.get("group", 1))})


# -- shape, cost, checks --------------------------------------------------------------------------
@conv.shape
def _shape(node, shapes):
    (n, c, h, w), wshape = shapes[0], shapes[1]
    a = node.attrs
    if c != wshape[1] * a["group"]:
        raise UnsupportedModelError(
            f"node {node.name!r}: input has {c} channels but weights expect {wshape[1]} x group {a['group']}")
    kh, kw = a["kernel_shape"]
    if (kh, kw) != tuple(wshape[2:]):  # ONNX requires them equal; kernels follow the weights
        raise UnsupportedModelError(f"node {node.name!r}: kernel_shape {[kh, kw]} does not match the "
                                    f"weights' {list(wshape[2:])}")
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = a["strides"], a["dilations"], a["pads"]
    oh = conv_output_size(h, kh, sh, dh, pt, pb)
    ow = conv_output_size(w, kw, sw, dw, pl, pr)
    if oh <= 0 or ow <= 0:
        raise UnsupportedModelError(f"node {node.name!r}: input {h}x{w} is too small for its kernel")
    return [(n, wshape[0], oh, ow)]


@conv.macs
def _macs(node, graph):
    out = graph.tensors[node.outputs[0]].shape
    return math.prod(out) * math.prod(graph.tensors[node.inputs[1]].shape[1:])


def check_window(node, shapes, dtype, limit) -> None:
    """Attribute ranges and the padded input the numpy kernels materialise (Conv, pooling)."""
    a = node.attrs
    if len(shapes[0]) != 4:
        return  # not a 2-D window: the shape rule says so
    n, c, h, w = shapes[0]
    if node.op in ("MaxPool", "AveragePool"):  # a ceil_mode overhang is padding too
        _, pads = pool_sweep(node, h, w)
    else:
        pads = tuple(a["pads"])
    check_tensor_size(f"padded input {node.inputs[0]!r}", (n, c, h + pads[0] + pads[2], w + pads[1] + pads[3]),
                      dtype, role="scratch", node=node, limit=limit)
    for attr, low in (("kernel_shape", 1), ("strides", 1), ("dilations", 1), ("pads", 0)):
        check_attribute(node, attr, a[attr], low)


conv.check(check_window)


# -- reference ------------------------------------------------------------------------------------
def pad_spatial(x: np.ndarray, pads: tuple[int, int, int, int], value: float = 0.0) -> np.ndarray:
    top, left, bottom, right = pads
    if not any(pads):
        return x
    return np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=value)


def sliding_windows(xp: np.ndarray, kernel_hw: tuple[int, int], strides: tuple[int, int],
                    dilations: tuple[int, int], out_hw: tuple[int, int]) -> np.ndarray:
    """A (N, C, KH, KW, OH, OW) strided view of the padded input; no copy."""
    n, c = xp.shape[:2]
    s0, s1, s2, s3 = xp.strides
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = kernel_hw, strides, dilations, out_hw
    return as_strided(xp, (n, c, kh, kw, oh, ow), (s0, s1, s2 * dh, s3 * dw, s2 * sh, s3 * sw),
                      writeable=False)


@conv.reference
def _reference(node, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """im2col + matmul per group; depthwise as a sum of shifted slices (no im2col)."""
    a = node.attrs
    (kh, kw), strides, dilations, pads = a["kernel_shape"], a["strides"], a["dilations"], a["pads"]
    group = a["group"]
    n, c, h, wd = x.shape
    m, cg = w.shape[:2]
    oh = conv_output_size(h, kh, strides[0], dilations[0], pads[0], pads[2])
    ow = conv_output_size(wd, kw, strides[1], dilations[1], pads[1], pads[3])
    xp = pad_spatial(x, pads)
    if cg == 1 and group == c:
        out = _depthwise(xp, w, strides, dilations, (oh, ow))
    else:
        cols = sliding_windows(xp, (kh, kw), strides, dilations, (oh, ow))
        cols = cols.reshape(n, group, cg * kh * kw, oh * ow)
        out = blas.matmul(w.reshape(group, m // group, cg * kh * kw), cols).reshape(n, m, oh, ow)
    if b is not None:
        out += b.reshape(1, m, 1, 1)
    return out


def _depthwise(xp: np.ndarray, w: np.ndarray, strides: tuple[int, int],
               dilations: tuple[int, int], out_hw: tuple[int, int]) -> np.ndarray:
    # Looping over the KHxKW taps keeps every step a whole-tensor multiply-add.
    m, _, kh, kw = w.shape
    multiplier = m // xp.shape[1]
    src = np.repeat(xp, multiplier, axis=1) if multiplier > 1 else xp
    (sh, sw), (dh, dw), (oh, ow) = strides, dilations, out_hw
    out = np.zeros((xp.shape[0], m, oh, ow), dtype=np.result_type(xp, w))
    for i in range(kh):
        for j in range(kw):
            tap = src[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh, j * dw: j * dw + sw * (ow - 1) + 1: sw]
            out += tap * w[:, 0, i, j].reshape(1, m, 1, 1)
    return out


# -- torch ----------------------------------------------------------------------------------------
@conv.torch
def _torch(m, node, x, w, b=None):
    import torch.nn.functional as F
    a = node.attrs
    top, left, bottom, right = a["pads"]
    if top == bottom and left == right:
        padding = (top, left)
    else:
        x, padding = F.pad(x, (left, right, top, bottom)), (0, 0)
    return F.conv2d(x, w, b, stride=tuple(a["strides"]), padding=padding, dilation=tuple(a["dilations"]),
                    groups=a["group"])
