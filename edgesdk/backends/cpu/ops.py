"""The cpu backend's op table: op type -> lowering.

A lowering reads the node's normalised attributes (see ``onnx_import``), prepares weights and
kernel plans, asks the :class:`~.program.Builder` for buffers, and emits one step whose runner
calls a native kernel (placement ``native``), a numpy routine writing into the arena
(``numpy``: copies, layout moves, rare broadcasts), nothing at all (``view``), or the reference
backend's kernel for that node (``reference``, with the reason in the step note). Every op the
reference backend runs has an entry; ``fallback`` is the explicit route for the shapes a native
kernel does not cover.
"""
from __future__ import annotations

import math
from functools import partial
from typing import Callable

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ...compress.encodings import NNM, Clustered
from ...graph import Node
from ...runtime.activations import Activation
from ...runtime.precision import round_to_storage
from ...runtime.shapes import pool_sweep
from ..reference.kernels import evaluate
from . import weights as W
from .program import NCHW, NHWC, Builder, Runner, Slot, Views, same_bytes_in_both_layouts

Lowering = Callable[[Node, Builder], None]
LOWERINGS: dict[str, Lowering] = {}
ACTIVATION_OPS = ("Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish")


def lowering(*ops: str) -> Callable[[Lowering], Lowering]:
    def register(fn: Lowering) -> Lowering:
        for op in ops:
            LOWERINGS[op] = fn
        return fn
    return register


def _kernels():
    from ... import _native
    return _native.kernels


ActArgs = tuple[str, "float | None", "float | None"]
# Activations the GEMM microkernels cannot apply as a clamp in registers (a vector pass follows).
_POST_PASS_ACTIVATIONS = frozenset({"sigmoid", "tanh", "hardswish", "hardsigmoid", "leaky_relu"})
NO_ACT: ActArgs = ("none", None, None)


def act_args(act: Activation | None) -> ActArgs:
    """The native kernels' (name, alpha, beta) for a fused activation descriptor."""
    if act is None:
        return NO_ACT
    if act.kind == "Clip":
        lo, hi = act.params
        return ("relu6", None, None) if (lo, hi) == (0.0, 6.0) else ("clip", float(lo), float(hi))
    if act.kind == "LeakyRelu":
        return ("leaky_relu", float(act.params[0]), None)
    if act.kind == "HardSigmoid":
        return ("hardsigmoid", float(act.params[0]), float(act.params[1]))
    if act.kind == "HardSwish":
        return ("hardswish", 1.0 / 6.0, 0.5)
    return ({"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh"}[act.kind], None, None)


def _fused(node: Node) -> ActArgs:
    return act_args(node.attrs.get("fused_activation"))


def _then_activate(run: Runner, out: np.ndarray, act: ActArgs, threads: int) -> Runner:
    """``run`` followed by the activation in place on ``out`` (for routines without a fused one)."""
    if act == NO_ACT:
        return run
    activate = partial(_kernels().activation, out, *act, threads)

    def both() -> None:
        run()
        activate()
    return both


# -- fallback -----------------------------------------------------------------------------------
def fallback(node: Node, b: Builder, reason: str) -> None:
    """Run the reference kernel for this node (fused activation included) on graph-order views
    and copy its result into the arena; recorded with its reason."""
    slots = [b.read_stored(name) if b.is_activation(name) else None for name in node.inputs]
    constants = [None if slot is not None or not name else b.graph.const(name)
                 for slot, name in zip(slots, node.inputs)]
    constants = [None if c is None else round_to_storage(c, b.precision) for c in constants]
    outs = [b.write(name, NCHW) if name else None for name in node.outputs]

    def bind(v: Views) -> Runner:
        ins = [v.logical(s) if s is not None else c for s, c in zip(slots, constants)]
        dsts = [v[o] if o is not None else None for o in outs]

        def run() -> None:
            for dst, value in zip(dsts, evaluate(node, ins)):
                if dst is not None:
                    np.copyto(dst, value)
        return run
    b.emit(node, "reference", bind, reason)


