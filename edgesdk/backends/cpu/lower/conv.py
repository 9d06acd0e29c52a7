"""The cpu lowering of the conv family (``edgesdk/ops/conv.py``): Conv: dense (indirect GEMM), depthwise, grouped, k-means clustered and NNM weights."""
from __future__ import annotations

from functools import partial

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ....compress.encodings import NNM, Clustered
from ....graph import Node
from .. import weights as W
from ..program import NHWC, Builder, Runner, Slot, Views
from .base import POST_PASS_ACTIVATIONS, NO_ACT, fused_act, native_kernels, then_activate, fallback, lowering


# ConvPlan.algorithm -> the step note (profiles and placements show it).
_CONV_KIND = {"gemm": "1x1 GEMM", "indirect": "indirect conv", "winograd43": "winograd F(4x4,3x3) conv"}


def _conv_geometry(node: Node) -> dict:
    a = node.attrs
    return {"stride": tuple(a["strides"]), "dilation": tuple(a["dilations"]), "pads": list(a["pads"])}


@lowering("Conv")
def conv(node: Node, b: Builder) -> None:
    g, k = b.graph, native_kernels()
    x_name, w_name = node.inputs[0], node.inputs[1]
    wt = g.tensors[w_name]
    if not wt.is_constant or len(b.shape(x_name)) != 4:
        return fallback(node, b, "Conv with non-constant weights or not 2-D")
    group = node.attrs["group"]
    channels = b.shape(x_name)[1]
    out_channels = wt.shape[0]
    bias = W.bias_vector(g, node.input(2), out_channels, b.precision)
    enc = wt.encoding
    if group == 1 and isinstance(enc, Clustered):
        return _conv_clustered(node, b, enc, bias)
    if group == 1 and isinstance(enc, NNM):
        return _conv_nnm(node, b, enc, bias)
    if group == channels and wt.shape[1] == 1 and group > 1:
        return _conv_depthwise(node, b, bias)
    if group > 1:
        return _conv_grouped(node, b, bias)
    matrix, how = W.stored_matrix(wt)
    packed = W.pack_dense(k, W.conv_columns(matrix), bias, b.precision)
    x = b.read(x_name, NHWC)
    y = b.write(node.outputs[0], NHWC)
    geometry = _conv_geometry(node)
    # A ConvPlan caches per-call state (indirection buffer, fp16 input copy): one per arena. It
    # picks Winograd F(4x4, 3x3) for the 3x3 stride-1 layers it wins on (EDGESDK_CPU_WINOGRAD=0:
    # never; cpu_native/src/kernels/operators.h); the first plan transforms the weights, once.
    new_plan = partial(k.ConvPlan, packed, list(x.storage_shape), tuple(wt.shape[2:]), **geometry)
    act, threads = fused_act(node), b.threads_for(node)
    plan = new_plan()
    kind = f"{_CONV_KIND[plan.algorithm]}, {how}, {' + '.join(plan.kernel_names)}"
    if act[0] in POST_PASS_ACTIVATIONS and out_channels < packed.nr:
        # Narrow outputs (LeNet's first conv): the kernel's per-tile activation pass would run
        # on rows of a few channels; one pass over the whole output is cheaper.
        b.emit(node, "native", lambda v: then_activate(partial(new_plan().run, v[x], v[y], *NO_ACT, threads), v[y],
                                                         act, threads), f"{kind}, activation as a separate pass")
        return
    b.emit(node, "native", lambda v: partial(new_plan().run, v[x], v[y], *act, threads), kind)


def _conv_depthwise(node: Node, b: Builder, bias: np.ndarray | None) -> None:
    k = native_kernels()
    wt = b.graph.tensors[node.inputs[1]]
    matrix, how = W.stored_matrix(wt)
    dw = W.as_fp32(matrix[:, 0].transpose(1, 2, 0), b.precision)  # (KH, KW, C*multiplier)
    x = b.read(node.inputs[0], NHWC)
    y = b.write(node.outputs[0], NHWC)
    geometry, act, threads = _conv_geometry(node), fused_act(node), b.threads_for(node)
    b.emit(node, "native", lambda v: partial(
        k.depthwise_conv, v[x], dw, bias, v[y], geometry["stride"], geometry["dilation"], geometry["pads"],
        *act, threads, fp16_arith=b.precision == "fp16"), f"depthwise, {how}")


def _conv_grouped(node: Node, b: Builder, bias: np.ndarray | None) -> None:
    """Groups as separate convolutions over channel slices, copied in and out of scratch."""
    k = native_kernels()
    wt = b.graph.tensors[node.inputs[1]]
    group = node.attrs["group"]
    matrix, how = W.stored_matrix(wt)
    n, c, h, w_ = b.shape(node.inputs[0])
    _, o, oh, ow = b.shape(node.outputs[0])
    cg, og = c // group, o // group
    x = b.read(node.inputs[0], NHWC)
    y = b.write(node.outputs[0], NHWC)
    xg = b.scratch((n, h, w_, cg))
    yg = b.scratch((n, oh, ow, og))
    geometry = _conv_geometry(node)
    new_plans = []  # ConvPlans are made per arena (see conv)
    for i in range(group):
        part_bias = None if bias is None else np.ascontiguousarray(bias[i * og:(i + 1) * og])
        packed = W.pack_dense(k, W.conv_columns(matrix[i * og:(i + 1) * og]), part_bias, b.precision)
        # (the grouped path stays on the direct kernels: algorithm="direct")
        new_plans.append(partial(k.ConvPlan, packed, [n, h, w_, cg], tuple(wt.shape[2:]), **geometry,
                                 algorithm="direct"))
    act, threads = fused_act(node), b.threads_for(node)

    def bind(v: Views) -> Runner:
        xs, ys, xbuf, ybuf = v[x], v[y], v[xg], v[yg]
        plans = [new_plan() for new_plan in new_plans]
        parts = [(xs[..., i * cg:(i + 1) * cg], plan, ys[..., i * og:(i + 1) * og]) for i, plan in enumerate(plans)]

        def run() -> None:
            for x_part, plan, y_part in parts:
                np.copyto(xbuf, x_part)
                plan.run(xbuf, ybuf, *act, threads)
                np.copyto(y_part, ybuf)
        return run
    b.emit(node, "native", bind, f"{group} groups, {how}")


