"""Max / average pooling (2-D, and 1-D through the 2-D kernels) and global pooling."""
from __future__ import annotations

import math

import numpy as np

from ..errors import UnsupportedModelError
from ..graph import Node
from .conv import WINDOW_ATTRS, check_window, import_1d, sliding_windows, window_attrs
from .geometry import pool_output_size, pool_sweep
from .registry import BOOL, Signature, op

_POOL_ATTRS = {**WINDOW_ATTRS, "ceil_mode": BOOL}
max_pool = op("MaxPool", family="pool", signature=Signature(1, 0, _POOL_ATTRS))
average_pool = op("AveragePool", family="pool",
                  signature=Signature(1, 0, {**_POOL_ATTRS, "count_include_pad": BOOL}),
                  note="cpu: a ceil_mode overhang counted with count_include_pad on the reference kernel")
windowed = op.shared("MaxPool", "AveragePool")
global_average_pool = op("GlobalAveragePool", family="pool", signature=Signature(1))
global_max_pool = op("GlobalMaxPool", family="pool", signature=Signature(1))
global_pools = op.shared("GlobalAveragePool", "GlobalMaxPool")


# -- import ---------------------------------------------------------------------------------------
@windowed.importer
def _import_pool(imp, name, inputs, outputs, attrs, op_type=None):
    op_type = op_type or imp.op_type
    if len(imp.shape(inputs[0])) == 3:
        return import_1d(imp, name, inputs, outputs, attrs,
                         lambda imp2, n, i, o, a: _import_pool(imp2, n, i, o, a, op_type))
    if len(outputs) > 1 and outputs[1]:
        raise UnsupportedModelError(f"node {name!r}: MaxPool's Indices output is not supported")
    window = window_attrs(imp, name, op_type, inputs[0], attrs, attrs["kernel_shape"])
    window["ceil_mode"] = bool(attrs.get("ceil_mode", 0))
    if op_type == "AveragePool":
        window["count_include_pad"] = bool(attrs.get("count_include_pad", 0))
    return Node(op_type, name, inputs[:1], outputs[:1], window)


@global_pools.importer
def _import_global(imp, name, inputs, outputs, attrs):
    if len(imp.shape(inputs[0])) < 3:
        raise UnsupportedModelError(f"node {name!r}: {imp.op_type} needs an input with spatial axes")
    return Node(imp.op_type, name, inputs[:1], outputs[:1], {})


# -- shapes ---------------------------------------------------------------------------------------
@windowed.shape
def _pool_shape(node, shapes):
    n, c, h, w = shapes[0]
    a = node.attrs
    kh, kw = a["kernel_shape"]
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = a["strides"], a["dilations"], a["pads"]
    oh = pool_output_size(h, kh, sh, dh, pt, pb, a["ceil_mode"])
    ow = pool_output_size(w, kw, sw, dw, pl, pr, a["ceil_mode"])
    if oh <= 0 or ow <= 0:
        raise UnsupportedModelError(f"node {node.name!r}: input {h}x{w} is too small for its window")
    return [(n, c, oh, ow)]


windowed.check(check_window)


@global_pools.shape
def _global_shape(node, shapes):
    return [shapes[0][:2] + (1,) * (len(shapes[0]) - 2)]


# -- reference ------------------------------------------------------------------------------------
def _geometry(node, x: np.ndarray):
    a = node.attrs
    out_hw, (top, left, bottom, right) = pool_sweep(node, *x.shape[2:])
    full_pads = ((0, 0), (0, 0), (top, bottom), (left, right))
    return a["kernel_shape"], a["strides"], a["dilations"], out_hw, full_pads


@max_pool.reference
def _max_pool(node, x: np.ndarray) -> np.ndarray:
    k, s, d, out_hw, full_pads = _geometry(node, x)
    lowest = np.iinfo(x.dtype).min if np.issubdtype(x.dtype, np.integer) else -np.inf  # uint8 runs quantized
    xp = np.pad(x, full_pads, constant_values=lowest)
    return sliding_windows(xp, k, s, d, out_hw).max(axis=(2, 3))


@average_pool.reference
def _average_pool(node, x: np.ndarray) -> np.ndarray:
    k, s, d, out_hw, full_pads = _geometry(node, x)
    xp = np.pad(x, full_pads)
    # The divisor counts the window positions that lie on data (and on explicit pads when
    # count_include_pad), never the ceil_mode overhang.
    counted = np.zeros((1, 1) + xp.shape[2:], dtype=x.dtype)
    h, w = x.shape[2:]
    pads = node.attrs["pads"]
    if node.attrs["count_include_pad"]:
        counted[..., : pads[0] + h + pads[2], : pads[1] + w + pads[3]] = 1
    else:
        counted[..., pads[0]: pads[0] + h, pads[1]: pads[1] + w] = 1
    sums = sliding_windows(xp, k, s, d, out_hw).sum(axis=(2, 3), dtype=np.float32)
    counts = sliding_windows(counted, k, s, d, out_hw).sum(axis=(2, 3), dtype=np.float32)
    return (sums / np.maximum(counts, 1)).astype(x.dtype)


@global_average_pool.reference
def _global_average(node, x: np.ndarray) -> np.ndarray:
    return x.mean(axis=tuple(range(2, x.ndim)), keepdims=True, dtype=np.float32).astype(x.dtype)


@global_max_pool.reference
def _global_max(node, x: np.ndarray) -> np.ndarray:
    return x.max(axis=tuple(range(2, x.ndim)), keepdims=True)


# -- torch ----------------------------------------------------------------------------------------
def _torch_geometry(node, x):
    """Window, stride, dilation and the full F.pad (left, right, top, bottom) pads, ceil overhang
    included (the shared :func:`pool_sweep`)."""
    a = node.attrs
    _, (top, left, bottom, right) = pool_sweep(node, *x.shape[2:])
    return tuple(a["kernel_shape"]), tuple(a["strides"]), tuple(a["dilations"]), (left, right, top, bottom)


@max_pool.torch
def _max_pool_torch(m, node, x):
    import torch.nn.functional as F
    k, s, d, full = _torch_geometry(node, x)
    xp = F.pad(x, full, value=-math.inf) if any(full) else x
    return F.max_pool2d(xp, k, s, padding=0, dilation=d)


@average_pool.torch
def _average_pool_torch(m, node, x):
    import torch
    import torch.nn.functional as F
    (kh, kw), s, d, full = _torch_geometry(node, x)
    c = x.shape[1]
    xp = F.pad(x, full) if any(full) else x
    ones = torch.ones((c, 1, kh, kw), dtype=x.dtype, device=x.device)
    sums = F.conv2d(xp, ones, stride=s, dilation=d, groups=c)
    # Divisor: window positions on data (and on explicit pads with count_include_pad), never on
    # the ceil_mode overhang.
    h, w = x.shape[2:]
    top, left, bottom, right = node.attrs["pads"]
    counted = torch.zeros((1, 1) + tuple(xp.shape[2:]), dtype=x.dtype, device=x.device)
    if node.attrs["count_include_pad"]:
        counted[..., : top + h + bottom, : left + w + right] = 1
    else:
        counted[..., top: top + h, left: left + w] = 1
    counts = F.conv2d(counted, ones[:1], stride=s, dilation=d)
    return sums / torch.clamp(counts, min=1)


@global_average_pool.torch
def _global_average_torch(m, node, x):
    return x.mean(dim=tuple(range(2, x.dim())), keepdim=True)


@global_max_pool.torch
def _global_max_torch(m, node, x):
    return x.amax(dim=tuple(range(2, x.dim())), keepdim=True)
