"""The opencl lowering of the quantize family (``edgesdk/ops/quantize.py``), in ``quantize.cl``.

Every kernel computes exactly the reference's integers (the bit-exact oracle): int32 sums of
(x - x_zp) * (w - w_zp), requantized with gemmlowp's fixed-point multiply and rounding shift
(``edgesdk.quant.fixedpoint``), the multipliers computed here by the same functions the
reference calls. A layer whose int32 accumulator could overflow (the reference sums in int64
and saturates) is refused, never wrapped.

* QLinearConv: ungrouped layers run ``qconv_oc`` (vectors along output channels, conv.cl's
  conv_oc tile and tuning), grouped and depthwise ones ``qconv_direct`` (vectors along output
  columns, the conv_direct / depthwise tunings). Weights go up with their zero point
  subtracted, as char (short when that leaves int8).
* QGemm / QLinearMatMul with a constant 2-D B: ``qconv_oc`` as a 1x1 convolution of M 1x1 images.
* ``qconv_oc`` has a 4x8-bit dot-product variant, built when the device reports
  ``cl_khr_integer_dot_product`` or ``cl_arm_integer_dot_product_int8`` (:func:`dot_mode`).
* QuantizeLinear / DequantizeLinear (per tensor and per axis), QLinearAdd / QLinearMul (numpy
  broadcasting), QLinearGlobalAveragePool, QLinearAveragePool and QLinearLookup.

* MaxPool on an 8-bit tensor (``qmax_pool``; pool.py's MaxPool lowering is float).

QLinearConcat has no kernel (it falls back to the reference), and neither have the other
value-moving ops on 8-bit tensors (Transpose, Slice, GlobalMaxPool...): the backend sends any
node that touches an 8-bit tensor to the lowering ``INTEGER_KERNELS`` has for its op, or to the
reference kernel.
"""
from __future__ import annotations

import math

import numpy as np

from ....graph import Node
from ....ops.geometry import pool_sweep
from ....ops.quantize import (QUANTIZED_DTYPES, average_multipliers, channel_multipliers, clamp_range,
                              dtype_range, mul_multiplier, rescale_params, scalar, window_counts, zero_point)
from ....quant import fixedpoint as fx
from ....runtime.precision import round_constant
from ..kernels import KERNELS, DeviceBuffer, Launch, LoweringContext, NotLowerable, ceil_div, kernel, storage_defines
from .common import broadcast_strides, pad_rank
from .conv import ConvGeometry, pack_oc_blocks

FILE = "quantize.cl"
INT32_MAX = (1 << 31) - 1

# The dot-product variant of qconv_oc: the device extension that provides it -> its QDOT id.
DOT_EXTENSIONS = (("cl_khr_integer_dot_product", 1), ("cl_arm_integer_dot_product_int8", 2))
EMULATED_DOT = 3  # the same layout and corrections with the products written out (any device)
# Tests set this to EMULATED_DOT (or 0) to run a variant the device would not pick.
force_dot: int | None = None


def dot_mode(ctx: LoweringContext) -> int:
    """QDOT of this device: 1 / 2 where a dot-product extension exists, else 0 (int32 path)."""
    if force_dot is not None:
        return force_dot
    for extension, mode in DOT_EXTENSIONS:
        if extension in ctx.device.info.extensions:
            return mode
    return 0


def has_fp64(ctx: LoweringContext) -> bool:
    return "cl_khr_fp64" in ctx.device.info.extensions


# -- parameters ------------------------------------------------------------------------------------
def _const(ctx: LoweringContext, name: str | None) -> np.ndarray | None:
    """A constant as the reference sees it at the session's precision (fp16 sessions round float
    arrays of more than one element, per-channel scales included, to half)."""
    if not name:
        return None
    value = ctx.graph.const(name)
    if value is None:
        raise NotLowerable(f"{name!r} is computed at run time")
    return round_constant(np.asarray(value), ctx.precision)


