"""Broadcasting arithmetic (Add, Sub, Mul, Div, Pow), PRelu and the element-wise activations
(stand-alone or fused into a producer): ReLU family, sigmoid/tanh, GELU, Mish, Swish and the math
functions (Erf, Exp, Log, Abs, Sqrt, Reciprocal, Neg, Softplus)."""
from __future__ import annotations

import numpy as np

from ..errors import UnsupportedModelError
from ..graph import Node
from ..runtime.activations import ACTIVATION_PARAMS, GELU_APPROXIMATIONS, Activation
from .geometry import broadcast_shapes
from .registry import Kind, Signature, op

ACTIVATION = Kind(lambda v: isinstance(v, Activation), "an activation")
BINARY_OPS = ("Add", "Sub", "Mul", "Div")

# Add may carry a fused activation (a residual's ReLU); the backends' binary kernels apply one.
op("Add", family="elementwise", signature=Signature(2), fusable=True)
op("Sub", "Mul", "Div", family="elementwise", signature=Signature(2))
binary = op.shared(*BINARY_OPS)
power = op("Pow", family="elementwise", signature=Signature(2),
           note="cpu: a native square for exponent 2, numpy otherwise")
prelu = op("PRelu", family="elementwise", signature=Signature(2),
           note="cpu: native for one slope, numpy for per-channel or full slopes")
_ACTIVATION_SIGNATURE = Signature(1, 0, {"activation": ACTIVATION})
op(*[kind for kind in ACTIVATION_PARAMS if kind != "Swish"], family="elementwise", signature=_ACTIVATION_SIGNATURE)
op("Swish", family="elementwise", signature=_ACTIVATION_SIGNATURE,
   note="alpha 1 (SiLU) everywhere; another alpha is never fused and runs on the reference kernel on opencl")
activations = op.shared(*ACTIVATION_PARAMS)


# -- binary ---------------------------------------------------------------------------------------
@binary.importer
def _import_binary(imp, name, inputs, outputs, attrs):
    if imp.op_type == "Div" and _is_one(imp.graph.const(inputs[0])) and imp.graph.const(inputs[1]) is None \
            and np.ndim(imp.graph.const(inputs[0])) <= len(imp.shape(inputs[1])):
        # 1 / x (torch.rsqrt, reciprocals of norms): the Reciprocal activation, native and fusable
        return activation_node(name, inputs[1:], outputs, Activation("Reciprocal"))
    return Node(imp.op_type, name, inputs[:2], outputs[:1], {})


def _is_one(value: np.ndarray | None) -> bool:
    return value is not None and value.size == 1 and value.dtype.kind == "f" and float(value.reshape(-1)[0]) == 1.0


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


# -- Pow ------------------------------------------------------------------------------------------
@power.importer
def _import_pow(imp, name, inputs, outputs, attrs):
    base, exponent = imp.graph.const(inputs[0]), imp.graph.const(inputs[1])
    if base is not None and exponent is not None:  # shape arithmetic: folded with the ONNX types
        return Node("Pow", name, inputs[:2], outputs[:1], {})
    if exponent is not None and exponent.dtype != np.float32:
        # ONNX allows integer and double exponent tensors; run-time tensors are float32 here
        converted = imp.graph.unique_name(f"{inputs[1]}.float")
        imp.graph.add_constant(converted, exponent.astype(np.float32))
        return Node("Pow", name, [inputs[0], converted], outputs[:1], {})
    return Node("Pow", name, inputs[:2], outputs[:1], {})


@power.shape
def _pow_shape(node, shapes):
    return [broadcast_shapes(*shapes)]


@power.reference
def _pow_reference(node, base: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    # The base's type (ONNX): an integer base folds as integers (shape arithmetic).
    return c99_pow(base, exponent).astype(base.dtype)


def c99_pow(base: np.ndarray, exponent: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """np.power with C99 pow's special values (ONNX Runtime's, OpenCL's). numpy computes a power
    by one scalar exponent 0.5 as a square root, which gives (-inf) ** 0.5 = NaN and (-0) ** 0.5 = -0
    where pow gives +inf and +0; those two are put right."""
    with np.errstate(all="ignore"):  # NaN and infinities are results here, not errors
        result = np.power(base, exponent, out=out)
        if np.size(exponent) == 1 and result.dtype.kind == "f" and float(np.reshape(exponent, -1)[0]) == 0.5:
            np.add(result, result.dtype.type(0), out=result)  # -0 + 0 = +0; everything else unchanged
            np.copyto(result, result.dtype.type(np.inf), where=np.isneginf(base))
    return result


@power.torch
def _pow_torch(m, node, base, exponent):
    import torch
    return torch.pow(base, exponent)


# -- PRelu ----------------------------------------------------------------------------------------
@prelu.importer
def _import_prelu(imp, name, inputs, outputs, attrs):
    return Node("PRelu", name, inputs[:2], outputs[:1], {})


@prelu.shape
def _prelu_shape(node, shapes):
    x, slope = shapes
    if broadcast_shapes(x, slope) != tuple(x):  # ONNX: the slope broadcasts to X, never X to it
        raise UnsupportedModelError(f"node {node.name!r}: PRelu slope of shape {tuple(slope)} does not "
                                    f"broadcast to the input's {tuple(x)}")
    return [tuple(x)]


@prelu.reference
def _prelu_reference(node, x: np.ndarray, slope: np.ndarray) -> np.ndarray:
    return np.where(x >= 0, x, x * slope).astype(x.dtype)  # a NaN x fails the test: NaN * slope


@prelu.torch
def _prelu_torch(m, node, x, slope):
    import torch
    return torch.where(x >= 0, x, x * slope)


# -- activations ----------------------------------------------------------------------------------
def activation_node(name: str, inputs: list[str], outputs: list[str], act: Activation) -> Node:
    return Node(act.kind, name, inputs[:1], outputs[:1], {"activation": act})


_DEFAULT_PARAMS = {"LeakyRelu": {"alpha": 0.01}, "HardSigmoid": {"alpha": 0.2, "beta": 0.5}, "Swish": {"alpha": 1.0}}


@activations.importer
def _import_activation(imp, name, inputs, outputs, attrs):
    kind = imp.op_type
    if kind == "Clip":
        return _import_clip(imp, name, inputs, outputs, attrs)
    if kind == "Gelu":
        return _import_gelu(name, inputs, outputs, attrs)
    defaults = _DEFAULT_PARAMS.get(kind, {})
    params = tuple(float(attrs.get(p, defaults.get(p, 0.0))) for p in ACTIVATION_PARAMS[kind])
    return activation_node(name, inputs, outputs, Activation(kind, params))


def _import_gelu(name, inputs, outputs, attrs):
    approximate = attrs.get("approximate", "none")
    if approximate not in GELU_APPROXIMATIONS:
        raise UnsupportedModelError(f"node {name!r}: Gelu approximate={approximate!r} is not one of "
                                    f"{', '.join(GELU_APPROXIMATIONS)}")
    act = Activation("Gelu", (float(GELU_APPROXIMATIONS.index(approximate)),))
    return activation_node(name, inputs, outputs, act)


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
