"""The cpu lowering of the quantize family (``edgesdk/ops/quantize.py``): QuantizeLinear and
DequantizeLinear per tensor as native passes in the tensor's stored layout (numpy where the dtypes
have no kernel), per axis on the reference kernel, and the integer ops."""
from __future__ import annotations

import math
from functools import partial

import numpy as np

from ....graph import Node
from ....ops.quantize import average_multipliers, channel_multipliers, clamp_range, dtype_range, mul_multiplier, \
    rescale_params, scalar, zero_point
from ....quant import fixedpoint as fx
from ..program import NCHW, NHWC, Builder, Runner, Slot, Views
from .base import fallback, lowering, native_kernels
from .pool import swept_pads


def _runtime_per_tensor(b: Builder, node: Node) -> bool:
    return b.graph.const(node.inputs[0]) is None and \
        b.graph.const(node.inputs[1]).size == 1 and (node.input(2) is None or b.graph.const(node.inputs[2]).size == 1)


def _why_reference(b: Builder, node: Node) -> str:
    """Why a (De)QuantizeLinear runs on the reference kernel: per-axis, or a constant input (one
    import folded, a QDQ weight, with optimize=False: the passes would fold the pair)."""
    return f"constant {node.op} input" if b.graph.const(node.inputs[0]) is not None else f"per-axis {node.op}"


# Integer ops whose kernels read NHWC (their lowerings below: b.read(..., NHWC)).
CHANNELS_LAST_READERS = frozenset({"QLinearConv", "QLinearAveragePool", "QLinearGlobalAveragePool", "MaxPool"})


def _read_channels_last(b: Builder, name: str) -> bool:
    return any(n.op in CHANNELS_LAST_READERS for n in b.readers(name))


@lowering("QuantizeLinear")
def quantize_linear(node: Node, b: Builder) -> None:
    if not _runtime_per_tensor(b, node):
        return fallback(node, b, _why_reference(b, node))
    scale = np.float32(scalar(b.graph.const(node.inputs[1])))
    zp = np.float32(zero_point(b.graph.const(node.input(2))))
    out_dtype = b.graph.tensors[node.outputs[0]].dtype
    lo, hi = dtype_range(out_dtype)
    x = b.read_stored(node.inputs[0])
    native = b.graph.tensors[node.inputs[0]].dtype == np.float32 and \
        np.dtype(out_dtype) in (np.dtype(np.uint8), np.dtype(np.int8))
    if native and x.layout == NCHW and len(x.shape) == 4 and _read_channels_last(b, node.outputs[0]):
        # A float NCHW input quantized for NHWC integer kernels: codes written channels last in
        # one pass (quantize a block of each plane, interleave) instead of a second pass that
        # moves the bytes (numpy's strided copy took 3x the quantization itself on MobileNetV2).
        k, threads = native_kernels(), b.threads_for(node)
        y = b.write(node.outputs[0], NHWC)
        b.emit(node, "native", lambda v: partial(k.quantize_linear_nhwc, v[x], float(scale), float(zp), v[y], threads),
               f"per-tensor, into NHWC, {k.quantize_linear_kernel()}")
        return
    y = b.write(node.outputs[0], x.layout)
    if native:
        # The native kernel computes what the numpy pass below does, bit for bit (qu8_ukernels.h,
        # Qu8QuantizeParams): fp32 division, halves to even, + zero point, NaN -> the lowest code.
        k, threads = native_kernels(), b.threads_for(node)
        b.emit(node, "native", lambda v: partial(k.quantize_linear, v[x], float(scale), float(zp), v[y], threads),
               f"per-tensor, {k.quantize_linear_kernel()}")
        return
    scratch = b.scratch(b.shape(node.inputs[0]))

    def bind(v: Views) -> Runner:
        xs, out, tmp = v[x], v[y], v[scratch].reshape(v[x].shape)

        def run() -> None:
            # The reference's arithmetic: float32 division, round half to even, then + zero point.
            np.divide(xs, scale, out=tmp)
            np.rint(tmp, out=tmp)
            np.add(tmp, zp, out=tmp)
            np.nan_to_num(tmp, copy=False, nan=lo)  # NaN: the lowest code, as ONNX Runtime
            np.clip(tmp, lo, hi, out=tmp)
            out[...] = tmp
        return run
    b.emit(node, "numpy", bind, "per-tensor")