def _dtype(ctx: LoweringContext, name: str) -> np.dtype:
    dtype = np.dtype(ctx.graph.tensors[name].dtype)
    if dtype not in QUANTIZED_DTYPES:
        raise NotLowerable(f"tensor {name!r} is {dtype}, not 8-bit")
    return dtype


def _signed(dtype: np.dtype) -> int:
    return int(np.dtype(dtype) == np.int8)


def _multipliers(fn, *args):
    try:
        return fn(*args)
    except ValueError as exc:  # a scale of 2^30 or more (packages are checked before this)
        raise NotLowerable(str(exc)) from None


def _padded(values: np.ndarray, size: int) -> np.ndarray:
    out = np.zeros(size, np.int32)
    out[:values.size] = values
    return out


def _act(ctx: LoweringContext, name: str):
    """A run-time tensor's TensorRef (a constant input of these ops is folded by the passes; a
    graph run without them keeps it on the reference kernel)."""
    if ctx.is_const(name):
        raise NotLowerable(f"input {name!r} is a constant")
    return ctx.act(name)


def _operand(ctx: LoweringContext, name: str) -> tuple[DeviceBuffer, tuple[int, ...]]:
    """An 8-bit operand: an activation's buffer, or a constant uploaded as its bytes."""
    _dtype(ctx, name)
    if ctx.is_const(name):
        return ctx.raw(name, "int8-dense", np.asarray(ctx.graph.const(name))), ctx.graph.tensors[name].shape
    return ctx.act(name).buffer, ctx.act(name).shape


# -- QLinearConv, QGemm, QLinearMatMul --------------------------------------------------------------
@kernel("QLinearConv")
def qlinear_conv(ctx: LoweringContext, node: Node) -> list[Launch]:
    i = node.inputs
    x, y = _act(ctx, i[0]), ctx.act(node.outputs[0])
    if len(x.shape) != 4:
        raise NotLowerable("only 2-D QLinearConv has kernels")
    w = _const(ctx, i[3])
    _dtype(ctx, i[3])
    geom = ConvGeometry.of(node, x.shape, y.shape)
    oc = w.shape[0]
    w_zp = np.broadcast_to(np.asarray(_const(ctx, node.input(5)) if node.input(5) else 0, np.int64).reshape(-1), (oc,))
    wq = w.astype(np.int64) - w_zp.reshape(-1, 1, 1, 1)
    mult, shift = _multipliers(channel_multipliers, scalar(_const(ctx, i[1])), _const(ctx, i[4]),
                               scalar(_const(ctx, i[6])), oc)
    bias = _const(ctx, node.input(8))
    bias = np.zeros(oc, np.int64) if bias is None else np.asarray(bias, np.int64).reshape(-1)
    return [conv_launch(ctx, node, geom, i[0], node.outputs[0], i[3], wq, bias, mult, shift,
                        zero_point(_const(ctx, node.input(2))), zero_point(_const(ctx, node.input(7))))]