# -- convolution --------------------------------------------------------------------------------
def _conv_geometry(node: Node) -> dict:
    a = node.attrs
    return {"stride": tuple(a["strides"]), "dilation": tuple(a["dilations"]), "pads": list(a["pads"])}


@lowering("Conv")
def conv(node: Node, b: Builder) -> None:
    g, k = b.graph, _kernels()
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
    # A ConvPlan caches per-call state (indirection buffer, fp16 input copy): one per arena.
    new_plan = partial(k.ConvPlan, packed, list(x.storage_shape), tuple(wt.shape[2:]), **geometry)
    act, threads = _fused(node), b.threads_for(node)
    kind = "1x1 GEMM" if new_plan().is_gemm else "indirect conv"
    if act[0] in _POST_PASS_ACTIVATIONS and out_channels < packed.nr:
        # Narrow outputs (LeNet's first conv): the kernel's per-tile activation pass would run
        # on rows of a few channels; one pass over the whole output is cheaper.
        b.emit(node, "native", lambda v: _then_activate(partial(new_plan().run, v[x], v[y], *NO_ACT, threads), v[y],
                                                         act, threads), f"{kind}, {how}, activation as a separate pass")
        return
    b.emit(node, "native", lambda v: partial(new_plan().run, v[x], v[y], *act, threads), f"{kind}, {how}")


def _conv_depthwise(node: Node, b: Builder, bias: np.ndarray | None) -> None:
    k = _kernels()
    wt = b.graph.tensors[node.inputs[1]]
    matrix, how = W.stored_matrix(wt)
    dw = W.as_fp32(matrix[:, 0].transpose(1, 2, 0), b.precision)  # (KH, KW, C*multiplier)
    x = b.read(node.inputs[0], NHWC)
    y = b.write(node.outputs[0], NHWC)
    geometry, act, threads = _conv_geometry(node), _fused(node), b.threads_for(node)
    b.emit(node, "native", lambda v: partial(
        k.depthwise_conv, v[x], dw, bias, v[y], geometry["stride"], geometry["dilation"], geometry["pads"],
        *act, threads, fp16_arith=b.precision == "fp16"), f"depthwise, {how}")


