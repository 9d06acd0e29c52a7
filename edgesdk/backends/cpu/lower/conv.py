"""The cpu lowering of the conv family (``edgesdk/ops/conv.py``): Conv: dense (indirect GEMM), depthwise, grouped, k-means clustered and NNM weights."""
from __future__ import annotations

import os
from functools import partial

import numpy as np

from ....compress.encodings import NNM, Clustered, HuffmanBlocks, LQBinary, SparseCSR
from ....graph import Node
from ....native import active_isa
from .. import weights as W
from ..program import NCHW, NHWC, Builder, Runner, Views, reads_chw
from .base import POST_PASS_ACTIVATIONS, NO_ACT, fused_act, native_kernels, then_activate, fallback, lowering
from .lq import bitwise_layer, conv_bitwise


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
    if bitwise_layer(node, b):
        return conv_bitwise(node, b, wt.encoding, bias)
    if group == 1 and isinstance(wt.encoding, HuffmanBlocks) and _streams_huffman(node, b, wt.encoding):
        return _conv_huffman(node, b, wt.encoding, bias)
    enc = wt.encoding
    if isinstance(enc, LQBinary) or isinstance(enc, HuffmanBlocks) and (enc.layout == "dense" or tuple(enc.shape[2:]) == (1, 1)):
        enc = W.uncoded(enc)  # clustered indices, or a CSR the sparse kernel may take; else decoded below
    if group == 1 and isinstance(enc, Clustered):
        return _conv_clustered(node, b, enc, bias)
    if group == 1 and isinstance(enc, NNM):
        return _conv_nnm(node, b, enc, bias)
    if group == 1 and isinstance(enc, SparseCSR) and _runs_sparse(node, enc):
        return _conv_sparse(node, b, enc, bias)
    if group == channels and wt.shape[1] == 1 and group > 1:
        return _conv_depthwise(node, b, bias)
    if group > 1:
        return _conv_grouped(node, b, bias)
    matrix, how = W.stored_matrix(wt)
    packed = W.pack_conv(k, matrix, bias, b.precision)
    x = b.read(x_name, NHWC)
    act, threads = fused_act(node), b.threads_for(node)
    separate_act = act[0] in POST_PASS_ACTIVATIONS and out_channels < packed.nr
    y = b.write(node.outputs[0], NHWC) if separate_act else b.write_nhwc_part(node.outputs[0])
    geometry = _conv_geometry(node)
    # A ConvPlan caches per-call state (indirection buffer, fp16 input copy): one per arena. It
    # picks Winograd F(4x4, 3x3) for the 3x3 stride-1 layers it wins on (EDGESDK_CPU_WINOGRAD=0:
    # never; cpu_native/src/kernels/operators.h); the first plan transforms the weights, once.
    new_plan = partial(k.ConvPlan, packed, list(x.storage_shape), tuple(wt.shape[2:]), **geometry)
    plan = new_plan()
    kind = f"{_CONV_KIND[plan.algorithm]}, {how}, {' + '.join(plan.kernel_names)}"
    if y.is_channel_slice:
        kind += ", written into its Concat's channels"
    if separate_act:
        # Narrow outputs (LeNet's first conv): the kernel's per-tile activation pass would run
        # on rows of a few channels; one pass over the whole output is cheaper.
        b.emit(node, "native", lambda v: then_activate(new_plan().step(v[x], v[y], *NO_ACT, threads), v[y],
                                                         act, threads), f"{kind}, activation as a separate pass")
        return
    b.emit(node, "native", lambda v: new_plan().step(v[x], v[y], *act, threads), kind)


# -- sparse 1x1 convolutions in CHW ----------------------------------------------------------------
# The sparsity from which the sparse kernel beats the dense 1x1 GEMM on a level, measured on
# MobileNetV2's pointwise shapes at 1 thread (`kernel_bench --sparse`, README: Sparse inference).
# Levels not listed inherit the one below them (avxvnni runs avx2's fp32 kernels, and so on).
SPARSE_CROSSOVER = {"scalar": 0.5, "avx2": 0.6, "avx512": 0.7, "neon": 0.7}
_SPARSE_LEVEL = {"avxvnni": "avx2", "avx512vnni": "avx512", "avx512amx": "avx512", "neonfp16": "neon",
                 "neondot": "neon"}