@kernel("QGemm", "QLinearMatMul")
def qlinear_gemm(ctx: LoweringContext, node: Node) -> list[Launch]:
    i = node.inputs
    qgemm = node.op == "QGemm"
    if qgemm and node.attrs["transA"]:
        raise NotLowerable("QGemm with transA")
    if not ctx.is_const(i[3]):
        raise NotLowerable(f"{node.op} with a run-time B operand")
    b = _const(ctx, i[3])
    _dtype(ctx, i[3])
    if b.ndim != 2:
        raise NotLowerable(f"{node.op} with a {b.ndim}-D B operand")
    matrix = b if qgemm and node.attrs["transB"] else b.T  # (N, K): one row per output column
    nout, depth = matrix.shape
    x = _act(ctx, i[0])
    if x.shape[-1] != depth:
        raise NotLowerable(f"{node.op} inner sizes {x.shape} x {b.shape}")
    b_zp = np.broadcast_to(np.asarray(_const(ctx, node.input(5)) if node.input(5) else 0, np.int64).reshape(-1),
                           (nout,))
    wq = (matrix.astype(np.int64) - b_zp.reshape(-1, 1)).reshape(nout, depth, 1, 1)
    y_scale, y_zp = (7, 8) if qgemm else (6, 7)
    mult, shift = _multipliers(channel_multipliers, scalar(_const(ctx, i[1])), _const(ctx, i[4]),
                               scalar(_const(ctx, i[y_scale])), nout)
    bias = np.zeros(nout, np.int64)
    if qgemm and node.input(6):
        c = np.asarray(_const(ctx, i[6]), np.int64)
        if c.size == 1:
            bias[:] = c.reshape(-1)[0]
        elif c.size == nout and c.shape in ((nout,), (1, nout)):
            bias = c.reshape(-1)
        else:
            raise NotLowerable(f"QGemm C of shape {c.shape} (a row vector or a scalar has a kernel)")
    geom = ConvGeometry(x.size // depth, depth, 1, 1, nout, 1, 1)
    return [conv_launch(ctx, node, geom, i[0], node.outputs[0], i[3], wq, bias, mult, shift,
                        zero_point(_const(ctx, i[2])), zero_point(_const(ctx, node.input(y_zp))), gemm=True)]


def conv_launch(ctx: LoweringContext, node: Node, geom: ConvGeometry, x_name: str, y_name: str, w_name: str,
                wq: np.ndarray, bias: np.ndarray, mult: np.ndarray, shift: np.ndarray, x_zp: int, y_zp: int,
                gemm: bool = False) -> Launch:
    """The launch of a convolution of zero-point-free weights ``wq`` (OC, C / group, KH, KW, as
    int64) with an int64 bias: qconv_oc for ungrouped layers (always for Gemm), else qconv_direct."""
    x_dtype, y_dtype = _dtype(ctx, x_name), _dtype(ctx, y_name)
    lo, hi = clamp_range(node, y_dtype)
    x_lo, x_hi = dtype_range(x_dtype)
    oc = geom.oc
    w_abs = np.abs(wq).reshape(oc, -1).sum(axis=1)
    if np.any(w_abs * max(x_zp - x_lo, x_hi - x_zp) + np.abs(bias) > INT32_MAX):
        raise NotLowerable("the int32 accumulator could overflow (the reference saturates it)")
    w_short = bool(wq.size) and (wq.min() < -128 or wq.max() > 127)
    common = {**geom.defines(), "XQ_S": _signed(x_dtype), "YQ_S": _signed(y_dtype), "XZP": x_zp, "YZP": y_zp,
              "QMIN": lo, "QMAX": hi, "WQ_SHORT": int(w_short), "QLEFT": int(np.any(shift > 0))}
    tag = node.name
    x, y = ctx.act(x_name).buffer, ctx.act(y_name).buffer
    if gemm or (geom.groups == 1 and _channel_vectorised(ctx, geom)):
        t = ctx.config.tuning("conv_oc")
        nv = min(t.vectors, ceil_div(oc, ctx.vec))
        ocb = ctx.vec * nv
        blocks = ceil_div(oc, ocb)
        pix = min(t.rows, geom.oh * geom.ow)
        defines = {"QCONV_OC": 1, **common, "NV": nv, "PIX": pix, "NBLK": blocks, "QDOT": 0}
        mode = 0 if w_short else dot_mode(ctx)
        if mode:
            x_signed = _signed(x_dtype)
            offset = -x_zp if x_signed else 128 - x_zp  # (x - x_zp) = xs + offset
            folded = bias + offset * wq.reshape(oc, -1).sum(axis=1)
            if np.all(w_abs * 128 + np.abs(folded) <= INT32_MAX):
                bias = folded
                defines.update(QDOT=mode, XPAD=x_zp if x_signed else x_zp - 128)
                weights = ctx.raw(w_name, f"int8-dot-blocks-{ocb}:{tag}", _pack_dot(wq, ocb))
            else:
                mode = 0
        if not mode:
            packed = pack_oc_blocks(wq.astype(np.int16 if w_short else np.int8), ocb)
            weights = ctx.raw(w_name, f"{'int16' if w_short else 'int8'}-oc-blocks-{ocb}:{tag}", packed)
        size = (ceil_div(geom.oh * geom.ow, pix), blocks, geom.n)
        kernel_name, tuning, padded = "qconv_oc", "conv_oc", blocks * ocb
    else:
        weights = ctx.raw(w_name, f"{'int16' if w_short else 'int8'}-direct:{tag}",
                          wq.astype(np.int16 if w_short else np.int8))
        defines = {"QCONV_DIRECT": 1, **common}
        size = (ceil_div(geom.ow, ctx.vec) * geom.oh, oc, geom.n)
        kernel_name, tuning, padded = "qconv_direct", "depthwise" if geom.is_depthwise else "conv_direct", oc
    args = [x, weights, ctx.raw(w_name, f"bias-int32:{tag}", _padded(bias, padded)),
            ctx.raw(w_name, f"requant-mult:{tag}", _padded(mult, padded)),
            ctx.raw(w_name, f"requant-shift:{tag}", _padded(shift, padded)), y]
    return ctx.launch(FILE, kernel_name, defines, args, size, tuning)


def _channel_vectorised(ctx: LoweringContext, geom: ConvGeometry) -> bool:
    """qconv_oc for an ungrouped conv unless its output channels fill under half of its lanes
    (a 3-channel head, say) while there are pixels enough for qconv_direct's row vectors."""
    ocb = ctx.vec * min(ctx.config.tuning("conv_oc").vectors, ceil_div(geom.oc, ctx.vec))
    return geom.oc / (ceil_div(geom.oc, ocb) * ocb) >= 0.5 or geom.ow < ctx.vec


def _pack_dot(wq: np.ndarray, ocb: int) -> np.ndarray:
    """(OC, C, KH, KW) -> (blocks, KH, KW, C4, OCB, 4) int8, zero past OC and C: the four input
    channels of one output channel and tap side by side (a char4 per dot product)."""
    oc, c, kh, kw = wq.shape
    blocks, c4 = ceil_div(oc, ocb), ceil_div(c, 4)
    padded = np.zeros((blocks * ocb, c4 * 4, kh, kw), np.int8)
    padded[:oc, :c] = wq
    return padded.reshape(blocks, ocb, c4, 4, kh, kw).transpose(0, 4, 5, 2, 1, 3)


# -- element-wise -----------------------------------------------------------------------------------
@kernel("QLinearAdd", "QLinearMul")
def qlinear_binary(ctx: LoweringContext, node: Node) -> list[Launch]:
    i = node.inputs
    y = ctx.act(node.outputs[0])
    y_dtype = _dtype(ctx, node.outputs[0])
    a, a_shape = _operand(ctx, i[0])
    b, b_shape = _operand(ctx, i[3])
    lo, hi = clamp_range(node, y_dtype)
    sa, sb, sy = (scalar(_const(ctx, i[k])) for k in (1, 4, 6))
    if node.op == "QLinearAdd":
        am, ash, bm, bsh, om, osh = _multipliers(fx.add_multipliers, sa, sb, sy)
        params = {"QOP": 0, "AM": am, "AS": ash, "BM": bm, "BS": bsh, "OM": om, "OS": osh}
    else:
        om, osh = _multipliers(mul_multiplier, sa, sb, sy)
        params = {"QOP": 1, "OM": om, "OS": osh}
    common = {**params, "AZP": zero_point(_const(ctx, node.input(2))), "BZP": zero_point(_const(ctx, node.input(5))),
              "YZP": zero_point(_const(ctx, node.input(7))), "QMIN": lo, "QMAX": hi, "TOTAL": y.size,
              "AQ_S": _signed(_dtype(ctx, i[0])), "BQ_S": _signed(_dtype(ctx, i[3])), "YQ_S": _signed(y_dtype)}
    if tuple(a_shape) == tuple(b_shape) == tuple(y.shape):
        return [ctx.launch(FILE, "qbinary_same", {"QBINARY_SAME": 1, **common}, [a, b, y.buffer],
                           (ceil_div(y.size, ctx.vec),), "eltwise")]
    out = pad_rank(y.shape)
    defines = {"QBINARY_BROADCAST": 1, **common, **{f"D{k}": d for k, d in enumerate(out)},
               **{f"SA{k}": s for k, s in enumerate(broadcast_strides(a_shape, out))},
               **{f"SB{k}": s for k, s in enumerate(broadcast_strides(b_shape, out))}}
    return [ctx.launch(FILE, "qbinary_broadcast", defines, [a, b, y.buffer], (y.size,), "eltwise")]


@kernel("QLinearLookup")
def qlinear_lookup(ctx: LoweringContext, node: Node) -> list[Launch]:
    x, y = _act(ctx, node.inputs[0]), ctx.act(node.outputs[0])
    table = np.asarray(_const(ctx, node.inputs[1]))
    if table.shape != (256,) or table.dtype != _dtype(ctx, node.outputs[0]):
        raise NotLowerable("QLinearLookup needs a 256-entry table of the output type")
    defines = {"QLOOKUP": 1, "TOTAL": y.size, "XQ_S": _signed(_dtype(ctx, node.inputs[0])),
               "YQ_S": _signed(table.dtype)}
    return [ctx.launch(FILE, "qlookup", defines, [x.buffer, ctx.raw(node.inputs[1], "int8-table", table), y.buffer],
                       (ceil_div(y.size, ctx.vec),), "eltwise")]


@kernel("QLinearConcat")
def qlinear_concat(ctx: LoweringContext, node: Node) -> list[Launch]:
    """One launch per part (as the float Concat), each rescaled to the output's parameters with the
    reference's multipliers (rescale_params) or copied."""
    y = ctx.act(node.outputs[0])
    y_dtype = _dtype(ctx, node.outputs[0])
    axis = node.attrs["axis"] % len(y.shape)
    y_scale, y_zp = scalar(_const(ctx, node.inputs[0])), zero_point(_const(ctx, node.input(1)))
    outer, inner = math.prod(y.shape[:axis]), math.prod(y.shape[axis + 1:])
    lo, hi = dtype_range(y_dtype)
    parts = node.inputs[2:]
    launches, offset = [], 0
    for x_name, s_name, z_name in zip(parts[0::3], parts[1::3], parts[2::3]):
        x, x_dtype = _act(ctx, x_name), _dtype(ctx, x_name)
        x_zp = zero_point(_const(ctx, z_name))
        copy, mult, shift = _multipliers(rescale_params, scalar(_const(ctx, s_name)), x_zp, y_scale, y_zp)
        defines = {"QCONCAT": 1, "OUTER": outer, "AX": x.shape[axis], "INNER": inner, "YAX": y.shape[axis],
                   "OFF": offset, "QCOPY": int(copy and x_dtype == y_dtype), "M": mult, "S": shift, "XZP": x_zp,
                   "YZP": y_zp, "QMIN": lo, "QMAX": hi, "XQ_S": _signed(x_dtype), "YQ_S": _signed(y_dtype)}
        if x.size:
            launches.append(ctx.launch(FILE, "qconcat", defines, [x.buffer, y.buffer], (x.size,), "eltwise"))
        offset += x.shape[axis]
    return launches


# -- QuantizeLinear / DequantizeLinear --------------------------------------------------------------
def _axis_params(ctx: LoweringContext, node: Node, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, dict]:
    """Scale (float32) and zero point (int32) arrays and the kernel's INNER / AXD constants."""
    scale = np.asarray(_const(ctx, node.inputs[1]), np.float32).reshape(-1)
    zp_value = _const(ctx, node.input(2))
    zp = np.zeros(scale.size, np.int32) if zp_value is None else np.asarray(zp_value, np.int32).reshape(-1)
    if scale.size == 1:
        return scale, zp[:1], {"INNER": 1, "AXD": 1}
    axis = node.attrs.get("axis", 1) % len(shape)
    if shape[axis] != scale.size or zp.size != scale.size:
        raise NotLowerable(f"{node.op} parameters of size {scale.size} along axis {axis} of {shape}")
    return scale, zp, {"INNER": math.prod(shape[axis + 1:]), "AXD": shape[axis]}


@kernel("QuantizeLinear")
def quantize_linear(ctx: LoweringContext, node: Node) -> list[Launch]:
    x, y = _act(ctx, node.inputs[0]), ctx.act(node.outputs[0])
    if ctx.graph.tensors[node.inputs[0]].dtype != np.float32:
        raise NotLowerable(f"QuantizeLinear of {ctx.graph.tensors[node.inputs[0]].dtype}")
    y_dtype = _dtype(ctx, node.outputs[0])
    scale, zp, axis = _axis_params(ctx, node, x.shape)
    lo, hi = dtype_range(y_dtype)
    defines = {"QUANTIZE_LINEAR": 1, "TOTAL": y.size, **axis, "QMIN": lo, "QMAX": hi, "YQ_S": _signed(y_dtype),
               "Q_FP64": int(has_fp64(ctx)), **storage_defines(X=x.half)}
    return [_affine_launch(ctx, node, "quantize_linear", defines, x, y, scale, zp)]


@kernel("DequantizeLinear")
def dequantize_linear(ctx: LoweringContext, node: Node) -> list[Launch]:
    x, y = _act(ctx, node.inputs[0]), ctx.act(node.outputs[0])
    x_dtype = _dtype(ctx, node.inputs[0])
    scale, zp, axis = _axis_params(ctx, node, x.shape)
    defines = {"DEQUANTIZE_LINEAR": 1, "TOTAL": y.size, **axis, "XQ_S": _signed(x_dtype), **storage_defines(Y=y.half)}
    return [_affine_launch(ctx, node, "dequantize_linear", defines, x, y, scale, zp)]


def _affine_launch(ctx: LoweringContext, node: Node, kernel_name: str, defines: dict, x, y, scale, zp) -> Launch:
    """QuantizeLinear / DequantizeLinear: x, the scales (fp32) and zero points (int32) per tensor or axis, y."""
    args = [x.buffer, ctx.raw(node.inputs[1], f"scale-fp32:{node.name}", scale),
            ctx.raw(node.inputs[1], f"zero-point-int32:{node.name}", zp), y.buffer]
    return ctx.launch(FILE, kernel_name, defines, args, (ceil_div(y.size, ctx.vec),), "eltwise")


# -- pooling ----------------------------------------------------------------------------------------
@kernel("QLinearGlobalAveragePool")
def qlinear_global_average_pool(ctx: LoweringContext, node: Node) -> list[Launch]:
    x, y = _act(ctx, node.inputs[0]), ctx.act(node.outputs[0])
    x_dtype, y_dtype = _dtype(ctx, node.inputs[0]), _dtype(ctx, node.outputs[0])
    if len(x.shape) != 4:
        raise NotLowerable("QLinearGlobalAveragePool needs an NCHW input")
    planes, spatial = x.shape[0] * x.shape[1], x.shape[2] * x.shape[3]
    if spatial * 255 > INT32_MAX:
        raise NotLowerable("the int32 sum of a plane could overflow")
    mult, shift = _multipliers(average_multipliers, scalar(_const(ctx, node.inputs[1])),
                               scalar(_const(ctx, node.inputs[3])), [spatial])
    lo, hi = dtype_range(y_dtype)
    defines = {"QGLOBAL_AVG": 1, "PLANES": planes, "SPATIAL": spatial, "M": int(mult[0]), "S": int(shift[0]),
               "XZP": zero_point(_const(ctx, node.input(2))), "YZP": zero_point(_const(ctx, node.input(4))),
               "QMIN": lo, "QMAX": hi, "XQ_S": _signed(x_dtype), "YQ_S": _signed(y_dtype)}
    return [ctx.launch(FILE, "qglobal_avg", defines, [x.buffer, y.buffer], (planes,), "reduce")]


@kernel("QLinearAveragePool")
def qlinear_average_pool(ctx: LoweringContext, node: Node) -> list[Launch]:
    x, y = _act(ctx, node.inputs[0]), ctx.act(node.outputs[0])
    x_dtype, y_dtype = _dtype(ctx, node.inputs[0]), _dtype(ctx, node.outputs[0])
    if len(x.shape) != 4:
        raise NotLowerable("only 2-D QLinearAveragePool has a kernel")
    n, c, h, w = x.shape
    a = node.attrs
    (oh, ow), (top, left, _, _) = pool_sweep(node, h, w)
    counts = window_counts(node, h, w)
    mult, shift = _multipliers(average_multipliers, scalar(_const(ctx, node.inputs[1])),
                               scalar(_const(ctx, node.inputs[3])), counts.reshape(-1))
    lo, hi = dtype_range(y_dtype)
    defines = {"QAVG_POOL": 1, "N": n, "C": c, "H": h, "W": w, "OH": oh, "OW": ow, "KH": a["kernel_shape"][0],
               "KW": a["kernel_shape"][1], "SH": a["strides"][0], "SW": a["strides"][1], "DH": a["dilations"][0],
               "DW": a["dilations"][1], "PT": top, "PL": left, "XZP": zero_point(_const(ctx, node.input(2))),
               "YZP": zero_point(_const(ctx, node.input(4))), "QMIN": lo, "QMAX": hi, "XQ_S": _signed(x_dtype),
               "YQ_S": _signed(y_dtype)}
    args = [x.buffer, ctx.raw(node.inputs[1], f"requant-mult:{node.name}", np.asarray(mult, np.int32)),
            ctx.raw(node.inputs[1], f"requant-shift:{node.name}", np.asarray(shift, np.int32)), y.buffer]
    return [ctx.launch(FILE, "qavg_pool", defines, args, (y.size,), "pool")]


def max_pool_8bit(ctx: LoweringContext, node: Node) -> list[Launch]:
    """MaxPool on an 8-bit tensor (pool.py's MaxPool kernel is float): ``INTEGER_KERNELS``."""
    x, y = _act(ctx, node.inputs[0]), ctx.act(node.outputs[0])
    x_dtype = _dtype(ctx, node.inputs[0])
    if len(x.shape) != 4 or _dtype(ctx, node.outputs[0]) != x_dtype:
        raise NotLowerable("8-bit MaxPool: only 2-D, of one type in and out")
    n, c, h, w = x.shape
    a = node.attrs
    (oh, ow), (top, left, _, _) = pool_sweep(node, h, w)
    defines = {"QMAX_POOL": 1, "N": n, "C": c, "H": h, "W": w, "OH": oh, "OW": ow, "KH": a["kernel_shape"][0],
               "KW": a["kernel_shape"][1], "SH": a["strides"][0], "SW": a["strides"][1], "DH": a["dilations"][0],
               "DW": a["dilations"][1], "PT": top, "PL": left, "QMIN": dtype_range(x_dtype)[0],
               "XQ_S": _signed(x_dtype)}
    return [ctx.launch(FILE, "qmax_pool", defines, [x.buffer, y.buffer], (y.size,), "pool")]


# What the backend runs for a node that reads or writes an 8-bit tensor: these lowerings, and
# for any other op the reference kernel ("8-bit tensors: no OpenCL int8 kernel yet").
INTEGER_KERNELS = {op: KERNELS[op] for op in ("QLinearConv", "QGemm", "QLinearMatMul", "QLinearAdd", "QLinearMul",
                                              "QLinearLookup", "QLinearConcat", "QuantizeLinear", "DequantizeLinear",
                                              "QLinearGlobalAveragePool", "QLinearAveragePool")}
INTEGER_KERNELS["MaxPool"] = max_pool_8bit