def _conv_grouped(node: Node, b: Builder, bias: np.ndarray | None) -> None:
    """Groups as separate convolutions over channel slices, copied in and out of scratch."""
    k = _kernels()
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
        new_plans.append(partial(k.ConvPlan, packed, [n, h, w_, cg], tuple(wt.shape[2:]), **geometry))
    act, threads = _fused(node), b.threads_for(node)

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
    k = _kernels()
    kernel = tuple(b.graph.tensors[node.inputs[1]].shape[2:])
    packed = W.pack_clustered(k, enc, bias, b.precision, conv_kernel=kernel)
    x = b.read(node.inputs[0], NHWC)
    y = b.write(node.outputs[0], NHWC)
    a = node.attrs
    direct = kernel == (1, 1) and tuple(a["strides"]) == (1, 1) and not any(a["pads"])
    im2col = None if direct else _Im2col(node, b, x)
    act, threads, o = _fused(node), b.threads_for(node), enc.rows

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
    k = _kernels()
    x = b.read(node.inputs[0], NHWC)
    y = b.write(node.outputs[0], NHWC)
    n, oh, ow, o = y.storage_shape
    geometry = _conv_geometry(node)
    assign = W.nnm_assignment(enc)
    if enc.mode == "shared":
        packed = W.pack_dense(k, W.conv_columns(enc.centroids), None, b.precision)
        new_plan = partial(k.ConvPlan, packed, list(x.storage_shape), tuple(enc.shape[2:]), **geometry)
        cent = b.scratch((n, oh, ow, enc.centroids.shape[0]))
        centroid_conv = lambda v: partial(new_plan().run, v[x], v[cent], *NO_ACT, b.threads_for(node))  # noqa: E731
    else:
        dw = W.nnm_depthwise_weights(enc, b.precision)
        cent = b.scratch((n, oh, ow, dw.shape[-1]))
        centroid_conv = lambda v: partial(  # noqa: E731
            k.depthwise_conv, v[x], dw, None, v[cent], geometry["stride"], geometry["dilation"],
            geometry["pads"], *NO_ACT, b.threads_for(node))
    act, threads = _fused(node), b.threads_for(node)

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
@lowering("Gemm")
def gemm(node: Node, b: Builder) -> None:
    g, k = b.graph, _kernels()
    w_name, c_name = node.inputs[1], node.input(2)
    attrs = node.attrs
    wt = g.tensors[w_name]
    if not wt.is_constant:
        return fallback(node, b, "Gemm with a non-constant B")
    m, n = b.shape(node.outputs[0])
    alpha, beta = float(attrs["alpha"]), float(attrs["beta"])
    c_value = g.const(c_name) if c_name else None
    if c_name and (c_value is None or c_value.size not in (1, n) or (c_value.ndim == 2 and c_value.shape[0] != 1)):
        return fallback(node, b, "Gemm with a C that is not a constant row vector")
    bias = W.bias_vector(g, c_name, n, b.precision, scale=beta) if beta != 0.0 else None
    enc = wt.encoding
    if attrs["transB"] and isinstance(enc, Clustered):
        weights = W.pack_clustered(k, enc, bias, b.precision, scale=alpha)
        return _emit_linear(node, b, k.clustered_gemm, weights, f"clustered {enc.describe()}")
    if attrs["transB"] and isinstance(enc, NNM) and enc.mode == "shared":
        return _gemm_nnm(node, b, enc, bias, alpha)
    matrix, how = W.stored_matrix(wt)
    if alpha != 1.0:
        matrix = matrix.astype(np.float32) * np.float32(alpha)
    packed = W.pack_dense(k, matrix, bias, b.precision, "nk" if attrs["transB"] else "kn")
    _emit_linear(node, b, k.gemm, packed, ("GEMV" if m == 1 else "GEMM") + f", {how}")


def _linear_input(node: Node, b: Builder) -> tuple[Slot, Slot | None]:
    """Gemm's A as (M, K): transA goes through a scratch transpose."""
    a = b.read(node.inputs[0], NCHW)
    if not node.attrs.get("transA"):
        return a, None
    return a, b.scratch(tuple(reversed(b.shape(node.inputs[0]))))


def _emit_linear(node: Node, b: Builder, fn, weights, note: str) -> None:
    a, transposed = _linear_input(node, b)
    y = b.write(node.outputs[0], NCHW)
    act, threads = _fused(node), b.threads_for(node)

    def bind(v: Views) -> Runner:
        call = partial(fn, v[transposed] if transposed else v[a], weights, v[y], *act, threads)
        if transposed is None:
            return call
        flip = partial(np.copyto, v[transposed], v[a].T)

        def run() -> None:
            flip()
            call()
        return run
    b.emit(node, "native", bind, note)


def _gemm_nnm(node: Node, b: Builder, enc: NNM, bias: np.ndarray | None, alpha: float) -> None:
    k = _kernels()
    centroids = enc.centroids if alpha == 1.0 else enc.centroids.astype(np.float32) * np.float32(alpha)
    packed = W.pack_dense(k, centroids.reshape(centroids.shape[0], -1), None, b.precision)
    assign = W.nnm_assignment(enc)
    a, transposed = _linear_input(node, b)
    m, _ = b.shape(node.outputs[0])
    y = b.write(node.outputs[0], NCHW)
    cent = b.scratch((m, centroids.shape[0]))
    act, threads = _fused(node), b.threads_for(node)

    def bind(v: Views) -> Runner:
        steps = []
        if transposed is not None:
            steps.append(partial(np.copyto, v[transposed], v[a].T))
        steps.append(partial(k.gemm, v[transposed] if transposed else v[a], packed, v[cent], *NO_ACT, threads))
        steps.append(partial(k.nnm_gather, v[cent], assign, bias, v[y], *act, threads))

        def run() -> None:
            for step in steps:
                step()
        return run
    b.emit(node, "native", bind, f"{enc.describe()}: centroid GEMM + gather")


