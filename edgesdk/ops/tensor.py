"""Layout and data movement: Reshape (a view; also what Identity, Dropout, Flatten, Squeeze and
Unsqueeze import as), Transpose, Concat, Pad, Split, Slice, Gather, Expand, Tile, DepthToSpace and
SpaceToDepth.

Every op here but Pad, Concat and Gather (of arbitrary indices) moves elements by one strided
pattern; :class:`Strided` describes it once per op (``*_strided`` below) for the backends: the cpu
backend turns a contiguous one into a view of its input and copies the others, the OpenCL backend
feeds it to its strided copy kernel. The reference kernels use numpy's own indexing, independently.

Parameters that exporters pass as inputs (Slice starts/ends/axes/steps, Gather indices, Split
sizes, Expand shape, Tile repeats) must be constant; the importer turns them into canonical
attributes (clamped, non-negative, one entry per axis), and the node folds at import when its data
is constant too (the shape arithmetic exporters emit).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import UnsupportedModelError
from ..graph import Graph, Node
from ..runtime.sizes import check_attribute, check_tensor_size
from .geometry import broadcast_shapes, normalize_axis
from .reduce import reduce_axes
from .registry import FLOAT, INT, STRING, Signature, ints, op

reshape = op("Reshape", family="tensor", signature=Signature(1, 0, {"shape": ints()}))
transpose = op("Transpose", family="tensor", signature=Signature(1, 0, {"perm": ints()}))
concat = op("Concat", family="tensor", signature=Signature(1, 0, {"axis": INT}, variadic=True))
pad = op("Pad", family="tensor", signature=Signature(1, 0, {"pads": ints(), "mode": STRING, "value": FLOAT}),
         note="reflect, edge and wrap modes on the reference kernel (constant mode native)")
views = op("Identity", "Dropout", "Flatten", "Squeeze", "Unsqueeze", family="tensor", imports_as="Reshape")
split = op("Split", family="tensor", signature=Signature(1, 0, {"axis": INT, "split": ints()}, variadic_outputs=True),
           note="constant split sizes")
slice_ = op("Slice", family="tensor", signature=Signature(1, 0, {"starts": ints(), "ends": ints(), "steps": ints()}),
            note="constant starts, ends, axes and steps")
gather = op("Gather", family="tensor",
            signature=Signature(1, 0, {"axis": INT, "indices": ints(), "indices_shape": ints()}),
            note="constant indices")
expand = op("Expand", family="tensor", signature=Signature(1, 0, {"shape": ints()}), note="constant shape")
tile = op("Tile", family="tensor", signature=Signature(1, 0, {"repeats": ints()}), note="constant repeats")
depth_to_space = op("DepthToSpace", family="tensor", signature=Signature(1, 0, {"blocksize": INT, "mode": STRING}),
                    note="DCR and CRD modes")
space_to_depth = op("SpaceToDepth", family="tensor", signature=Signature(1, 0, {"blocksize": INT, "mode": STRING}),
                    note="DCR and CRD (opset 28) modes")
PAD_MODES = ("constant", "reflect", "edge", "wrap")
DEPTH_TO_SPACE_MODES = ("DCR", "CRD")


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


@reshape.bytes_moved
def _reshape_bytes(node: Node, graph: Graph) -> int:
    return 0  # a view: every backend aliases the input's memory


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


# -- the strided element mappings the backends share ----------------------------------------------
@dataclass(frozen=True)
class Strided:
    """Where a copy op's output elements come from: output element (i_0, ..., i_k), in C order of
    ``dims``, is input element ``offset + sum(i_d * strides[d])`` of the input's storage. Strides
    are in elements and may be 0 (broadcast) or negative (reversed slices)."""
    offset: int
    dims: tuple[int, ...]
    strides: tuple[int, ...]

    def coalesced(self) -> "Strided":
        """The same mapping on as few dims as possible: size-1 dims dropped, and a dim merged
        into the one before it where together they walk the input with one stride."""
        dims: list[int] = []
        strides: list[int] = []
        for d, s in zip(self.dims, self.strides):
            if d == 1:
                continue
            if dims and strides[-1] == s * d:
                dims[-1] *= d
                strides[-1] = s
            else:
                dims.append(d)
                strides.append(s)
        return Strided(self.offset, tuple(dims) or (1,), tuple(strides) or (1,))

    @property
    def contiguous(self) -> bool:
        """True when the output is one contiguous run of the input (a view can replace the copy)."""
        coalesced = self.coalesced()
        return len(coalesced.dims) == 1 and coalesced.strides[0] == 1


def c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides of a C-contiguous array of ``shape``."""
    strides, running = [], 1
    for d in reversed(shape):
        strides.append(running)
        running *= d
    return tuple(reversed(strides))


