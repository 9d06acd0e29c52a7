"""Layout and data movement: Reshape (a view; also what Identity, Dropout, Flatten, Squeeze and
Unsqueeze import as), Transpose, Concat, Pad."""
from __future__ import annotations

import math

import numpy as np

from ..errors import UnsupportedModelError
from ..graph import Node
from ..runtime.sizes import check_attribute, check_tensor_size
from .geometry import normalize_axis
from .reduce import reduce_axes
from .registry import FLOAT, INT, STRING, Signature, ints, op

reshape = op("Reshape", family="tensor", signature=Signature(1, 0, {"shape": ints()}))
transpose = op("Transpose", family="tensor", signature=Signature(1, 0, {"perm": ints()}))
concat = op("Concat", family="tensor", signature=Signature(1, 0, {"axis": INT}, variadic=True))
pad = op("Pad", family="tensor", signature=Signature(1, 0, {"pads": ints(), "mode": STRING, "value": FLOAT}))
views = op("Identity", "Dropout", "Flatten", "Squeeze", "Unsqueeze", family="tensor", imports_as="Reshape")
PAD_MODES = ("constant", "reflect", "edge", "wrap")


# -- Reshape and the ops that import as one -------------------------------------------------------
@reshape.importer
def _import_reshape(imp, name, inputs, outputs, attrs):
    target = imp.constant_input(name, inputs, 1, "Reshape shape")
    if target is None:
        raise UnsupportedModelError(f"node {name!r}: Reshape has no shape input")
    shape = imp.shape(inputs[0])
    dims = [int(d) for d in target.reshape(-1)]
    if not attrs.get("allowzero", 0):
        dims = [shape[i] if d == 0 else d for i, d in enumerate(dims)]
    if dims.count(-1) > 1:
        raise UnsupportedModelError(f"node {name!r}: Reshape shape {dims} has more than one -1")
    if -1 in dims:
        known = math.prod(d for d in dims if d != -1)
        if known == 0 or math.prod(shape) % known:
            raise UnsupportedModelError(f"node {name!r}: cannot reshape {shape} to {dims}")
        dims[dims.index(-1)] = math.prod(shape) // known
    return imp.reshape_node(name, inputs[0], outputs[0], dims)


@views.importer
def _import_view(imp, name, inputs, outputs, attrs):
    return _VIEW_IMPORTERS[imp.op_type](imp, name, inputs, outputs, attrs)


def _identity(imp, name, inputs, outputs, attrs):
    training = imp.constant_input(name, inputs, 2, "Dropout training_mode")
    if training is not None and bool(training):
        raise UnsupportedModelError(f"node {name!r}: Dropout with training_mode=True is random; export the "
                                    f"model in eval mode")
    if len(outputs) > 1 and outputs[1]:  # Dropout's mask: all kept at inference
        imp.graph.add_constant(outputs[1], np.ones(imp.shape(inputs[0]), dtype=bool))
    return imp.alias(name, inputs[0], outputs[0])


def _flatten(imp, name, inputs, outputs, attrs):
    shape = imp.shape(inputs[0])
    axis = int(attrs.get("axis", 1))  # in [-rank, rank]: rank itself means "flatten everything"
    if not -len(shape) <= axis <= len(shape):
        raise UnsupportedModelError(f"node {name!r}: Flatten axis {axis} is out of range for {shape}")
    axis %= len(shape) + (axis >= 0)
    return imp.reshape_node(name, inputs[0], outputs[0], (math.prod(shape[:axis]), math.prod(shape[axis:])))


def _squeeze(imp, name, inputs, outputs, attrs):
    shape = imp.shape(inputs[0])
    axes = reduce_axes(imp, name, inputs, attrs, "Squeeze")
    if axes is None:
        axes = [i for i, d in enumerate(shape) if d == 1]
    axes = {normalize_axis(a, len(shape), "Squeeze axis") for a in axes}
    if any(shape[a] != 1 for a in axes):
        raise UnsupportedModelError(f"node {name!r}: Squeeze axes {sorted(axes)} of {shape} are not all 1")
    return imp.reshape_node(name, inputs[0], outputs[0], [d for i, d in enumerate(shape) if i not in axes])