@lowering("MatMul")
def matmul(node: Node, b: Builder) -> None:
    k = _kernels()
    a_name, w_name = node.inputs
    w_value = b.graph.const(w_name)
    out = node.outputs[0]
    if w_value is None or w_value.ndim != 2 or not b.is_activation(a_name):
        return _matmul_numpy(node, b)
    kk, n = w_value.shape
    packed = W.pack_dense(k, W.stored_matrix(b.graph.tensors[w_name])[0], None, b.precision, "kn")
    a = b.read(a_name, NCHW)
    y = b.write(out, NCHW)
    act, threads = _fused(node), b.threads_for(node)
    b.emit(node, "native", lambda v: partial(k.gemm, v[a].reshape(-1, kk), packed, v[y].reshape(-1, n), *act, threads),
           "GEMM over the flattened leading axes")


def _matmul_numpy(node: Node, b: Builder) -> None:
    """Both operands activations, or a batched / 1-D constant: numpy matmul into the arena."""
    operands = [b.read(name, NCHW) if b.is_activation(name)
                else round_to_storage(b.graph.const(name), b.precision) for name in node.inputs]
    y = b.write(node.outputs[0], NCHW)
    act, threads = _fused(node), b.threads_for(node)

    def bind(v: Views) -> Runner:
        lhs, rhs = (v[o] if isinstance(o, Slot) else o for o in operands)
        return _then_activate(partial(np.matmul, lhs, rhs, out=v[y]), v[y], act, threads)
    b.emit(node, "numpy", bind, "matmul of activations")


# -- elementwise --------------------------------------------------------------------------------
_NATIVE_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul"}
_NUMPY_BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}


def _operand_role(shape: tuple[int, ...], out_shape: tuple[int, ...], layout: str) -> str:
    """How an operand maps onto the output in storage order: full, channel (varies along the
    innermost stored axis only), scalar, or other."""
    if shape == out_shape:
        return "full"
    if math.prod(shape) == 1:
        return "scalar"
    padded = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
    inner = 1 if layout == NHWC else len(out_shape) - 1  # the axis stored innermost
    if all(d == 1 for i, d in enumerate(padded) if i != inner) and padded[inner] == out_shape[inner]:
        return "channel"
    return "other"


@lowering("Add", "Sub", "Mul", "Div")
def binary(node: Node, b: Builder) -> None:
    names = node.inputs[:2]
    out_shape = b.shape(node.outputs[0])
    full_activations = [n for n in names if b.is_activation(n) and b.shape(n) == out_shape]
    layout = NHWC if len(out_shape) == 4 and any(b.stored_layout(n) == NHWC for n in full_activations) else NCHW
    if len(out_shape) == 4 and same_bytes_in_both_layouts(out_shape):
        layout = NCHW
    roles = [_operand_role(b.shape(n), out_shape, layout) for n in names]
    op = node.op
    divisor = b.graph.const(names[1])
    if (op == "Div" and divisor is not None and roles[0] == "full" and roles[1] != "other"
            and b.is_activation(names[0])):
        # x / c == x * (1/c) up to one rounding: the native multiply with a reciprocal constant.
        return _native_binary(node, b, "mul", names, roles, layout, reciprocal=True)
    if op in _NATIVE_BINARY and "other" not in roles and any(
            r == "full" and b.is_activation(n) for r, n in zip(roles, names)):
        return _native_binary(node, b, _NATIVE_BINARY[op], names, roles, layout)
    _numpy_binary(node, b, layout)


def _constant_operand(b: Builder, name: str, role: str, layout: str, out_shape, reciprocal: bool) -> np.ndarray:
    value = round_to_storage(np.asarray(b.graph.const(name), dtype=np.float32), b.precision)
    if reciprocal:
        with np.errstate(divide="ignore"):  # x / 0 = x * inf, as IEEE division
            value = (np.float32(1) / value).astype(np.float32)
    if role == "full" and layout == NHWC:
        value = value.transpose(0, 2, 3, 1)
    return np.ascontiguousarray(value.reshape(-1) if role != "full" else value, dtype=np.float32)


