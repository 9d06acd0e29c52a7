"""The cpu lowering of the elementwise family (``edgesdk/ops/elementwise.py``): broadcasting
arithmetic, Pow, PRelu and stand-alone activations."""
from __future__ import annotations

import math
from functools import partial

import numpy as np

from ....graph import Node
from ....ops.elementwise import c99_pow
from ....runtime.precision import round_constant
from ..program import NCHW, NHWC, Builder, Runner, Slot, Views, same_bytes_in_both_layouts
from .base import ACTIVATION_OPS, NO_ACT, ActArgs, fused_act, in_order, native_kernels, then_activate, act_args, lowering

_NATIVE_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul"}
_NUMPY_BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide, "Pow": c99_pow}


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
    value = round_constant(np.asarray(b.graph.const(name), dtype=np.float32), b.precision)
    if reciprocal:
        with np.errstate(divide="ignore"):  # x / 0 = x * inf, as IEEE division
            value = (np.float32(1) / value).astype(np.float32)
    if role == "full" and layout == NHWC:
        value = value.transpose(0, 2, 3, 1)
    return np.ascontiguousarray(value.reshape(-1) if role != "full" else value, dtype=np.float32)


def _native_binary(node: Node, b: Builder, op: str, names, roles, layout, reciprocal: bool = False) -> None:
    k = native_kernels()
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
    act, threads = fused_act(node), b.threads_for(node)

    def bind(v: Views) -> Runner:
        rhs = other if not isinstance(other, Slot) else (v[other] if b_role == "full" else v[other].reshape(-1))
        return k.steps.binary(op, v[a], rhs, v[y], not first_full, *act, threads)
    b.emit(node, "native", bind, f"{op} ({b_role} operand)")


def _numpy_binary(node: Node, b: Builder, layout: str) -> None:
    """General broadcasting (or Div of activations): numpy on graph-order views, into the arena."""
    operands = [b.read(n, layout) if b.is_activation(n)
                else round_constant(np.asarray(b.graph.const(n)), b.precision) for n in node.inputs[:2]]
    y = b.write(node.outputs[0], layout)
    fn, act, threads = _NUMPY_BINARY[node.op], fused_act(node), b.threads_for(node)

    def bind(v: Views) -> Runner:
        lhs, rhs = (v.logical(o) if isinstance(o, Slot) else o for o in operands)
        return then_activate(partial(fn, lhs, rhs, out=v.logical(y)), v[y], act, threads)
    b.emit(node, "numpy", bind, f"{node.op} with general broadcasting" if node.op != "Pow" else "Pow")


@lowering("Pow")
def power(node: Node, b: Builder) -> None:
    base, exponent = node.inputs[:2]
    value = b.graph.const(exponent)
    if (b.is_activation(base) and b.shape(base) == b.shape(node.outputs[0]) and value is not None
            and value.size == 1 and float(value.reshape(-1)[0]) == 2.0):
        # x^2 == x * x exactly, NaN and infinities included (pow(-inf, 2) = inf)
        return _copy_then_activate(node, b, base, ("square", None, None), "Pow 2 as a square")
    layout = b.stored_layout(base) if b.is_activation(base) and b.shape(base) == b.shape(node.outputs[0]) else NCHW
    _numpy_binary(node, b, layout)


@lowering("PRelu")
def prelu(node: Node, b: Builder) -> None:
    x_name, slope_name = node.inputs[:2]
    slope = b.graph.const(slope_name)
    if b.is_activation(x_name) and slope is not None and slope.size == 1:
        # one slope: PRelu is LeakyRelu (x < 0 ? x * slope : x; NaN fails the test and stays NaN)
        alpha = float(round_constant(np.asarray(slope, np.float32), b.precision).reshape(-1)[0])
        return _copy_then_activate(node, b, x_name, ("leaky_relu", alpha, None), "PRelu with one slope")
    _numpy_prelu(node, b)


def _numpy_prelu(node: Node, b: Builder) -> None:
    """y = x * slope, then x copied back where x >= 0 (slope per channel or full, broadcast)."""
    x_name = node.inputs[0]
    layout = b.stored_layout(x_name) if b.is_activation(x_name) else NCHW
    x, slope = (b.read(n, layout) if b.is_activation(n)
                else round_constant(np.asarray(b.graph.const(n), np.float32), b.precision) for n in node.inputs[:2])
    y = b.write(node.outputs[0], layout)

    def bind(v: Views) -> Runner:
        xs, slopes, out = (v.logical(o) if isinstance(o, Slot) else o for o in (x, slope, y))
        non_negative = np.empty_like(out, dtype=bool)  # per arena, laid out as the output

        def run() -> None:
            np.greater_equal(xs, 0, out=non_negative)
            np.multiply(xs, slopes, out=out)
            np.copyto(out, xs, where=non_negative)
        return run
    b.emit(node, "numpy", bind, "PRelu, slope broadcast")


@lowering(*ACTIVATION_OPS)
def activation(node: Node, b: Builder) -> None:
    act = node.attrs["activation"]
    if not act.fusable:
        return _swish(node, b, act.param("alpha"))
    _copy_then_activate(node, b, node.inputs[0], act_args(act), str(act))


def _copy_then_activate(node: Node, b: Builder, x_name: str, act: ActArgs, note: str) -> None:
    """y = act(x) by the native in-place activation on a copy (then the node's fused one, if any)."""
    k = native_kernels()
    x = b.read_stored(x_name)
    y = b.write(node.outputs[0], x.layout)
    threads, fused = b.threads_for(node), fused_act(node)

    def bind(v: Views) -> Runner:
        src, dst = v[x], v[y]
        copy = k.steps.copy_bytes(src, dst) if src.flags.c_contiguous else partial(np.copyto, dst, src)
        return in_order([copy, k.steps.activation(dst, *act, threads)]
                        + ([k.steps.activation(dst, *fused, threads)] if fused != NO_ACT else []))
    b.emit(node, "native", bind, note)


def _swish(node: Node, b: Builder, alpha: float) -> None:
    """x * sigmoid(alpha x) for a slope the native kernels do not have: scale, sigmoid, multiply."""
    k = native_kernels()
    x = b.read_stored(node.inputs[0])
    y = b.write(node.outputs[0], x.layout)
    threads = b.threads_for(node)

    def bind(v: Views) -> Runner:
        xs, out = v[x], v[y]

        def run() -> None:
            np.multiply(xs, np.float32(alpha), out=out)
            k.activation(out, "sigmoid", threads=threads)
            np.multiply(out, xs, out=out)
        return run
    b.emit(node, "numpy", bind, f"Swish alpha={alpha:g}: scale, native sigmoid, multiply")