def strided_of(node: Node, shape: tuple[int, ...], strides: tuple[int, ...] | None = None) -> list[Strided]:
    """The element mapping of each output of a copy op on an input of ``shape`` whose logical
    axes have element ``strides`` in storage (C order when None); [] when the op has none
    (Gather with indices that are not evenly spaced, Pad, Concat)."""
    strides = c_strides(shape) if strides is None else tuple(strides)
    rule = _STRIDED.get(node.op)
    return rule(node, tuple(shape), strides) if rule is not None else []


def _nonempty(node: Node, shapes: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """Run-time tensors are never empty (no backend allocates a zero-sized buffer). A constant
    node whose output is empty still folds: the size prediction that calls the shape rule then
    gives up and the reference kernel computes the empty constant."""
    empty = [s for s in shapes if 0 in s]
    if empty:
        raise _shape_error(node, f"gives a zero-sized tensor {empty[0]}; edgesdk does not run zero-sized "
                                 f"tensors (cut the graph before this node)")
    return shapes


def _shape_error(node: Node, what: str) -> UnsupportedModelError:
    return UnsupportedModelError(f"node {node.name!r} ({node.op}): {what}")


# -- Split ----------------------------------------------------------------------------------------
@split.importer
def _import_split(imp, name, inputs, outputs, attrs):
    shape = imp.shape(inputs[0])
    axis = normalize_axis(int(attrs.get("axis", 0)), len(shape), "Split axis")
    count, dim = len(outputs), shape[axis]
    if "split" in attrs:  # opset < 13
        sizes = [int(s) for s in attrs["split"]]
    else:
        given = imp.constant_input(name, inputs, 1, "Split split")
        sizes = None if given is None or given.size == 0 else [int(s) for s in given.reshape(-1)]
    if sizes is None and "num_outputs" in attrs:  # opset 18: the last part may be smaller
        parts = int(attrs["num_outputs"])
        if parts != count:
            raise UnsupportedModelError(f"node {name!r}: Split num_outputs {parts} but {count} outputs")
        chunk = -(-dim // parts)
        sizes = [chunk] * (parts - 1) + [dim - chunk * (parts - 1)]
    elif sizes is None:
        if dim % count:
            raise UnsupportedModelError(f"node {name!r}: Split of {dim} into {count} equal parts")
        sizes = [dim // count] * count
    if sizes == [dim]:  # one part: the input itself
        return imp.alias(name, inputs[0], outputs[0])
    return Node("Split", name, inputs[:1], list(outputs), {"axis": axis, "split": tuple(sizes)})


@split.shape
def _split_shape(node, shapes):
    shape, axis, sizes = shapes[0], node.attrs["axis"], tuple(node.attrs["split"])
    if not 0 <= axis < len(shape):
        raise _shape_error(node, f"axis {axis} is out of range for {shape}")
    if len(sizes) != len(node.outputs) or min(sizes, default=-1) < 0 or sum(sizes) != shape[axis]:
        raise _shape_error(node, f"split {list(sizes)} does not cut {shape[axis]} into {len(node.outputs)} parts")
    return _nonempty(node, [shape[:axis] + (size,) + shape[axis + 1:] for size in sizes])


@split.reference
def _split_reference(node, x: np.ndarray) -> tuple[np.ndarray, ...]:
    cuts = np.cumsum(node.attrs["split"])[:-1]
    return tuple(np.ascontiguousarray(part) for part in np.split(x, cuts, axis=node.attrs["axis"]))


@split.torch
def _split_torch(m, node, x):
    return tuple(x.split(list(node.attrs["split"]), dim=node.attrs["axis"]))


def _split_strided(node, shape, strides):
    axis, start, result = node.attrs["axis"], 0, []
    for size in node.attrs["split"]:
        result.append(Strided(start * strides[axis], shape[:axis] + (size,) + shape[axis + 1:], strides))
        start += size
    return result


# -- Slice ----------------------------------------------------------------------------------------
@slice_.importer
def _import_slice(imp, name, inputs, outputs, attrs):
    shape = imp.shape(inputs[0])
    rank = len(shape)
    # opset 1-9 attributes arrive as inputs: such models are upgraded to opset 11 before import
    starts, ends, axes, steps = (imp.constant_input(name, inputs, i, f"Slice {what}")
                                 for i, what in enumerate(("starts", "ends", "axes", "steps"), start=1))
    if starts is None or ends is None:
        raise UnsupportedModelError(f"node {name!r}: Slice needs starts and ends")
    starts, ends = [int(v) for v in np.reshape(starts, -1)], [int(v) for v in np.reshape(ends, -1)]
    axes = list(range(len(starts))) if axes is None else [int(a) for a in np.reshape(axes, -1)]
    steps = [1] * len(starts) if steps is None else [int(s) for s in np.reshape(steps, -1)]
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise UnsupportedModelError(f"node {name!r}: Slice starts, ends, axes and steps differ in length")
    axes = [normalize_axis(a, rank, "Slice axis") for a in axes]
    if len(set(axes)) != len(axes):
        raise UnsupportedModelError(f"node {name!r}: Slice axes {axes} repeat an axis")
    full_starts, full_ends, full_steps = [0] * rank, list(shape), [1] * rank
    for axis, start, end, step in zip(axes, starts, ends, steps):
        if step == 0:
            raise UnsupportedModelError(f"node {name!r}: Slice step 0 on axis {axis}")
        full_starts[axis], full_ends[axis] = _clamp_slice(start, end, step, shape[axis])
        full_steps[axis] = step
    if full_starts == [0] * rank and full_ends == list(shape) and full_steps == [1] * rank:
        return imp.alias(name, inputs[0], outputs[0])  # everything
    return Node("Slice", name, inputs[:1], outputs[:1],
                {"starts": tuple(full_starts), "ends": tuple(full_ends), "steps": tuple(full_steps)})


def _clamp_slice(start: int, end: int, step: int, dim: int) -> tuple[int, int]:
    """ONNX's clamping: negative positions count from the end; a forward slice then stays in
    [0, dim], a backward one in [-1, dim - 1] (end -1: up to and including element 0)."""
    start = start + dim if start < 0 else start
    end = end + dim if end < 0 else end
    if step > 0:
        return min(max(start, 0), dim), min(max(end, 0), dim)
    return min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)


def _slice_count(start: int, end: int, step: int) -> int:
    return max(0, -(-(end - start) // step))


@slice_.shape
def _slice_shape(node, shapes):
    shape, a = shapes[0], node.attrs
    starts, ends, steps = tuple(a["starts"]), tuple(a["ends"]), tuple(a["steps"])
    if not len(starts) == len(ends) == len(steps) == len(shape):
        raise _shape_error(node, f"starts/ends/steps {starts}/{ends}/{steps} do not fit {shape}")
    for dim, start, end, step in zip(shape, starts, ends, steps):
        # the clamped ranges the importer produces: every element read lies inside the input
        if step > 0:
            clamped = 0 <= start <= dim and 0 <= end <= dim
        else:
            clamped = step < 0 and min(0, dim - 1) <= start <= dim - 1 and -1 <= end <= dim - 1
        if not clamped:
            raise _shape_error(node, f"slice {start}:{end}:{step} is not a clamped range of {dim}")
    return _nonempty(node, [tuple(_slice_count(s, e, t) for s, e, t in zip(starts, ends, steps))])


@slice_.reference
def _slice_reference(node, x: np.ndarray) -> np.ndarray:
    a = node.attrs
    index = tuple(slice(s, None if e < 0 else e, t) for s, e, t in zip(a["starts"], a["ends"], a["steps"]))
    return np.ascontiguousarray(x[index])


@slice_.torch
def _slice_torch(m, node, x):
    import torch
    a = node.attrs
    for axis, (start, end, step) in enumerate(zip(a["starts"], a["ends"], a["steps"])):
        if step == 1 and start == 0 and end == m._static_shapes[node.inputs[0]][axis]:
            continue  # a whole axis stays whole (whatever the batch the bridge runs with)
        if step > 0:
            x = x[(slice(None),) * axis + (slice(start, end, step),)]
        else:  # torch slices forward only: pick the elements
            picked = torch.arange(start, end, step, device=x.device)
            x = x.index_select(axis, picked)
    return x


def _slice_strided(node, shape, strides):
    a = node.attrs
    offset = sum(s * st for s, st in zip(a["starts"], strides))
    dims = tuple(_slice_count(s, e, t) for s, e, t in zip(a["starts"], a["ends"], a["steps"]))
    return [Strided(offset, dims, tuple(t * st for t, st in zip(a["steps"], strides)))]


# -- Gather ---------------------------------------------------------------------------------------
@gather.importer
def _import_gather(imp, name, inputs, outputs, attrs):
    shape = imp.shape(inputs[0])
    axis = normalize_axis(int(attrs.get("axis", 0)), len(shape), "Gather axis")
    indices = imp.constant_input(name, inputs, 1, "Gather indices")
    if indices is None or indices.dtype.kind not in "iu":
        raise UnsupportedModelError(f"node {name!r}: Gather needs integer indices")
    dim = shape[axis]
    flat = indices.astype(np.int64).reshape(-1)
    if flat.size and (flat.min() < -dim or flat.max() >= dim):
        raise UnsupportedModelError(f"node {name!r}: Gather index {int(flat[(flat < -dim) | (flat >= dim)][0])} "
                                    f"is out of range for axis {axis} of {shape}")
    flat = np.where(flat < 0, flat + dim, flat)
    return Node("Gather", name, inputs[:1], outputs[:1],
                {"axis": axis, "indices": tuple(int(i) for i in flat), "indices_shape": tuple(indices.shape)})


@gather.shape
def _gather_shape(node, shapes):
    shape, a = shapes[0], node.attrs
    axis, indices, indices_shape = a["axis"], tuple(a["indices"]), tuple(a["indices_shape"])
    if not 0 <= axis < len(shape):
        raise _shape_error(node, f"axis {axis} is out of range for {shape}")
    if min(indices_shape, default=0) < 0 or math.prod(indices_shape) != len(indices):
        raise _shape_error(node, f"{len(indices)} indices do not fill indices_shape {indices_shape}")
    if indices and not 0 <= min(indices) <= max(indices) < shape[axis]:
        raise _shape_error(node, f"indices {min(indices)}..{max(indices)} are outside axis {axis} of {shape}")
    return _nonempty(node, [shape[:axis] + indices_shape + shape[axis + 1:]])


@gather.reference
def _gather_reference(node, x: np.ndarray) -> np.ndarray:
    a = node.attrs
    indices = np.array(a["indices"], dtype=np.int64).reshape(a["indices_shape"])
    return np.take(x, indices, axis=a["axis"])


@gather.torch
def _gather_torch(m, node, x):
    import torch
    a = node.attrs
    axis, picked = a["axis"], torch.tensor(a["indices"], dtype=torch.long, device=x.device)
    out = x.index_select(axis, picked)
    return out.reshape(tuple(x.shape[:axis]) + tuple(a["indices_shape"]) + tuple(x.shape[axis + 1:]))


def _gather_step(node: Node) -> int | None:
    """The spacing of evenly spaced Gather indices (a strided slice: x[:, 0], x[:, 2:8:2]), else None."""
    indices = node.attrs["indices"]
    if len(indices) < 2:
        return 1
    step = indices[1] - indices[0]
    return step if all(b - a == step for a, b in zip(indices, indices[1:])) else None


def _gather_strided(node, shape, strides):
    step = _gather_step(node)
    if step is None:
        return []
    axis, indices = node.attrs["axis"], node.attrs["indices"]
    dims = shape[:axis] + (len(indices),) + shape[axis + 1:]
    return [Strided(indices[0] * strides[axis], dims, strides[:axis] + (step * strides[axis],) + strides[axis + 1:])]


# -- Expand and Tile ------------------------------------------------------------------------------
@expand.importer
def _import_expand(imp, name, inputs, outputs, attrs):
    target = imp.constant_input(name, inputs, 1, "Expand shape")
    if target is None:
        raise UnsupportedModelError(f"node {name!r}: Expand has no shape input")
    shape = imp.shape(inputs[0])
    out = broadcast_shapes(shape, tuple(int(d) for d in target.reshape(-1)))  # ONNX: both ways
    if out == shape:
        return imp.alias(name, inputs[0], outputs[0])
    return Node("Expand", name, inputs[:1], outputs[:1], {"shape": out})


@expand.shape
def _expand_shape(node, shapes):
    shape, out = shapes[0], tuple(node.attrs["shape"])
    padded = (1,) * (len(out) - len(shape)) + shape
    if len(out) < len(shape) or any(d not in (1, o) for d, o in zip(padded, out)):
        raise _shape_error(node, f"{shape} does not broadcast to {out}")
    return _nonempty(node, [out])


@expand.reference
def _expand_reference(node, x: np.ndarray) -> np.ndarray:
    return np.broadcast_to(x, tuple(node.attrs["shape"])).copy()


@expand.torch
def _expand_torch(m, node, x):
    out = tuple(node.attrs["shape"])
    lead = len(out) - x.dim()
    # -1 keeps a dimension the input already has (the bridge may run another batch size)
    kept = [-1 if d == o else o for d, o in zip(m._static_shapes[node.inputs[0]], out[lead:])]
    return x.expand(*out[:lead], *kept)


def _expand_strided(node, shape, strides):
    out = tuple(node.attrs["shape"])
    lead = len(out) - len(shape)
    padded = (0,) * lead + tuple(st if d > 1 else 0 for d, st in zip(shape, strides))
    return [Strided(0, out, padded)]


@tile.importer
def _import_tile(imp, name, inputs, outputs, attrs):
    repeats = imp.constant_input(name, inputs, 1, "Tile repeats")
    shape = imp.shape(inputs[0])
    if repeats is None or repeats.size != len(shape):
        raise UnsupportedModelError(f"node {name!r}: Tile needs one repeat per axis of {shape}")
    reps = tuple(int(r) for r in repeats.reshape(-1))
    if min(reps, default=0) < 0:
        raise UnsupportedModelError(f"node {name!r}: Tile repeats {reps} are negative")
    if all(r == 1 for r in reps):
        return imp.alias(name, inputs[0], outputs[0])
    return Node("Tile", name, inputs[:1], outputs[:1], {"repeats": reps})


@tile.shape
def _tile_shape(node, shapes):
    shape, reps = shapes[0], tuple(node.attrs["repeats"])
    if len(reps) != len(shape) or min(reps, default=0) < 0:
        raise _shape_error(node, f"repeats {reps} do not fit {shape}")
    return _nonempty(node, [tuple(d * r for d, r in zip(shape, reps))])


@tile.reference
def _tile_reference(node, x: np.ndarray) -> np.ndarray:
    return np.tile(x, tuple(node.attrs["repeats"]))


@tile.torch
def _tile_torch(m, node, x):
    return x.repeat(*node.attrs["repeats"])


def _tile_strided(node, shape, strides):
    # out (r0 * d0, r1 * d1, ...) in C order is (r0, d0, r1, d1, ...): repeats walk nothing
    dims = tuple(v for r, d in zip(node.attrs["repeats"], shape) for v in (r, d))
    return [Strided(0, dims, tuple(v for st in strides for v in (0, st)))]


# -- DepthToSpace and SpaceToDepth ----------------------------------------------------------------
@op.shared("DepthToSpace", "SpaceToDepth").importer
def _import_depth_space(imp, name, inputs, outputs, attrs):
    mode = attrs.get("mode", "DCR")
    if mode not in DEPTH_TO_SPACE_MODES:
        raise UnsupportedModelError(f"node {name!r}: {imp.op_type} mode {mode!r} is not DCR or CRD")
    return Node(imp.op_type, name, inputs[:1], outputs[:1], {"blocksize": int(attrs["blocksize"]), "mode": mode})


def _block_of(node, shape) -> int:
    block = node.attrs["blocksize"]
    if len(shape) != 4 or block < 1:
        raise _shape_error(node, f"blocksize {block} on {shape}; expected a 4-D input and a blocksize >= 1")
    if node.attrs["mode"] not in DEPTH_TO_SPACE_MODES:
        raise _shape_error(node, f"mode {node.attrs['mode']!r} is not DCR or CRD")
    return block


@depth_to_space.shape
def _depth_to_space_shape(node, shapes):
    (n, c, h, w), b = shapes[0], _block_of(node, shapes[0])
    if c % (b * b):
        raise _shape_error(node, f"{c} channels do not split into blocks of {b}x{b}")
    return [(n, c // (b * b), h * b, w * b)]


@space_to_depth.shape
def _space_to_depth_shape(node, shapes):
    (n, c, h, w), b = shapes[0], _block_of(node, shapes[0])
    if h % b or w % b:
        raise _shape_error(node, f"{h}x{w} does not split into blocks of {b}x{b}")
    return [(n, c * b * b, h // b, w // b)]


@depth_to_space.reference
def _depth_to_space_reference(node, x: np.ndarray) -> np.ndarray:
    (n, c, h, w), b = x.shape, node.attrs["blocksize"]
    if node.attrs["mode"] == "DCR":  # channel = (row-in-block * b + column-in-block) * C' + c'
        y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:  # CRD: channel = c' * b * b + row-in-block * b + column-in-block
        y = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return np.ascontiguousarray(y).reshape(n, c // (b * b), h * b, w * b)


@space_to_depth.reference
def _space_to_depth_reference(node, x: np.ndarray) -> np.ndarray:
    (n, c, h, w), b = x.shape, node.attrs["blocksize"]
    y = x.reshape(n, c, h // b, b, w // b, b)
    # the inverse of DepthToSpace in the same mode
    y = y.transpose(0, 3, 5, 1, 2, 4) if node.attrs["mode"] == "DCR" else y.transpose(0, 1, 3, 5, 2, 4)
    return np.ascontiguousarray(y).reshape(n, c * b * b, h // b, w // b)


@depth_to_space.torch
def _depth_to_space_torch(m, node, x):
    import torch.nn.functional as F
    b = node.attrs["blocksize"]
    if node.attrs["mode"] == "CRD":
        return F.pixel_shuffle(x, b)
    n, c, h, w = x.shape
    return x.reshape(n, b, b, c // (b * b), h, w).permute(0, 3, 4, 1, 5, 2).reshape(n, c // (b * b), h * b, w * b)


@space_to_depth.torch
def _space_to_depth_torch(m, node, x):
    import torch.nn.functional as F
    b = node.attrs["blocksize"]
    if node.attrs["mode"] == "CRD":
        return F.pixel_unshuffle(x, b)
    n, c, h, w = x.shape
    return x.reshape(n, c, h // b, b, w // b, b).permute(0, 3, 5, 1, 2, 4).reshape(n, c * b * b, h // b, w // b)


def _depth_to_space_strided(node, shape, strides):
    (n, c, h, w), b = shape, node.attrs["blocksize"]
    sn, sc, sh, sw = strides
    depth = c // (b * b)
    # output viewed as (n, c', h, row-in-block, w, column-in-block)
    if node.attrs["mode"] == "DCR":
        channel, row, column = sc, b * depth * sc, depth * sc
    else:
        channel, row, column = b * b * sc, b * sc, sc
    return [Strided(0, (n, depth, h, b, w, b), (sn, channel, sh, row, sw, column))]


def _space_to_depth_strided(node, shape, strides):
    (n, c, h, w), b = shape, node.attrs["blocksize"]
    sn, sc, sh, sw = strides
    if node.attrs["mode"] == "DCR":  # output viewed as (n, row-in-block, column-in-block, c, h / b, w / b)
        return [Strided(0, (n, b, b, c, h // b, w // b), (sn, sh, sw, sc, b * sh, b * sw))]
    # CRD: output viewed as (n, c, row-in-block, column-in-block, h / b, w / b)
    return [Strided(0, (n, c, b, b, h // b, w // b), (sn, sc, sh, sw, b * sh, b * sw))]


def _transpose_strided(node, shape, strides):
    perm = node.attrs["perm"]
    return [Strided(0, tuple(shape[p] for p in perm), tuple(strides[p] for p in perm))]


_STRIDED = {"Split": _split_strided, "Slice": _slice_strided, "Gather": _gather_strided, "Expand": _expand_strided,
            "Tile": _tile_strided, "DepthToSpace": _depth_to_space_strided,
            "SpaceToDepth": _space_to_depth_strided, "Transpose": _transpose_strided}