class _Im2col:
    """(pixels, KH*KW*C) rows of NHWC windows for the clustered GEMM; padding goes through a
    zero-bordered copy of the input per arena (its border is written once)."""

    def __init__(self, node: Node, b: Builder, x: Slot) -> None:
        a = node.attrs
        n, h, w, c = x.storage_shape
        (self.kh, self.kw), (self.sh, self.sw), (self.dh, self.dw) = (
            tuple(b.graph.tensors[node.inputs[1]].shape[2:]), a["strides"], a["dilations"])
        self.top, self.left, bottom, right = a["pads"]
        _, _, self.oh, self.ow = b.shape(node.outputs[0])
        self.padded_shape = (n, h + self.top + bottom, w + self.left + right, c) if any(a["pads"]) else None
        self.cols = b.scratch((n * self.oh * self.ow, self.kh * self.kw * c))
        self.x, self.h, self.w = x, h, w

    def bind(self, v: Views) -> tuple[Runner, np.ndarray]:
        src, cols = v[self.x], v[self.cols]
        if self.padded_shape is not None:
            padded = np.zeros(self.padded_shape, np.float32)  # per arena: runs in flight write it
            interior = padded[:, self.top:self.top + self.h, self.left:self.left + self.w]
            fill = partial(np.copyto, interior, src)
            src = padded
        else:
            fill = None
        n, _, _, c = src.shape
        s0, s1, s2, s3 = src.strides
        windows = as_strided(src, (n, self.oh, self.ow, self.kh, self.kw, c),
                             (s0, s1 * self.sh, s2 * self.sw, s1 * self.dh, s2 * self.dw, s3), writeable=False)
        gather = partial(np.copyto, cols.reshape(windows.shape), windows)

        def run() -> None:
            if fill is not None:
                fill()
            gather()
        return run, cols


def _conv_clustered(node: Node, b: Builder, enc: Clustered, bias: np.ndarray | None) -> None:
    k = native_kernels()
    kernel = tuple(b.graph.tensors[node.inputs[1]].shape[2:])
    packed = W.pack_clustered(k, enc, bias, b.precision, conv_kernel=kernel)
    x = b.read(node.inputs[0], NHWC)
    y = b.write(node.outputs[0], NHWC)
    a = node.attrs
    direct = kernel == (1, 1) and tuple(a["strides"]) == (1, 1) and not any(a["pads"])
    im2col = None if direct else _Im2col(node, b, x)
    act, threads, o = fused_act(node), b.threads_for(node), enc.rows

    def bind(v: Views) -> Runner:
        out = v[y].reshape(-1, o)
        if im2col is None:
            return partial(k.clustered_gemm, v[x].reshape(-1, v[x].shape[-1]), packed, out, *act, threads)
        gather, cols = im2col.bind(v)
        gemm = partial(k.clustered_gemm, cols, packed, out, *act, threads)

        def run() -> None:
            gather()
            gemm()
        return run
    b.emit(node, "native", bind, f"clustered {enc.describe()} GEMM{'' if direct else ' over im2col'}")


def _conv_nnm(node: Node, b: Builder, enc: NNM, bias: np.ndarray | None) -> None:
    """NNM: the K' centroid filters' convolution, then out[k] = sum over groups of the centroid
    channel assignment[g, k] picks (native gather-accumulate, bias and activation fused)."""
    k = native_kernels()
    x = b.read(node.inputs[0], NHWC)
    y = b.write(node.outputs[0], NHWC)
    n, oh, ow, o = y.storage_shape
    geometry = _conv_geometry(node)
    assign = W.nnm_assignment(enc)
    if enc.mode == "shared":
        packed = W.pack_dense(k, W.conv_columns(enc.centroids), None, b.precision)
        new_plan = partial(k.ConvPlan, packed, list(x.storage_shape), tuple(enc.shape[2:]), **geometry,
                           algorithm="direct")  # the compressed paths stay as they are
        cent = b.scratch((n, oh, ow, enc.centroids.shape[0]))
        centroid_conv = lambda v: partial(new_plan().run, v[x], v[cent], *NO_ACT, b.threads_for(node))  # noqa: E731
    else:
        dw = W.nnm_depthwise_weights(enc, b.precision)
        cent = b.scratch((n, oh, ow, dw.shape[-1]))
        centroid_conv = lambda v: partial(  # noqa: E731
            k.depthwise_conv, v[x], dw, None, v[cent], geometry["stride"], geometry["dilation"],
            geometry["pads"], *NO_ACT, b.threads_for(node))
    act, threads = fused_act(node), b.threads_for(node)

    def bind(v: Views) -> Runner:
        first = centroid_conv(v)
        gather = partial(k.nnm_gather, v[cent].reshape(n * oh * ow, -1), assign, bias, v[y].reshape(-1, o),
                         *act, threads)

        def run() -> None:
            first()
            gather()
        return run
    b.emit(node, "native", bind, f"{enc.describe()}: centroid conv + gather")


# -- Gemm / MatMul ------------------------------------------------------------------------------
