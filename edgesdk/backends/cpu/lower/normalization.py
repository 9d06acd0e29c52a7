"""The cpu lowering of the normalization family (``edgesdk/ops/normalization.py``): BatchNormalization,
LayerNormalization, InstanceNormalization, Softmax, LogSoftmax and LRN."""
from __future__ import annotations

import math
from functools import partial

import numpy as np

from ....graph import Node
from ....ops.normalization import softmax_view
from ....runtime.precision import round_constant
from ..program import NCHW, NHWC, Builder, Runner, Views
from .base import NO_ACT, fused_act, native_kernels, fallback, lowering

# Where each logical NCHW axis sits in NHWC storage (N, H, W, C).
_NHWC_POSITION = (0, 3, 1, 2)


@lowering("BatchNormalization")
def batch_norm(node: Node, b: Builder) -> None:
    """Per-channel x * scale + shift (two native passes), for BatchNorms the passes kept."""
    k = native_kernels()
    shape = b.shape(node.inputs[0])
    scale_, bias_, mean, var = (np.asarray(b.graph.const(n), dtype=np.float32) if b.graph.const(n) is not None else None
                                for n in node.inputs[1:5])
    if len(shape) not in (2, 4) or any(p is None for p in (scale_, bias_, mean, var)):
        return fallback(node, b, "BatchNormalization with non-constant statistics or rank other than 2 and 4")
    inv_std = scale_ / np.sqrt(var + np.float32(node.attrs["epsilon"]))
    scale = np.ascontiguousarray(inv_std, dtype=np.float32)
    shift = np.ascontiguousarray(bias_ - mean * inv_std, dtype=np.float32)
    x = b.read(node.inputs[0], NHWC)
    y = b.write(node.outputs[0], NHWC)
    act, threads = fused_act(node), b.threads_for(node)

    def bind(v: Views) -> Runner:
        return k.steps.chain([k.steps.binary("mul", v[x], scale, v[y], False, *NO_ACT, threads),
                              k.steps.binary("add", v[y], shift, v[y], False, *act, threads)])
    b.emit(node, "native", bind, "per-channel scale and shift")


# -- layer and instance norms -------------------------------------------------------------------
def _affine_vector(b: Builder, name: str | None) -> np.ndarray | None:
    """A constant scale or bias flattened for the kernels, rounded as the session stores weights."""
    if name is None:
        return None
    value = np.asarray(b.graph.const(name), dtype=np.float32).reshape(-1)
    return np.ascontiguousarray(round_constant(value, b.precision))


@lowering("LayerNormalization")
def layer_norm(node: Node, b: Builder) -> None:
    """One native pass per row of the input seen as (rows, normalised elements)."""
    if any(b.is_activation(name) for name in node.inputs[1:]):
        return fallback(node, b, "LayerNormalization with a scale or bias computed at run time")
    shape = b.shape(node.inputs[0])
    axis = node.attrs["axis"]
    rows, cols = math.prod(shape[:axis]), math.prod(shape[axis:])
    scale, bias = _affine_vector(b, node.inputs[1]), _affine_vector(b, node.input(2))
    x, y = b.read(node.inputs[0], NCHW), b.write(node.outputs[0], NCHW)
    eps, threads = node.attrs["epsilon"], b.threads_for(node)
    b.emit(node, "native", lambda v: partial(native_kernels().layer_norm, v[x].reshape(rows, cols), scale, bias,
                                             v[y].reshape(rows, cols), eps, threads), "mean and variance per row")


@lowering("InstanceNormalization")
def instance_norm(node: Node, b: Builder) -> None:
    """One native pass per (image, channel) over the spatial elements, on the NCHW order."""
    if any(b.is_activation(name) for name in node.inputs[1:]):
        return fallback(node, b, "InstanceNormalization with a scale or bias computed at run time")
    shape = b.shape(node.inputs[0])
    view = (shape[0], shape[1], math.prod(shape[2:]))
    scale, bias = _affine_vector(b, node.inputs[1]), _affine_vector(b, node.inputs[2])
    x, y = b.read(node.inputs[0], NCHW), b.write(node.outputs[0], NCHW)
    eps, threads = node.attrs["epsilon"], b.threads_for(node)
    b.emit(node, "native", lambda v: partial(native_kernels().instance_norm, v[x].reshape(view), scale, bias,
                                             v[y].reshape(view), eps, threads), "mean and variance per channel")


# -- softmax ------------------------------------------------------------------------------------
@lowering("Softmax", "LogSoftmax")
def softmax(node: Node, b: Builder) -> None:
    """Along one axis of the tensor as stored: a 4-D tensor kept NHWC is not converted for a
    softmax over one axis (the axis moves, the kernel strides over it); the opset < 13 form
    (every axis from ``axis`` on) reads the NCHW order. A softmax over contiguous rows (the last
    axis) takes the two-pass row kernel."""
    shape = b.shape(node.inputs[0])
    stored = b.stored_layout(node.inputs[0])
    if stored == NHWC and not node.attrs["coerce_2d"]:
        x, y = b.read(node.inputs[0], NHWC), b.write(node.outputs[0], NHWC)
        storage, axis = x.storage_shape, _NHWC_POSITION[node.attrs["axis"]]
        outer, length, inner = math.prod(storage[:axis]), storage[axis], math.prod(storage[axis + 1:])
        where = "channels innermost" if axis == 3 else f"stored axis {axis}"
    else:
        x, y = b.read(node.inputs[0], NCHW), b.write(node.outputs[0], NCHW)
        outer, length, inner = softmax_view(node, shape)
        where = "rows" if inner == 1 else f"axis of stride {inner}"
    log, threads = node.op == "LogSoftmax", b.threads_for(node)
    k = native_kernels()
    if inner == 1 and not log:
        b.emit(node, "native", lambda v: partial(k.softmax, v[x].reshape(outer, length), v[y].reshape(outer, length),
                                                 threads), f"two-pass softmax over {where}")
        return
    b.emit(node, "native", lambda v: partial(k.softmax, v[x].reshape(-1), v[y].reshape(-1), outer, length, inner,
                                             log, threads), f"{node.op.lower()} over {where}")


# -- LRN ----------------------------------------------------------------------------------------
@lowering("LRN", reference_only=True)
def lrn(node: Node, b: Builder) -> None:
    fallback(node, b, "no native LRN kernel")
