"""The cpu lowering of the elementwise family (``edgesdk/ops/elementwise.py``): Broadcasting arithmetic and stand-alone activations."""
from __future__ import annotations

import math
from functools import partial

import numpy as np

from ....graph import Node
from ....runtime.precision import round_to_storage
from ..program import NCHW, NHWC, Builder, Runner, Slot, Views, same_bytes_in_both_layouts
from .base import ACTIVATION_OPS, NO_ACT, fused_act, native_kernels, then_activate, act_args, lowering

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
        return partial(k.binary, op, v[a], rhs, v[y], not first_full, *act, threads)
    b.emit(node, "native", bind, f"{op} ({b_role} operand)")


def _numpy_binary(node: Node, b: Builder, layout: str) -> None:
    """General broadcasting (or Div of activations): numpy on graph-order views, into the arena."""
    operands = [b.read(n, layout) if b.is_activation(n)
                else round_to_storage(np.asarray(b.graph.const(n)), b.precision) for n in node.inputs[:2]]
    y = b.write(node.outputs[0], layout)
    fn, act, threads = _NUMPY_BINARY[node.op], fused_act(node), b.threads_for(node)

    def bind(v: Views) -> Runner:
        lhs, rhs = (v.logical(o) if isinstance(o, Slot) else o for o in operands)
        return then_activate(partial(fn, lhs, rhs, out=v.logical(y)), v[y], act, threads)
    b.emit(node, "numpy", bind, f"{node.op} with general broadcasting")


@lowering(*ACTIVATION_OPS)
def activation(node: Node, b: Builder) -> None:
    k = native_kernels()
    x = b.read_stored(node.inputs[0])
    y = b.write(node.outputs[0], x.layout)
    act, threads = act_args(node.attrs["activation"]), b.threads_for(node)
    fused = fused_act(node)

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
