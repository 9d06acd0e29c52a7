"""The cpu lowering of the tensor family (``edgesdk/ops/tensor.py``): Reshape (a view), Concat and
Pad (copies into the arena), and the strided copy ops - Transpose, Split, Slice, Gather, Expand,
Tile, DepthToSpace, SpaceToDepth - each output a view of its input where its elements are one
contiguous run of the input's storage (a Split or Slice of the outermost axis, x[:, 0] of a batch
of one, a Transpose that keeps the stored order), else one numpy strided copy. They read their
input in whatever layout it is stored (NHWC included): the strides say where each element is.
"""
from __future__ import annotations

from functools import partial

import numpy as np

from ....graph import Node
from ....ops.tensor import Strided, c_strides, strided_of
from ....runtime.precision import round_constant
from ..program import NCHW, NHWC, Builder, Runner, Slot, Views, same_bytes_in_both_layouts
from .base import fused_act, then_activate, fallback, lowering


@lowering("Reshape")
def reshape(node: Node, b: Builder) -> None:
    x = b.read(node.inputs[0], NCHW)  # a view of graph-order bytes
    b.alias(node.outputs[0], x)
    _mark_view(node, b, "view of graph-order bytes")


def _mark_view(node: Node, b: Builder, note: str) -> None:
    b.emit(node, "view", lambda v: _noop, note)


def _noop() -> None:
    return None


@lowering("Concat")
def concat(node: Node, b: Builder) -> None:
    out_shape = b.shape(node.outputs[0])
    axis = node.attrs["axis"]
    names = [n for n in node.inputs if n]
    nhwc = (len(out_shape) == 4 and axis == 1 and not same_bytes_in_both_layouts(out_shape)
            and any(b.is_activation(n) and b.stored_layout(n) == NHWC for n in names))
    layout = NHWC if nhwc else NCHW
    sources = [b.read(n, layout) if b.is_activation(n)
               else round_constant(np.asarray(b.graph.const(n), dtype=np.float32), b.precision) for n in names]
    y = b.write(node.outputs[0], layout)
    sizes = [b.shape(n)[axis] for n in names]
    act, threads = fused_act(node), b.threads_for(node)

    # Inputs their producer wrote into their slice of this output (Builder.write_nhwc_part).
    in_place = [isinstance(src, Slot) and src.buffer is y.buffer for src in sources]
    if all(in_place) and act[0] == "none":
        return _mark_view(node, b, "its inputs were written into their channel slices")

    def bind(v: Views) -> Runner:
        dst = v.logical(y)
        copies, start = [], 0
        for src, size, done in zip(sources, sizes, in_place):
            index = (slice(None),) * axis + (slice(start, start + size),)
            if not done:
                copies.append(partial(np.copyto, dst[index], v.logical(src) if isinstance(src, Slot) else src))
            start += size

        def run() -> None:
            for copy in copies:
                copy()
        return then_activate(run, v[y], act, threads)
    written = f", {sum(in_place)} of {len(sources)} written in place" if any(in_place) else ""
    b.emit(node, "numpy", bind, f"copies into {'channel' if nhwc else 'axis'} slices{written}")


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
    act, threads = fused_act(node), b.threads_for(node)

    def bind(v: Views) -> Runner:
        out, fill = v.logical(y), partial(v[y].fill, value)
        copy = partial(np.copyto, out[place], v.logical(x)[crop])

        def run() -> None:
            fill()
            copy()
        return then_activate(run, v[y], act, threads)
    b.emit(node, "numpy", bind, "constant pad")


# -- strided copies and views ---------------------------------------------------------------------
def _logical_strides(slot: Slot) -> tuple[int, ...]:
    """Element strides of each logical (graph-order) axis of ``slot`` in its storage."""
    storage = c_strides(slot.storage_shape)
    if slot.layout == NHWC:
        n, h, w, c = storage
        return (n, c, h, w)
    return storage


def _strided_source(storage: np.ndarray, mapping: Strided) -> np.ndarray:
    """A read-only numpy view of ``storage`` (C-contiguous) laid out as ``mapping`` says."""
    flat = storage.reshape(-1)
    item = flat.itemsize
    return np.lib.stride_tricks.as_strided(flat[mapping.offset:], mapping.dims,
                                           tuple(s * item for s in mapping.strides), writeable=False)


def _views_or_copies(node: Node, b: Builder, x: Slot, mappings: list[Strided], what: str) -> None:
    """Each output of ``node`` as a view of ``x`` when its mapping is one contiguous run, else a
    copy; one step copies every output that needs it."""
    copies = []
    for name, mapping in zip(node.outputs, mappings):
        if not name:
            continue
        if mapping.contiguous:
            b.alias(name, x, offset=mapping.offset)
        else:
            copies.append((b.write(name, NCHW), mapping.coalesced()))
    if not copies:
        return _mark_view(node, b, f"{what}: a view of its input")

    def bind(v: Views) -> Runner:
        runs = [partial(np.copyto, v[y].reshape(m.dims), _strided_source(v[x], m)) for y, m in copies]

        def run() -> None:
            for copy in runs:
                copy()
        return run
    views = len(mappings) - len(copies)
    b.emit(node, "numpy", bind, f"{what}: strided copy" + (f" ({views} outputs are views)" if views else ""))


@lowering("Transpose", "Split", "Slice", "Expand", "Tile", "DepthToSpace", "SpaceToDepth")
def strided_copy(node: Node, b: Builder) -> None:
    x = b.read_stored(node.inputs[0])
    mappings = strided_of(node, x.shape, _logical_strides(x))
    _views_or_copies(node, b, x, mappings, node.op)


@lowering("Gather")
def gather(node: Node, b: Builder) -> None:
    x = b.read_stored(node.inputs[0])
    mappings = strided_of(node, x.shape, _logical_strides(x))
    if mappings:  # evenly spaced indices: a strided slice
        return _views_or_copies(node, b, x, mappings, "Gather of evenly spaced indices")
    axis, shape = node.attrs["axis"], x.shape
    indices = np.array(node.attrs["indices"], dtype=np.intp)
    y = b.write(node.outputs[0], NCHW)
    flat_shape = shape[:axis] + (len(indices),) + shape[axis + 1:]

    def bind(v: Views) -> Runner:
        # indices were checked at import: "clip" skips numpy's buffered bounds check
        return partial(np.take, v.logical(x), indices, axis, v[y].reshape(flat_shape), "clip")
    b.emit(node, "numpy", bind, "gather along an axis")