@lowering("DequantizeLinear")
def dequantize_linear(node: Node, b: Builder) -> None:
    if not _runtime_per_tensor(b, node):
        return fallback(node, b, _why_reference(b, node))
    scale = np.float32(scalar(b.graph.const(node.inputs[1])))
    zp = np.int32(zero_point(b.graph.const(node.input(2))))
    x = b.read_stored(node.inputs[0])
    y = b.write(node.outputs[0], x.layout)
    in_dtype, out_dtype = (np.dtype(b.graph.tensors[n].dtype) for n in (node.inputs[0], node.outputs[0]))
    if in_dtype in (np.dtype(np.uint8), np.dtype(np.int8)) and out_dtype == np.dtype(np.float32):
        # One pass where numpy makes two (the subtraction's float copy, then the multiply): the
        # same fp32 arithmetic, bit for bit (qu8_ukernels.h, Qu8DequantizeParams).
        k, threads = native_kernels(), b.threads_for(node)
        b.emit(node, "native", lambda v: partial(k.dequantize_linear, v[x], float(scale), int(zp), v[y], threads),
               f"per-tensor, {k.dequantize_linear_kernel()}")
        return

    def bind(v: Views) -> Runner:
        xs, out = v[x], v[y]

        def run() -> None:
            np.subtract(xs, zp, out=out, dtype=np.float32)
            np.multiply(out, scale, out=out)
        return run
    b.emit(node, "numpy", bind, "per-tensor")


# -- integer ops -----------------------------------------------------------------------------------
# The native int8 kernels (cpu_native/src/kernels/*qu8*) take uint8 activations and int8 weights
# of zero point 0 (edgesdk.quant.qdq moves int8 activations to uint8; PTQ writes symmetric
# weights): anything else runs on the reference kernel, which computes the same integers.
def _uint8(b: Builder, *names: str | None) -> bool:
    return all(b.graph.tensors[n].dtype == np.uint8 for n in names if n)


def _symmetric(b: Builder, zp_name: str | None) -> bool:
    zp = b.graph.const(zp_name) if zp_name else None
    return zp is None or not np.any(zp)


def _requant(b: Builder, node: Node, x_scale: str, w_scale: str, y_scale: str, channels: int):
    return channel_multipliers(scalar(b.graph.const(x_scale)), b.graph.const(w_scale), scalar(b.graph.const(y_scale)),
                               channels)


def _clamp(node: Node) -> tuple[int, int]:
    return clamp_range(node, np.dtype(np.uint8))


def _int32_bias(b: Builder, name: str | None) -> np.ndarray | None:
    return None if not name else np.ascontiguousarray(b.graph.const(name).astype(np.int32).reshape(-1))


