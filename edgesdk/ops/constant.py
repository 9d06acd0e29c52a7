"""Ops that only ever run on constants, at import time (the shape arithmetic exporters emit).

A model may use them only where their inputs are constant once shapes are known, e.g. torch's
``x.view(x.size(0), -1)`` becomes Shape -> Gather -> Unsqueeze -> Concat -> Reshape, which the
importer folds into a Reshape with a fixed shape. Attributes here are the raw ONNX ones.
"""
from __future__ import annotations

import numpy as np

from ..errors import UnsupportedModelError
from ..graph import Node
from .registry import op

CONSTANT_ONLY_OPS = ("Shape", "Size", "Cast", "ConstantOfShape", "Range", "Equal", "Less", "Greater",
                     "Where", "Not", "Floor", "Ceil", "Min", "Max")
folded = op(*CONSTANT_ONLY_OPS, family="constant")
constant = op("Constant", "CastLike", family="constant")
shape_of = op.shared("Shape", "Size")
# Imported as raw nodes (the only thing done to them is folding): the shape and size ops and
# Cast/CastLike, which also stand for run-time tensors, have importers of their own below.
_RAW = [name for name in CONSTANT_ONLY_OPS if name not in ("Shape", "Size", "Cast")]


def _import_raw(imp, name, inputs, outputs, attrs):
    return Node(imp.op_type, name, list(inputs), list(outputs), dict(attrs))


op.shared(*_RAW).importer(_import_raw)


# -- importers that act right away ----------------------------------------------------------------
@constant.importer
def _import_constant(imp, name, inputs, outputs, attrs):
    if imp.op_type == "CastLike":
        return _import_cast(imp, name, inputs, outputs, attrs)
    if "value" in attrs:
        value = imp.tensor_value(attrs["value"], f"Constant {name!r}")
    elif "value_float" in attrs:
        value = np.array(attrs["value_float"], dtype=np.float32)
    elif "value_floats" in attrs:
        value = np.array(attrs["value_floats"], dtype=np.float32)
    elif "value_int" in attrs:
        value = np.array(attrs["value_int"], dtype=np.int64)
    elif "value_ints" in attrs:
        value = np.array(attrs["value_ints"], dtype=np.int64)
    else:
        raise UnsupportedModelError(f"node {name!r}: Constant with {sorted(attrs)} is not supported")
    imp.graph.add_constant(outputs[0], value)
    return None


@shape_of.importer
def _import_shape_of(imp, name, inputs, outputs, attrs):
    # Shapes are static, so Shape/Size are constants even when their input is not.
    stand_in = np.broadcast_to(np.float32(0), imp.shape(inputs[0]))
    node = Node(imp.op_type, name, inputs[:1], outputs[:1], attrs)
    imp.graph.add_constant(outputs[0], _REFERENCE[imp.op_type](node, stand_in))
    return None


def _import_cast(imp, name, inputs, outputs, attrs):
    if len(inputs) > 1:  # CastLike: the target type is the second input's
        target = imp.graph.tensors[inputs[1]].dtype
    else:
        target = imp.np_dtype(attrs["to"], f"node {name!r}'s Cast target")
    target = imp.stored_dtype(target)  # a cast to float16 is a cast to float32 inside (float16 models)
    value = imp.graph.const(inputs[0])
    if value is not None:  # CastLike needs only the other input's (static) dtype, not its value
        imp.graph.add_constant(outputs[0], value.astype(target))
        return None
    if imp.graph.tensors[inputs[0]].dtype == target:
        return imp.alias(name, inputs[0], outputs[0])  # a cast to the same type is a no-op
    raise UnsupportedModelError(f"node {name!r}: casting a run-time tensor to {target} is not supported; "
                                f"edgesdk runs float32 tensors")


op.shared("Cast").importer(_import_cast)


# -- reference kernels ----------------------------------------------------------------------------
def _shape(node, x: np.ndarray) -> np.ndarray:
    dims = np.array(x.shape, dtype=np.int64)
    start, end = node.attrs.get("start", 0), node.attrs.get("end", len(dims))
    return dims[start:end]


def _size(node, x: np.ndarray) -> np.ndarray:
    return np.array(x.size, dtype=np.int64)


def _cast(node, x: np.ndarray) -> np.ndarray:
    import onnx.helper  # only the ONNX importer folds these ops; running a package never imports onnx
    return x.astype(onnx.helper.tensor_dtype_to_np_dtype(node.attrs["to"]))


def _constant_of_shape(node, shape_: np.ndarray) -> np.ndarray:
    import onnx.numpy_helper  # only the ONNX importer folds these ops
    value = node.attrs.get("value")
    fill = onnx.numpy_helper.to_array(value).reshape(-1)[0] if value is not None else np.float32(0)
    return np.full(tuple(int(d) for d in shape_), fill, dtype=np.asarray(fill).dtype)


def _range(node, start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> np.ndarray:
    return np.arange(start, limit, delta, dtype=start.dtype)


def _unary(fn):
    return lambda node, x: fn(x)


def _binary(fn):
    return lambda node, a, b: fn(a, b)


_REFERENCE = {
    "Shape": _shape, "Size": _size, "Cast": _cast,
    "ConstantOfShape": _constant_of_shape, "Range": _range,
    "Not": _unary(np.logical_not), "Floor": _unary(np.floor), "Ceil": _unary(np.ceil),
    "Equal": _binary(np.equal), "Less": _binary(np.less), "Greater": _binary(np.greater),
    "Where": lambda node, cond, a, b: np.where(cond, a, b),
    "Min": lambda node, *xs: np.minimum.reduce(np.broadcast_arrays(*xs)),
    "Max": lambda node, *xs: np.maximum.reduce(np.broadcast_arrays(*xs)),
}
for _name, _fn in _REFERENCE.items():
    op.shared(_name).reference(_fn)