def sparse_crossover(isa: str | None = None) -> float:
    """The sparsity at or above which a pruned 1x1 convolution runs sparse on ``isa`` (the
    running level by default). EDGESDK_CPU_SPARSE=0 never runs sparse, =1 always does (every
    qualifying pruned layer, for tests and measurements)."""
    mode = os.environ.get("EDGESDK_CPU_SPARSE", "auto")
    if mode == "0":
        return float("inf")
    if mode == "1":
        return 0.0
    isa = isa or active_isa()
    return SPARSE_CROSSOVER[_SPARSE_LEVEL.get(isa, isa)]


def _sparsity(enc: SparseCSR | HuffmanBlocks) -> float:
    return 1.0 - enc.nnz / max(1, enc.rows * enc.cols)


def _runs_sparse(node: Node, enc: SparseCSR) -> bool:
    """A pruned float 1x1 convolution with stride 1 and no padding, sparse enough for this level."""
    a = node.attrs
    return (tuple(enc.shape[2:]) == (1, 1) and tuple(a["strides"]) == (1, 1) and not any(a["pads"])
            and enc.dtype == np.float32 and _sparsity(enc) >= sparse_crossover())


def _conv_sparse(node: Node, b: Builder, enc: SparseCSR, bias: np.ndarray | None) -> None:
    """Y (K, HW) = W (K, C) X (C, HW) per image, W from the CSR stream, in CHW layout: the output
    stays NCHW, and the depthwise / pooling / elementwise steps that follow keep it there."""
    k = native_kernels()
    packed = k.pack_sparse_conv1x1(**W.sparse_operands(enc, b.precision), bias=bias, input_channels=enc.cols)
    x = b.read(node.inputs[0], NCHW)
    y = b.write(node.outputs[0], NCHW)
    act, threads = fused_act(node), b.threads_for(node)
    note = (f"sparse 1x1 (CHW), {enc.describe()}, {packed.value_kind} values, blocks of {packed.block}, "
            f"{packed.kernel_name}{W.coding_note(b.graph.tensors[node.inputs[1]])}")
    b.emit(node, "native", lambda v: partial(k.sparse_conv1x1, v[x], packed, v[y], *act, threads), note)


# -- Huffman-coded pruned 1x1 convolutions, decoded a block row at a time ---------------------------
# Decoding costs ~5 ns per entry (one thread, avx512) and the sparse kernel ~2 ns per entry at 7x7
# pixels: from this many pixels per call (batch x H x W) the decode is at most ~10% of the layer's
# time (`tools/bench_compressed_cpu.py huffman`: 6-10% at 28x28, 22-28% at 14x14, 48-62% at 7x7).
# Below it the session decodes the blocks once, at creation, into the packed sparse form.
HUFFMAN_STREAM_PIXELS = 28 * 28


def huffman_mode() -> str:
    """EDGESDK_CPU_HUFFMAN: ``auto`` (stream where the decode is cheap: HUFFMAN_STREAM_PIXELS),
    ``stream`` (every qualifying layer: the least memory) or ``load`` (decode at creation)."""
    mode = os.environ.get("EDGESDK_CPU_HUFFMAN", "auto")
    return mode if mode in ("auto", "stream", "load") else "auto"


def _streams_huffman(node: Node, b: Builder, enc: HuffmanBlocks) -> bool:
    """A pruned 1x1 stride-1 float convolution that would run sparse (the crossover), in an fp32
    session (fp16 sessions round the values: the uncoded path does), with enough pixels."""
    a, mode = node.attrs, huffman_mode()
    if mode == "load" or b.precision != "fp32" or enc.layout != "sparse":
        return False
    if tuple(enc.shape[2:]) != (1, 1) or tuple(a["strides"]) != (1, 1) or any(a["pads"]):
        return False
    if _sparsity(enc) < sparse_crossover():
        return False
    n, _, h, w = b.shape(node.inputs[0])
    return mode == "stream" or n * h * w >= HUFFMAN_STREAM_PIXELS