def _unsqueeze(imp, name, inputs, outputs, attrs):
    shape = imp.shape(inputs[0])
    axes = reduce_axes(imp, name, inputs, attrs, "Unsqueeze")
    if axes is None:
        raise UnsupportedModelError(f"node {name!r}: Unsqueeze needs axes")
    rank = len(shape) + len(axes)
    axes = sorted(normalize_axis(a, rank, "Unsqueeze axis") for a in axes)
    dims = list(shape)
    for a in axes:
        dims.insert(a, 1)
    return imp.reshape_node(name, inputs[0], outputs[0], dims)


_VIEW_IMPORTERS = {"Identity": _identity, "Dropout": _identity, "Flatten": _flatten, "Squeeze": _squeeze,
                   "Unsqueeze": _unsqueeze}


@reshape.shape
def _reshape_shape(node, shapes):
    target = tuple(node.attrs["shape"])
    if math.prod(target) != math.prod(shapes[0]):
        raise UnsupportedModelError(f"node {node.name!r}: cannot reshape {shapes[0]} to {target}")
    return [target]


@reshape.reference
def _reshape_reference(node, x: np.ndarray) -> np.ndarray:
    return x.reshape(node.attrs["shape"])


@reshape.torch
def _reshape_torch(m, node, x):
    return x.reshape(m._reshape_target(node, x))


# -- Transpose ------------------------------------------------------------------------------------
@transpose.importer
def _import_transpose(imp, name, inputs, outputs, attrs):
    rank = len(imp.shape(inputs[0]))
    perm = tuple(int(p) for p in attrs.get("perm", range(rank - 1, -1, -1)))
    if sorted(perm) != list(range(rank)):
        raise UnsupportedModelError(f"node {name!r}: Transpose perm {perm} is not a permutation of {rank} axes")
    return Node("Transpose", name, inputs[:1], outputs[:1], {"perm": perm})


@transpose.shape
def _transpose_shape(node, shapes):
    return [tuple(shapes[0][p] for p in node.attrs["perm"])]


@transpose.reference
def _transpose_reference(node, x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(node.attrs["perm"]))


@transpose.torch
def _transpose_torch(m, node, x):
    return x.permute(tuple(node.attrs["perm"]))


# -- Concat ---------------------------------------------------------------------------------------
@concat.importer
def _import_concat(imp, name, inputs, outputs, attrs):
    rank = len(imp.shape(inputs[0]))
    axis = normalize_axis(int(attrs["axis"]), rank, "Concat axis")
    return Node("Concat", name, [i for i in inputs if i], outputs[:1], {"axis": axis})


@concat.shape
def _concat_shape(node, shapes):
    axis = node.attrs["axis"]
    first = shapes[0]
    for s in shapes[1:]:
        if len(s) != len(first) or any(a != b for i, (a, b) in enumerate(zip(s, first)) if i != axis):
            raise UnsupportedModelError(f"node {node.name!r}: cannot concatenate {first} and {s} on axis {axis}")
    return [first[:axis] + (sum(s[axis] for s in shapes),) + first[axis + 1:]]


@concat.reference
def _concat_reference(node, *xs: np.ndarray) -> np.ndarray:
    return np.concatenate(xs, axis=node.attrs["axis"])


@concat.torch
def _concat_torch(m, node, *xs):
    import torch
    return torch.cat(xs, dim=node.attrs["axis"])


# -- Pad ------------------------------------------------------------------------------------------
@pad.importer
def _import_pad(imp, name, inputs, outputs, attrs):
    rank = len(imp.shape(inputs[0]))
    mode = attrs.get("mode", "constant")
    if mode not in PAD_MODES:
        raise UnsupportedModelError(f"node {name!r}: Pad mode {mode!r} is not supported")
    if imp.opset < 11:
        pads, value = list(attrs["pads"]), float(attrs.get("value", 0.0))
    else:
        pads_v = imp.constant_input(name, inputs, 1, "Pad pads")
        value_v = imp.constant_input(name, inputs, 2, "Pad constant_value")
        axes_v = imp.constant_input(name, inputs, 3, "Pad axes")
        pads = [int(p) for p in pads_v.reshape(-1)]
        value = 0.0 if value_v is None or value_v.size == 0 else float(value_v.reshape(-1)[0])
        if axes_v is not None:  # opset 18: pads only for the listed axes
            axes = [normalize_axis(int(a), rank, "Pad axis") for a in axes_v.reshape(-1)]
            full = [0] * (2 * rank)
            for i, a in enumerate(axes):
                full[a], full[a + rank] = pads[i], pads[i + len(axes)]
            pads = full
    if len(pads) != 2 * rank:
        raise UnsupportedModelError(f"node {name!r}: Pad has {len(pads)} pads for a rank-{rank} input")
    return Node("Pad", name, inputs[:1], outputs[:1], {"pads": tuple(pads), "mode": mode, "value": value})