def _native_binary(node: Node, b: Builder, op: str, names, roles, layout, reciprocal: bool = False) -> None:
    k = _kernels()
    out_shape = b.shape(node.outputs[0])
    # The kernel's `a` is a full-shape activation; the other operand broadcasts or is a
    # constant (b_first keeps the operand order of Sub).
    first_full = roles[0] == "full" and b.is_activation(names[0])
    a_name, b_name = (names[0], names[1]) if first_full else (names[1], names[0])
    b_role = roles[1] if first_full else roles[0]
    a = b.read(a_name, layout)
    other = b.read(b_name, layout) if b.is_activation(b_name) else _constant_operand(
        b, b_name, b_role, layout, out_shape, reciprocal)
    y = b.write(node.outputs[0], layout)
    act, threads = _fused(node), b.threads_for(node)

    def bind(v: Views) -> Runner:
        rhs = other if not isinstance(other, Slot) else (v[other] if b_role == "full" else v[other].reshape(-1))
        return partial(k.binary, op, v[a], rhs, v[y], not first_full, *act, threads)
    b.emit(node, "native", bind, f"{op} ({b_role} operand)")


def _numpy_binary(node: Node, b: Builder, layout: str) -> None:
    """General broadcasting (or Div of activations): numpy on graph-order views, into the arena."""
    operands = [b.read(n, layout) if b.is_activation(n)
                else round_to_storage(np.asarray(b.graph.const(n)), b.precision) for n in node.inputs[:2]]
    y = b.write(node.outputs[0], layout)
    fn, act, threads = _NUMPY_BINARY[node.op], _fused(node), b.threads_for(node)

    def bind(v: Views) -> Runner:
        lhs, rhs = (v.logical(o) if isinstance(o, Slot) else o for o in operands)
        return _then_activate(partial(fn, lhs, rhs, out=v.logical(y)), v[y], act, threads)
    b.emit(node, "numpy", bind, f"{node.op} with general broadcasting")


@lowering(*ACTIVATION_OPS)
def activation(node: Node, b: Builder) -> None:
    k = _kernels()
    x = b.read_stored(node.inputs[0])
    y = b.write(node.outputs[0], x.layout)
    act, threads = act_args(node.attrs["activation"]), b.threads_for(node)
    fused = _fused(node)

    def bind(v: Views) -> Runner:
        copy = partial(np.copyto, v[y], v[x])
        first = partial(k.activation, v[y], *act, threads)
        second = partial(k.activation, v[y], *fused, threads) if fused != NO_ACT else None

        def run() -> None:
            copy()
            first()
            if second is not None:
                second()
        return run
    b.emit(node, "native", bind, node.attrs["activation"].kind)


@lowering("BatchNormalization")
def batch_norm(node: Node, b: Builder) -> None:
    """Per-channel x * scale + shift (two native passes), for BatchNorms the passes kept."""
    k = _kernels()
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
    act, threads = _fused(node), b.threads_for(node)

    def bind(v: Views) -> Runner:
        multiply = partial(k.binary, "mul", v[x], scale, v[y], False, *NO_ACT, threads)
        add = partial(k.binary, "add", v[y], shift, v[y], False, *act, threads)

        def run() -> None:
            multiply()
            add()
        return run
    b.emit(node, "native", bind, "per-channel scale and shift")