def _conv_huffman(node: Node, b: Builder, enc: HuffmanBlocks, bias: np.ndarray | None) -> None:
    """The sparse 1x1 convolution in CHW fed block row by block row from the Huffman stream
    (HuffmanConv1x1: each thread decodes a block row into its workspace, then multiplies it)."""
    from ..huffman import prepare_conv1x1
    conv = prepare_conv1x1(enc, bias)
    x = b.read(node.inputs[0], NCHW)
    y = b.write(node.outputs[0], NCHW)
    act, threads = fused_act(node), b.threads_for(node)
    note = (f"sparse 1x1 (CHW) from Huffman blocks decoded per block row, {enc.describe()}, "
            f"{enc.block_rows}x{enc.block_cols} blocks, {conv.kernel_name}")
    b.emit(node, "native", lambda v: partial(conv.run, v[x], v[y], *act, threads), note)


def _conv_depthwise(node: Node, b: Builder, bias: np.ndarray | None) -> None:
    k = native_kernels()
    wt = b.graph.tensors[node.inputs[1]]
    matrix, how = W.stored_matrix(wt)
    geometry, act, threads = _conv_geometry(node), fused_act(node), b.threads_for(node)
    if reads_chw(b, node.inputs[0]):
        kernel = k.depthwise_chw_kernel(*wt.shape[2:], geometry["stride"], geometry["dilation"], geometry["pads"],
                                        wt.shape[0] // b.shape(node.inputs[0])[1])
        if "generic" not in kernel:  # the scalar generic kernel loses to a conversion + NHWC
            return _conv_depthwise_chw(node, b, bias, W.as_fp32(matrix[:, 0], b.precision), how, kernel)
    dw = W.as_fp32(matrix[:, 0].transpose(1, 2, 0), b.precision)  # (KH, KW, C*multiplier)
    x = b.read(node.inputs[0], NHWC)
    y = b.write(node.outputs[0], NHWC)
    b.emit(node, "native", lambda v: k.steps.depthwise_conv(
        v[x], dw, bias, v[y], geometry["stride"], geometry["dilation"], geometry["pads"],
        *act, threads, fp16_arith=b.precision == "fp16"), f"depthwise, {how}")


def _conv_depthwise_chw(node: Node, b: Builder, bias: np.ndarray | None, dw: np.ndarray, how: str,
                        kernel: str) -> None:
    """Depthwise convolution on CHW planes (weights (C*multiplier, KH, KW)), NCHW in and out."""
    k = native_kernels()
    x = b.read(node.inputs[0], NCHW)
    y = b.write(node.outputs[0], NCHW)
    geometry, act, threads = _conv_geometry(node), fused_act(node), b.threads_for(node)
    b.emit(node, "native", lambda v: partial(
        k.depthwise_conv_chw, v[x], dw, bias, v[y], geometry["stride"], geometry["dilation"], geometry["pads"],
        *act, threads), f"depthwise (CHW), {how}, {kernel}")


def _conv_grouped(node: Node, b: Builder, bias: np.ndarray | None) -> None:
    """Groups as separate convolutions, each reading and writing its channel slices in place
    (ConvPlan.run takes a pixel stride)."""
    k = native_kernels()
    wt = b.graph.tensors[node.inputs[1]]
    group = node.attrs["group"]
    matrix, how = W.stored_matrix(wt)
    n, c, h, w_ = b.shape(node.inputs[0])
    o = b.shape(node.outputs[0])[1]
    cg, og = c // group, o // group
    x = b.read(node.inputs[0], NHWC)
    y = b.write(node.outputs[0], NHWC)
    geometry = _conv_geometry(node)
    new_plans = []  # ConvPlans are made per arena (see conv)
    for i in range(group):
        part_bias = None if bias is None else np.ascontiguousarray(bias[i * og:(i + 1) * og])
        packed = W.pack_conv(k, matrix[i * og:(i + 1) * og], part_bias, b.precision)
        # (the grouped path stays on the direct kernels: algorithm="direct")
        new_plans.append(partial(k.ConvPlan, packed, [n, h, w_, cg], tuple(wt.shape[2:]), **geometry,
                                 algorithm="direct"))
    act, threads = fused_act(node), b.threads_for(node)

    def bind(v: Views) -> Runner:
        xs, ys = v[x], v[y]
        return k.steps.chain([new_plan().step(xs[..., i * cg:(i + 1) * cg], ys[..., i * og:(i + 1) * og], *act, threads)
                              for i, new_plan in enumerate(new_plans)])
    b.emit(node, "native", bind, f"{group} groups, {how}")


def _conv_clustered(node: Node, b: Builder, enc: Clustered, bias: np.ndarray | None) -> None:
    """Clustered weights stay indices: 1x1 stride-1 layers run the clustered GEMM on the input
    pixels, the others a ClusteredConvPlan (an indirection buffer into the input, one decoded
    weight panel per thread: no padded copy, no im2col)."""
    k = native_kernels()
    kernel = tuple(b.graph.tensors[node.inputs[1]].shape[2:])
    packed = W.pack_clustered(k, enc, bias, b.precision, conv_kernel=kernel)
    x = b.read(node.inputs[0], NHWC)
    y = b.write(node.outputs[0], NHWC)
    a = node.attrs
    direct = kernel == (1, 1) and tuple(a["strides"]) == (1, 1) and not any(a["pads"])
    act, threads, o = fused_act(node), b.threads_for(node), enc.rows
    if direct:
        b.emit(node, "native", lambda v: k.steps.clustered_gemm(v[x].reshape(-1, v[x].shape[-1]), packed,
                                                        v[y].reshape(-1, o), *act, threads),
               f"clustered {enc.describe()} GEMM{W.coding_note(b.graph.tensors[node.inputs[1]])}")
        return
    new_plan = partial(k.ClusteredConvPlan, packed, list(x.storage_shape), kernel, **_conv_geometry(node))
    how = _CONV_KIND["winograd43" if new_plan().is_winograd else "indirect"]
    b.emit(node, "native", lambda v: new_plan().step(v[x], v[y], *act, threads),
           f"clustered {enc.describe()} {how}{W.coding_note(b.graph.tensors[node.inputs[1]])}")


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
        packed = W.pack_conv(k, enc.centroids, None, b.precision)
        new_plan = partial(k.ConvPlan, packed, list(x.storage_shape), tuple(enc.shape[2:]), **geometry,
                           algorithm="direct")  # the compressed paths stay as they are
        cent = b.scratch((n, oh, ow, enc.centroids.shape[0]))
        centroid_conv = lambda v: new_plan().step(v[x], v[cent], *NO_ACT, b.threads_for(node))  # noqa: E731
    else:
        dw = W.nnm_depthwise_weights(enc, b.precision)
        cent = b.scratch((n, oh, ow, dw.shape[-1]))
        centroid_conv = lambda v: k.steps.depthwise_conv(  # noqa: E731
            v[x], dw, None, v[cent], geometry["stride"], geometry["dilation"],
            geometry["pads"], *NO_ACT, b.threads_for(node))
    act, threads = fused_act(node), b.threads_for(node)

    def bind(v: Views) -> Runner:
        gather = k.steps.nnm_gather(v[cent].reshape(n * oh * ow, -1), assign, bias, v[y].reshape(-1, o), *act, threads)
        return k.steps.chain([centroid_conv(v), gather])
    b.emit(node, "native", bind, f"{enc.describe()}: centroid conv + gather")


# -- Gemm / MatMul ------------------------------------------------------------------------------
