"""Broadcasting arithmetic and element-wise activations (stand-alone or fused into a producer)."""
from __future__ import annotations

import numpy as np

from ..graph import Node
from ..runtime.activations import ACTIVATION_PARAMS, Activation
from .geometry import broadcast_shapes
from .registry import Kind, Signature, op

ACTIVATION = Kind(lambda v: isinstance(v, Activation), "an activation")
BINARY_OPS = ("Add", "Sub", "Mul", "Div")

# Add may carry a fused activation (a residual's ReLU); the backends' binary kernels apply one.
op("Add", family="elementwise", signature=Signature(2), fusable=True)
op("Sub", "Mul", "Div", family="elementwise", signature=Signature(2))
binary = op.shared(*BINARY_OPS)
activations = op(*ACTIVATION_PARAMS, family="elementwise", signature=Signature(1, 0, {"activation": ACTIVATION}))


# -- binary ---------------------------------------------------------------------------------------
@binary.importer
def _import_binary(imp, name, inputs, outputs, attrs):
    return Node(imp.op_type, name, inputs[:2], outputs[:1], {})


@binary.shape
def _binary_shape(node, shapes):
    return [broadcast_shapes(*shapes)]


_NUMPY_BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}


@binary.reference
def _binary_reference(node, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if node.op == "Div":
        if np.issubdtype(a.dtype, np.integer):
            # ONNX integer division truncates toward zero; numpy's // floors.
            return (np.abs(a) // np.abs(b) * np.sign(a) * np.sign(b)).astype(a.dtype)
        return np.divide(a, b)
    return _NUMPY_BINARY[node.op](a, b)


@binary.torch
def _binary_torch(m, node, a, b):
    return {"Add": a.__add__, "Sub": a.__sub__, "Mul": a.__mul__, "Div": a.__truediv__}[node.op](b)


# -- activations ----------------------------------------------------------------------------------
def activation_node(name: str, inputs: list[str], outputs: list[str], act: Activation) -> Node:
    return Node(act.kind, name, inputs[:1], outputs[:1], {"activation": act})


_DEFAULT_PARAMS = {"LeakyRelu": {"alpha": 0.01}, "HardSigmoid": {"alpha": 0.2, "beta": 0.5}}


@activations.importer
def _import_activation(imp, name, inputs, outputs, attrs):
    kind = imp.op_type
    if kind == "Clip":
        return _import_clip(imp, name, inputs, outputs, attrs)
    defaults = _DEFAULT_PARAMS.get(kind, {})
    params = tuple(float(attrs.get(p, defaults.get(p, 0.0))) for p in ACTIVATION_PARAMS[kind])
    return activation_node(name, inputs, outputs, Activation(kind, params))


def _import_clip(imp, name, inputs, outputs, attrs):
    # An omitted bound is the float range's end (ONNX spec, as ONNX Runtime): Clip(+-inf) = +-3.4e38.
    lowest, highest = float(-np.finfo(np.float32).max), float(np.finfo(np.float32).max)
    if imp.opset < 11:
        lo, hi = attrs.get("min", lowest), attrs.get("max", highest)
    else:
        lo_v = imp.constant_input(name, inputs, 1, "Clip min")
        hi_v = imp.constant_input(name, inputs, 2, "Clip max")
        lo = lowest if lo_v is None else float(lo_v)
        hi = highest if hi_v is None else float(hi_v)
    return activation_node(name, inputs, outputs, Activation("Clip", (float(lo), float(hi))))


@activations.shape
def _activation_shape(node, shapes):
    return [shapes[0]]


@activations.reference
def _activation_reference(node, x: np.ndarray) -> np.ndarray:
    return node.attrs["activation"].apply(x)


@activations.torch
def _activation_torch(m, node, x):
    return node.attrs["activation"].apply_torch(x)