@lowering("Softmax")
def softmax(node: Node, b: Builder) -> None:
    k = _kernels()
    shape = b.shape(node.inputs[0])
    axis, coerce = node.attrs["axis"], node.attrs["coerce_2d"]
    rank = len(shape)
    threads = b.threads_for(node)
    if rank == 4 and axis == 1 and not coerce and shape[2] * shape[3] > 1 and b.stored_layout(node.inputs[0]) == NHWC:
        x = b.read(node.inputs[0], NHWC)  # channels are innermost: one softmax per pixel row
        y = b.write(node.outputs[0], NHWC)
    elif axis == rank - 1 or coerce:
        x = b.read(node.inputs[0], NCHW)
        y = b.write(node.outputs[0], NCHW)
        rows = math.prod(shape[:axis])
        b.emit(node, "native", lambda v: _then_activate(
            partial(k.softmax, v[x].reshape(rows, -1), v[y].reshape(rows, -1), threads), v[y], _fused(node), threads),
            "two-pass softmax")
        return
    else:
        return fallback(node, b, f"Softmax over axis {axis} of a rank-{rank} tensor")
    b.emit(node, "native", lambda v: _then_activate(partial(k.softmax, v[x], v[y], threads), v[y], _fused(node),
                                                    threads), "two-pass softmax over channels")


# -- pooling ------------------------------------------------------------------------------------
@lowering("MaxPool", "AveragePool")
def pool(node: Node, b: Builder) -> None:
    k = _kernels()
    shape = b.shape(node.inputs[0])
    if len(shape) != 4:
        return fallback(node, b, "pooling over a rank other than 4")
    a = node.attrs
    _, sweep_pads = pool_sweep(node, shape[2], shape[3])
    overhang = tuple(s - p for s, p in zip(sweep_pads, a["pads"])) != (0, 0, 0, 0)
    average = node.op == "AveragePool"
    include_pad = bool(average and a["count_include_pad"])
    if include_pad and overhang:
        # The kernel would count the ceil_mode overhang as padding; the reference does not.
        return fallback(node, b, "AveragePool counting pads with a ceil_mode overhang")
    x = b.read(node.inputs[0], NHWC)
    y = b.write(node.outputs[0], NHWC)
    fn = k.avg_pool if average else k.max_pool
    args = (tuple(a["kernel_shape"]), tuple(a["strides"]), tuple(a["dilations"]), list(sweep_pads), include_pad)
    act, threads = _fused(node), b.threads_for(node)
    b.emit(node, "native", lambda v: partial(fn, v[x], v[y], *args, *act, threads), node.op)


@lowering("GlobalAveragePool", "GlobalMaxPool")
def global_pool(node: Node, b: Builder) -> None:
    k = _kernels()
    shape = b.shape(node.inputs[0])
    if len(shape) != 4:
        return fallback(node, b, "global pooling over a rank other than 4")
    n, c = shape[:2]
    x = b.read(node.inputs[0], NHWC)
    y = b.write(node.outputs[0], NHWC)
    act, threads = _fused(node), b.threads_for(node)
    if node.op == "GlobalAveragePool":
        b.emit(node, "native", lambda v: partial(k.global_avg_pool, v[x], v[y].reshape(n, c), *act, threads),
               "global average")
        return
    b.emit(node, "numpy", lambda v: _then_activate(
        partial(np.max, v[x], axis=(1, 2), out=v[y].reshape(n, c)), v[y], act, threads), "max over H, W")


@lowering("ReduceMean")
def reduce_mean(node: Node, b: Builder) -> None:
    k = _kernels()
    shape = b.shape(node.inputs[0])
    axes, keep = tuple(node.attrs["axes"]), node.attrs["keepdims"]
    act, threads = _fused(node), b.threads_for(node)
    if len(shape) == 4 and axes == (2, 3):  # a global average pool
        n, c = shape[:2]
        x = b.read(node.inputs[0], NHWC)
        y = b.write(node.outputs[0], NHWC if keep else NCHW)
        b.emit(node, "native", lambda v: partial(k.global_avg_pool, v[x], v[y].reshape(n, c), *act, threads),
               "global average")
        return
    x = b.read_stored(node.inputs[0])
    y = b.write(node.outputs[0], NCHW)

    def bind(v: Views) -> Runner:
        src, dst = v.logical(x), v[y].reshape(b.shape(node.outputs[0]))
        mean = partial(np.mean, src, axis=axes, keepdims=bool(keep), dtype=np.float32, out=dst)
        return _then_activate(mean, v[y], act, threads)
    b.emit(node, "numpy", bind, f"mean over axes {axes}")