@lowering("QLinearConv")
def qlinear_conv(node: Node, b: Builder) -> None:
    g, k = b.graph, native_kernels()
    i = node.inputs
    if not (_uint8(b, i[0], node.outputs[0]) and g.tensors[i[3]].dtype == np.int8 and _symmetric(b, node.input(5))):
        return fallback(node, b, "int8 activations or asymmetric weights")
    w = g.const(i[3])
    group, channels = node.attrs["group"], b.shape(i[0])[1]
    out_channels = w.shape[0]
    mult, shift = _requant(b, node, i[1], i[4], i[6], out_channels)
    qmin, qmax = _clamp(node)
    x_zp, y_zp = zero_point(g.const(i[2])), zero_point(g.const(i[7]))
    bias = _int32_bias(b, node.input(8))
    a = node.attrs
    geometry = {"stride": tuple(a["strides"]), "dilation": tuple(a["dilations"]), "pads": list(a["pads"])}
    x = b.read(i[0], NHWC)
    y = b.write(node.outputs[0], NHWC)
    threads = b.threads_for(node)
    if group == channels and w.shape[1] == 1 and group > 1:
        dw = np.ascontiguousarray(w[:, 0].transpose(1, 2, 0))  # (KH, KW, C*multiplier)
        # Weights packed once for the level's kernel; run() keeps no state, so arenas share the plan.
        plan = k.Qu8DepthwisePlan(dw, bias, x_zp, mult, shift, y_zp, qmin, qmax, list(x.storage_shape), **geometry)
        b.emit(node, "native", lambda v: partial(plan.run, v[x], v[y], threads), f"int8 depthwise, {plan.kernel_name}")
        return
    if group != 1:
        return _grouped_conv(node, b, x, y, w, bias, (x_zp, mult, shift, y_zp, qmin, qmax), geometry, threads)
    packed = k.pack_qu8_conv(np.ascontiguousarray(w.transpose(0, 2, 3, 1)), bias, x_zp, mult, shift, y_zp, qmin, qmax)
    # A plan holds per-call state (its indirection buffer): one per arena, as for fp32 (conv.py).
    new_plan = partial(k.Qu8ConvPlan, packed, list(x.storage_shape), tuple(w.shape[2:]), **geometry)
    kind = "1x1 GEMM" if new_plan().is_gemm else "indirect conv"
    b.emit(node, "native", lambda v: partial(new_plan().run, v[x], v[y], threads), f"int8 {kind}, {packed.kernel_name}")


def _grouped_conv(node: Node, b: Builder, x: Slot, y: Slot, w: np.ndarray, bias, requant, geometry, threads) -> None:
    """One plan per group, reading its channel slice of the NHWC input (pixel stride C) and
    writing its slice of the output: RegNet's and ResNeXt's group convolutions."""
    k = native_kernels()
    group, channels = node.attrs["group"], b.shape(node.inputs[0])[1]
    cg, og = channels // group, w.shape[0] // group
    if cg % 4:  # the kernels read whole 4-byte words: a group's last word would cross into the next
        return fallback(node, b, f"grouped int8 convolution of {cg} channels a group (not a multiple of 4)")
    x_zp, mult, shift, y_zp, qmin, qmax = requant
    shape = list(x.storage_shape[:3]) + [cg]
    makers = []
    for gi in range(group):
        out = slice(gi * og, (gi + 1) * og)
        packed = k.pack_qu8_conv(np.ascontiguousarray(w[out].transpose(0, 2, 3, 1)),
                                 None if bias is None else np.ascontiguousarray(bias[out]), x_zp,
                                 np.ascontiguousarray(mult[out]), np.ascontiguousarray(shift[out]), y_zp, qmin, qmax)
        makers.append(partial(k.Qu8ConvPlan, packed, shape, tuple(w.shape[2:]), **geometry))

    def bind(v: Views) -> Runner:
        plans = [make() for make in makers]  # per arena: a plan keeps its indirection buffer
        xs, ys = v[x], v[y]

        def run() -> None:
            for gi, plan in enumerate(plans):
                plan.run(xs, ys, threads, gi * cg, gi * og)
        return run
    b.emit(node, "native", bind, f"int8 grouped conv, {group} groups, {makers[0].args[0].kernel_name}")


