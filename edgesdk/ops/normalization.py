"""BatchNormalization (when not folded into a Conv), LRN and Softmax."""
from __future__ import annotations

import math

import numpy as np

from ..errors import UnsupportedModelError
from ..graph import Node
from ..runtime.sizes import check_attribute
from .geometry import normalize_axis
from .registry import BOOL, FLOAT, INT, Signature, op

batch_norm = op("BatchNormalization", family="normalization", fusable=True, fp32_only=True,
                signature=Signature(5, 0, {"epsilon": FLOAT}))
lrn = op("LRN", family="normalization", fp32_only=True,
         signature=Signature(1, 0, {"size": INT, "alpha": FLOAT, "beta": FLOAT, "bias": FLOAT}))
softmax = op("Softmax", family="normalization", fp32_only=True,
             signature=Signature(1, 0, {"axis": INT, "coerce_2d": BOOL}))


def _same_shape(node, shapes):
    return [shapes[0]]


def per_channel(v, rank: int):
    """A (C,) vector shaped to broadcast over (N, C, ...) (numpy or torch)."""
    return v.reshape((1, -1) + (1,) * (rank - 2))


# -- BatchNormalization ---------------------------------------------------------------------------
@batch_norm.importer
def _import_batch_norm(imp, name, inputs, outputs, attrs):
    if attrs.get("training_mode", 0) or any(o for o in outputs[1:]):
        raise UnsupportedModelError(f"node {name!r}: BatchNormalization in training mode is not supported; "
                                    f"export the model in eval mode")
    if len(imp.shape(inputs[0])) < 2:
        raise UnsupportedModelError(f"node {name!r}: BatchNormalization needs an input with a channel axis")
    channels = imp.shape(inputs[0])[1]
    for i, what in zip(range(1, 5), ("scale", "bias", "mean", "variance")):
        value = imp.constant_input(name, inputs, i, f"BatchNormalization {what}")
        if value is None or value.shape != (channels,):
            got = "missing" if value is None else f"of shape {tuple(value.shape)}"
            raise UnsupportedModelError(f"node {name!r}: BatchNormalization {what} must have one value per "
                                        f"channel, shape ({channels},), got {got}; the model file is malformed")
    if (imp.graph.const(inputs[4]) + attrs.get("epsilon", 1e-5) <= 0).any():
        raise UnsupportedModelError(f"node {name!r}: BatchNormalization variance + epsilon is not positive")
    return Node("BatchNormalization", name, inputs[:5], outputs[:1],
                {"epsilon": float(attrs.get("epsilon", 1e-5))})


batch_norm.shape(_same_shape)


@batch_norm.reference
def _batch_norm_reference(node, x, scale, bias, mean, var):
    inv_std = scale / np.sqrt(var + var.dtype.type(node.attrs["epsilon"]))
    r = x.ndim
    return (x - per_channel(mean, r)) * per_channel(inv_std, r) + per_channel(bias, r)


@batch_norm.torch
def _batch_norm_torch(m, node, x, scale, bias, mean, var):
    import torch
    inv_std = scale / torch.sqrt(var + node.attrs["epsilon"])
    r = x.dim()
    return (x - per_channel(mean, r)) * per_channel(inv_std, r) + per_channel(bias, r)


# -- LRN ------------------------------------------------------------------------------------------
@lrn.importer
def _import_lrn(imp, name, inputs, outputs, attrs):
    return Node("LRN", name, inputs[:1], outputs[:1], {
        "size": int(attrs["size"]), "alpha": float(attrs.get("alpha", 1e-4)),
        "beta": float(attrs.get("beta", 0.75)), "bias": float(attrs.get("bias", 1.0))})


lrn.shape(_same_shape)


@lrn.check
def _check_lrn(node, shapes, dtype, limit):
    # Windows wider than the channels sum the same values, but size also scales alpha (alpha /
    # size), so it cannot be clipped here; the kernels clip the window, and OpenCL takes it as int.
    check_attribute(node, "size", [node.attrs["size"]], 1)


@lrn.reference
def _lrn_reference(node, x: np.ndarray) -> np.ndarray:
    a = node.attrs
    size = a["size"]
    # Channels past either end add nothing, so the window is clipped to them: padding and loop
    # stay under 2C-1 channels whatever the size (alpha is still divided by the full size).
    reach = max(x.shape[1] - 1, 0)
    before, after = min((size - 1) // 2, reach), min(size // 2, reach)
    squares = np.square(x)
    padded = np.pad(squares, [(0, 0), (before, after)] + [(0, 0)] * (x.ndim - 2))
    window = sum(padded[:, i: i + x.shape[1]] for i in range(before + after + 1))
    t = x.dtype.type
    return x / (t(a["bias"]) + t(a["alpha"] / size) * window) ** t(a["beta"])


@lrn.torch
def _lrn_torch(m, node, x):
    import torch
    import torch.nn.functional as F
    a = node.attrs
    size = a["size"]
    before, after = (size - 1) // 2, math.ceil((size - 1) / 2)
    c = x.shape[1]
    sq = torch.square(x).reshape(x.shape[0], c, -1)  # (N, C, rest)
    padded = F.pad(sq, (0, 0, before, after))
    window = sum(padded[:, i: i + c] for i in range(size)).reshape(x.shape)
    return x / (a["bias"] + (a["alpha"] / size) * window) ** a["beta"]


# -- Softmax --------------------------------------------------------------------------------------
@softmax.importer
def _import_softmax(imp, name, inputs, outputs, attrs):
    rank = len(imp.shape(inputs[0]))
    default = -1 if imp.opset >= 13 else 1
    axis = normalize_axis(int(attrs.get("axis", default)), rank, "Softmax axis")
    return Node("Softmax", name, inputs[:1], outputs[:1], {"axis": axis, "coerce_2d": imp.opset < 13})


softmax.shape(_same_shape)


@softmax.reference
def _softmax_reference(node, x: np.ndarray) -> np.ndarray:
    axis = node.attrs["axis"]
    if node.attrs["coerce_2d"]:  # opset < 13: softmax over all axes from `axis` on
        flat = x.reshape(math.prod(x.shape[:axis]), -1)
        return _softmax(flat, 1).reshape(x.shape)
    return _softmax(x, axis)


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    # Two passes: max for stability, then exp and normalise.
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@softmax.torch
def _softmax_torch(m, node, x):
    import torch
    axis = node.attrs["axis"]
    if node.attrs["coerce_2d"]:
        flat = x.reshape(math.prod(x.shape[:axis]), -1)
        return torch.softmax(flat, dim=1).reshape(x.shape)
    return torch.softmax(x, dim=axis)