@lowering("LRN")
def lrn(node: Node, b: Builder) -> None:
    fallback(node, b, "no native LRN kernel")


# -- layout ops ---------------------------------------------------------------------------------
@lowering("Reshape")
def reshape(node: Node, b: Builder) -> None:
    x = b.read(node.inputs[0], NCHW)  # a view of graph-order bytes
    b.alias(node.outputs[0], x)
    _mark_view(node, b, "view of graph-order bytes")


def _mark_view(node: Node, b: Builder, note: str) -> None:
    b.emit(node, "view", lambda v: _noop, note)


def _noop() -> None:
    return None


@lowering("Transpose")
def transpose(node: Node, b: Builder) -> None:
    x = b.read_stored(node.inputs[0])
    perm = tuple(node.attrs["perm"])
    # Storage axis order of the result: contiguous iff it is the identity -> a free view.
    storage_order = (0, 3, 1, 2) if x.layout == NHWC else tuple(range(len(perm)))  # logical -> stored axis
    order = tuple(storage_order[p] for p in perm)
    if [ax for ax in order if x.storage_shape[ax] > 1] == sorted(ax for ax in order if x.storage_shape[ax] > 1):
        b.alias(node.outputs[0], x)
        return _mark_view(node, b, "transpose that keeps the stored order")
    y = b.write(node.outputs[0], NCHW)
    b.emit(node, "numpy", lambda v: partial(np.copyto, v[y], v.logical(x).transpose(perm)), "transposing copy")


@lowering("Concat")
def concat(node: Node, b: Builder) -> None:
    out_shape = b.shape(node.outputs[0])
    axis = node.attrs["axis"]
    names = [n for n in node.inputs if n]
    nhwc = (len(out_shape) == 4 and axis == 1 and not same_bytes_in_both_layouts(out_shape)
            and any(b.is_activation(n) and b.stored_layout(n) == NHWC for n in names))
    layout = NHWC if nhwc else NCHW
    sources = [b.read(n, layout) if b.is_activation(n)
               else round_to_storage(np.asarray(b.graph.const(n), dtype=np.float32), b.precision) for n in names]
    y = b.write(node.outputs[0], layout)
    sizes = [b.shape(n)[axis] for n in names]
    act, threads = _fused(node), b.threads_for(node)

    def bind(v: Views) -> Runner:
        dst = v.logical(y)
        copies, start = [], 0
        for src, size in zip(sources, sizes):
            index = (slice(None),) * axis + (slice(start, start + size),)
            copies.append(partial(np.copyto, dst[index], v.logical(src) if isinstance(src, Slot) else src))
            start += size

        def run() -> None:
            for copy in copies:
                copy()
        return _then_activate(run, v[y], act, threads)
    b.emit(node, "numpy", bind, f"copies into {'channel' if nhwc else 'axis'} slices")


@lowering("Pad")
def pad(node: Node, b: Builder) -> None:
    a = node.attrs
    if a["mode"] != "constant":
        return fallback(node, b, f"Pad mode {a['mode']!r}")
    x = b.read_stored(node.inputs[0])
    y = b.write(node.outputs[0], x.layout)
    rank = len(b.shape(node.inputs[0]))
    begins, ends = a["pads"][:rank], a["pads"][rank:]
    crop = tuple(slice(max(0, -p), d - max(0, -e)) for p, e, d in zip(begins, ends, b.shape(node.inputs[0])))
    place = tuple(slice(max(0, p), max(0, p) + (s.stop - s.start)) for p, s in zip(begins, crop))
    value = np.float32(a["value"])
    act, threads = _fused(node), b.threads_for(node)

    def bind(v: Views) -> Runner:
        out, fill = v.logical(y), partial(v[y].fill, value)
        copy = partial(np.copyto, out[place], v.logical(x)[crop])

        def run() -> None:
            fill()
            copy()
        return _then_activate(run, v[y], act, threads)
    b.emit(node, "numpy", bind, "constant pad")