@lowering("QGemm", "QLinearMatMul")
def qlinear_gemm(node: Node, b: Builder) -> None:
    g, k = b.graph, native_kernels()
    i = node.inputs
    w = g.const(i[3])
    trans_b = node.op == "QGemm" and node.attrs["transB"]
    if w is None or w.ndim != 2 or w.dtype != np.int8 or not _symmetric(b, node.input(5)) or \
            not _uint8(b, i[0], node.outputs[0]) or (node.op == "QGemm" and node.attrs["transA"]):
        return fallback(node, b, "int8 activations, asymmetric or run-time weights")
    matrix = np.ascontiguousarray(w if trans_b else w.T)  # (N, K)
    n_out, depth = matrix.shape
    y_spot = (7, 8) if node.op == "QGemm" else (6, 7)
    mult, shift = _requant(b, node, i[1], i[4], i[y_spot[0]], n_out)
    bias = _int32_bias(b, node.input(6)) if node.op == "QGemm" else None
    if bias is not None and bias.size != n_out:
        return fallback(node, b, "QGemm with a C that is not a row vector")
    qmin, qmax = _clamp(node)
    packed = k.pack_qu8_conv(matrix, bias, zero_point(g.const(i[2])), mult, shift, zero_point(g.const(i[y_spot[1]])),
                             qmin, qmax)
    a = b.read(i[0], NCHW)
    y = b.write(node.outputs[0], NCHW)
    rows = math.prod(b.shape(i[0])) // depth
    threads = b.threads_for(node)
    b.emit(node, "native", lambda v: partial(k.qu8_gemm, v[a].reshape(rows, depth), packed,
                                             v[y].reshape(rows, n_out), threads), f"int8 GEMM, {packed.kernel_name}")


def _broadcast(out_shape, b_shape, layout: str) -> str | None:
    """How the second operand of an 8-bit binary op meets the first in the kernels' row view (rows
    of the stored last axis): "none", "scalar", or "channel" for one value per element of a row
    (a conv's per-channel (C, 1, 1) in NHWC storage, a MatMul's bias (N,) in plain storage)."""
    full = (1,) * (len(out_shape) - len(b_shape)) + tuple(b_shape)
    if full == tuple(out_shape):
        return "none"
    if math.prod(b_shape) == 1:
        return "scalar"
    if len(full) != len(out_shape):
        return None
    axis = 1 if len(out_shape) == 4 and layout == NHWC else len(out_shape) - 1
    if full[axis] == out_shape[axis] and all(d == 1 for i, d in enumerate(full) if i != axis):
        return "channel"
    return None


@lowering("QLinearAdd", "QLinearMul")
def qlinear_binary(node: Node, b: Builder) -> None:
    g, k = b.graph, native_kernels()
    i = list(node.inputs)
    out_shape = b.shape(node.outputs[0])
    # Both ops commute: the run-time operand of the output's shape first (an SE block's Mul may
    # take its per-channel gate first).
    if (not b.is_activation(i[0]) and b.is_activation(i[3])) or (
            b.is_activation(i[3]) and tuple(b.shape(i[0])) != tuple(out_shape)
            and tuple(b.shape(i[3])) == tuple(out_shape)):
        i = i[3:6] + i[0:3] + i[6:]
    if not _uint8(b, i[0], i[3], node.outputs[0]) or tuple(b.shape(i[0])) != tuple(out_shape) \
            or not b.is_activation(i[0]):
        return fallback(node, b, "int8 activations or a broadcast first operand")
    x = b.read_stored(i[0])
    broadcast = _broadcast(out_shape, b.shape(i[3]), x.layout)
    if broadcast is None and len(out_shape) == 4 and _broadcast(out_shape, b.shape(i[3]), NHWC) == "channel":
        # per channel of a plane-major tensor (ConvNeXt's layer scale after its permute back):
        # channels last, one conversion, then the kernel's per-column operand
        x, broadcast = b.read(i[0], NHWC), "channel"
    if broadcast is None or (broadcast == "none" and b.is_activation(i[3]) and len(b.shape(i[3])) != len(out_shape)):
        return fallback(node, b, f"broadcast of {b.shape(i[3])} against {out_shape}")
    if not b.is_activation(i[3]):  # a constant operand (a quantized bias or scale): its codes, as stored
        codes = np.asarray(g.const(i[3]))
        if broadcast == "none":
            codes = codes.reshape(out_shape)
            if x.layout == NHWC and codes.ndim == 4:
                codes = codes.transpose(0, 2, 3, 1)
        other = np.ascontiguousarray(codes.reshape(-1))
    else:
        other = b.read(i[3], x.layout) if broadcast == "none" else b.read(i[3], NCHW)
    y = b.write(node.outputs[0], x.layout)
    sa, sb, sy = (scalar(g.const(i[j])) for j in (1, 4, 6))
    zps = [zero_point(g.const(i[j])) for j in (2, 5, 7)]
    qmin, qmax = _clamp(node)
    threads = b.threads_for(node)
    # Rows of the stored last axis (C in NHWC, which is what a per-channel operand runs along).
    width = x.storage_shape[-1] if x.storage_shape else 1
    rows = math.prod(out_shape) // width

    def second(v: Views) -> np.ndarray:
        return _operand(other if isinstance(other, np.ndarray) else v[other], broadcast, width)
    if node.op == "QLinearAdd":
        mults = fx.add_multipliers(sa, sb, sy)
        b.emit(node, "native", lambda v: partial(
            k.qu8_add, v[x].reshape(rows, width), zps[0], second(v), zps[1],
            v[y].reshape(rows, width), zps[2], *mults, qmin, qmax, broadcast, threads), f"int8 add, {broadcast}")
        return
    mult, shift = mul_multiplier(sa, sb, sy)
    b.emit(node, "native", lambda v: partial(
        k.qu8_mul, v[x].reshape(rows, width), zps[0], second(v), zps[1],
        v[y].reshape(rows, width), zps[2], mult, shift, qmin, qmax, broadcast, threads), f"int8 mul, {broadcast}")