@pad.shape
def _pad_shape(node, shapes):
    pads, rank = node.attrs["pads"], len(shapes[0])
    out = tuple(d + pads[i] + pads[i + rank] for i, d in enumerate(shapes[0]))
    if min(out) < 0:
        raise UnsupportedModelError(f"node {node.name!r}: pads {pads} crop {shapes[0]} below zero")
    return [out]


@pad.check
def _check_pad(node, shapes, dtype, limit):
    pads, rank = node.attrs["pads"], len(shapes[0])
    check_attribute(node, "pads (magnitude)", [abs(int(p)) for p in pads], 0)
    # Positive pads before any crop: the most any kernel holds on the way to the output
    grown = tuple(d + max(0, pads[i]) + max(0, pads[i + rank]) for i, d in enumerate(shapes[0]))
    check_tensor_size(f"padded input {node.inputs[0]!r}", grown, dtype, role="scratch", node=node, limit=limit)


def _pad_constant(x: np.ndarray, begins, ends, value) -> np.ndarray:
    """Output element o along an axis is input element o - begin where that exists, else
    ``value``: a crop on one side may eat into the padding of the same axis (+10/-10 on a
    dimension of 4 gives 4 values, all padding), which crop-then-pad would get wrong."""
    out_shape = tuple(s + b + e for s, b, e in zip(x.shape, begins, ends))
    out = np.full(out_shape, value, dtype=x.dtype)
    src, dst = [], []
    for size, begin, out_size in zip(x.shape, begins, out_shape):
        lo, hi = max(0, -begin), min(size, out_size - begin)
        if hi <= lo:
            return out  # nothing of the input survives
        src.append(slice(lo, hi))
        dst.append(slice(lo + begin, hi + begin))
    out[tuple(dst)] = x[tuple(src)]
    return out


@pad.reference
def _pad_reference(node, x: np.ndarray) -> np.ndarray:
    pads, mode, rank = node.attrs["pads"], node.attrs["mode"], x.ndim
    begins, ends = pads[:rank], pads[rank:]
    if mode == "constant":
        return _pad_constant(x, begins, ends, x.dtype.type(node.attrs["value"]))
    # Negative pads crop; apply them first, then pad by the positive parts.
    crop = tuple(slice(max(0, -b), x.shape[i] - max(0, -e)) for i, (b, e) in enumerate(zip(begins, ends)))
    x = x[crop]
    widths = [(max(0, b), max(0, e)) for b, e in zip(begins, ends)]
    return np.pad(x, widths, mode=mode)


@pad.torch
def _pad_torch(m, node, x):
    import torch
    import torch.nn.functional as F
    pads, mode, rank = node.attrs["pads"], node.attrs["mode"], x.dim()
    begins, ends = pads[:rank], pads[rank:]
    crop = tuple(slice(max(0, -b), x.shape[i] - max(0, -e)) for i, (b, e) in enumerate(zip(begins, ends)))
    x = x[crop]
    widths = [(max(0, b), max(0, e)) for b, e in zip(begins, ends)]
    if mode == "constant":
        flat = [p for b, e in reversed(widths) for p in (b, e)]
        return F.pad(x, flat, value=float(node.attrs["value"])) if any(flat) else x
    for axis, (b, e) in enumerate(widths):  # reflect / edge / wrap: numpy's index pattern, per axis
        if b or e:
            idx = np.pad(np.arange(x.shape[axis]), (b, e), mode=mode)
            x = x.index_select(axis, torch.from_numpy(idx).to(x.device))
    return x