def _operand(arr: np.ndarray, broadcast: str, width: int) -> np.ndarray:
    """The second operand as the kernels take it: rows of ``width`` in full, else flat."""
    if broadcast == "none":
        return arr.reshape(-1, width)
    return arr.reshape(-1)


@lowering("QLinearGlobalAveragePool")
def qlinear_global_average_pool(node: Node, b: Builder) -> None:
    g, k = b.graph, native_kernels()
    i = node.inputs
    if not _uint8(b, i[0], node.outputs[0]):
        return fallback(node, b, "int8 activations")
    n, c, h, w = b.shape(i[0])
    mult, shift = average_multipliers(scalar(g.const(i[1])), scalar(g.const(i[3])), [h * w])
    x = b.read(i[0], NHWC)
    y = b.write(node.outputs[0], NCHW)  # (N, C, 1, 1): the same bytes as (N, C)
    threads = b.threads_for(node)
    b.emit(node, "native", lambda v: partial(
        k.qu8_global_avgpool, v[x].reshape(n, h * w, c), zero_point(g.const(i[2])), v[y].reshape(n, c),
        zero_point(g.const(i[4])), int(mult[0]), int(shift[0]), 0, 255, threads), "int8 global average")


@lowering("QLinearAveragePool")
def qlinear_average_pool(node: Node, b: Builder) -> None:
    g, k = b.graph, native_kernels()
    i = node.inputs
    a = node.attrs
    if not _uint8(b, i[0], node.outputs[0]) or len(b.shape(i[0])) != 4:
        return fallback(node, b, "int8 activations or a rank other than 4")
    pads, why_not = swept_pads(node, b)
    if why_not:
        return fallback(node, b, why_not)
    taps = math.prod(a["kernel_shape"])
    mult, shift = average_multipliers(scalar(g.const(i[1])), scalar(g.const(i[3])), np.arange(taps + 1))
    x = b.read(i[0], NHWC)
    y = b.write(node.outputs[0], NHWC)
    threads = b.threads_for(node)
    b.emit(node, "native", lambda v: partial(
        k.qu8_avgpool, v[x], zero_point(g.const(i[2])), v[y], zero_point(g.const(i[4])), mult, shift, 0, 255,
        tuple(a["kernel_shape"]), tuple(a["strides"]), tuple(a["dilations"]), pads,
        bool(a["count_include_pad"]), threads), "int8 average pool")



def uint8_max_pool(node: Node, b: Builder) -> None:
    """MaxPool on a uint8 tensor (pool.py sends it here): the max of codes is the code of the max."""
    k = native_kernels()
    a = node.attrs
    if b.graph.tensors[node.inputs[0]].dtype != np.uint8 or len(b.shape(node.inputs[0])) != 4:
        return fallback(node, b, "int8 max pool, or a rank other than 4")
    pads, _ = swept_pads(node, b)  # a max counts no pads
    x = b.read(node.inputs[0], NHWC)
    y = b.write(node.outputs[0], NHWC)
    threads = b.threads_for(node)
    b.emit(node, "native", lambda v: partial(
        k.qu8_maxpool, v[x], v[y], tuple(a["kernel_shape"]), tuple(a["strides"]), tuple(a["dilations"]),
        pads, threads), "uint8 max pool")


@lowering("QLinearLookup")
def qlinear_lookup(node: Node, b: Builder) -> None:
    """The native table lookup on the stored bytes: an int8 input's byte b is the code b ^ 0x80 of
    the reference's index, so the table is permuted once instead; an int8 output is its bytes."""
    table = np.asarray(b.graph.const(node.inputs[1]))
    if b.graph.tensors[node.inputs[0]].dtype == np.int8:
        table = table[np.arange(256) ^ 0x80]
    table = np.ascontiguousarray(table).view(np.uint8)
    x = b.read_stored(node.inputs[0])
    y = b.write(node.outputs[0], x.layout)
    k, threads = native_kernels(), b.threads_for(node)
    b.emit(node, "native", lambda v: partial(k.qu8_lut, v[x].view(np.uint8), table, v[y].view(np.uint8), threads),
           "256-entry table")


# ONNX axis -> axis of the NHWC storage.
_NHWC_AXIS = {0: 0, 1: 3, 2: 1, 3: 2}


@lowering("QLinearConcat")
def qlinear_concat(node: Node, b: Builder) -> None:
    """Each part copied (the output's scale and zero point) or rescaled (the reference's
    ``rescale``: the same multiplier and shift) into its slice of the output's rows: the rows are
    the stored layout's outer extent before the axis (pixels for a channel concat in NHWC)."""
    g, k = b.graph, native_kernels()
    out = node.outputs[0]
    parts = list(zip(node.inputs[2::3], node.inputs[3::3], node.inputs[4::3]))
    if not _uint8(b, out, *(p[0] for p in parts)):
        return fallback(node, b, "int8 activations")
    axis, out_shape = node.attrs["axis"], b.shape(out)
    nhwc = len(out_shape) == 4 and any(b.is_activation(p[0]) and b.stored_layout(p[0]) == NHWC for p in parts)
    layout = NHWC if nhwc else NCHW
    stored_axis = _NHWC_AXIS[axis] if nhwc else axis
    sy, zy = scalar(g.const(node.inputs[0])), zero_point(g.const(node.inputs[1]))
    sources, x_zps, mults, shifts, copies = [], [], [], [], []
    for x_name, s_name, z_name in parts:
        zx = zero_point(g.const(z_name))
        copy, mult, shift = rescale_params(scalar(g.const(s_name)), zx, sy, zy)
        if b.is_activation(x_name):
            sources.append(b.read(x_name, layout))
        else:  # a constant part: its codes in the chosen layout
            codes = np.asarray(g.const(x_name), np.uint8)
            sources.append(np.ascontiguousarray(codes.transpose(0, 2, 3, 1) if nhwc else codes))
        x_zps.append(int(zx))
        mults.append(int(mult))
        shifts.append(int(shift))
        copies.append(copy)
    y = b.write(out, layout)
    stored_out = y.storage_shape
    rows = math.prod(stored_out[:stored_axis])
    widths = [math.prod((s.storage_shape if isinstance(s, Slot) else s.shape)[stored_axis:]) for s in sources]
    threads = b.threads_for(node)

    def bind(v: Views) -> Runner:
        xs = [(v[s] if isinstance(s, Slot) else s).reshape(rows, w) for s, w in zip(sources, widths)]
        return partial(k.qu8_concat, xs, x_zps, mults, shifts, copies, v[y].reshape(rows, sum(widths)), int(zy),
                       threads)
    rescaled = sum(not c for c in copies)
    b.emit(node, "native", bind, f"int8 concat, {len(parts)} parts ({rescaled} rescaled)")
