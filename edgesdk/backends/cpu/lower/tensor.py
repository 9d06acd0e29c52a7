"""The cpu lowering of the tensor family (``edgesdk/ops/tensor.py``): Layout ops: Reshape (a view), Transpose, Concat, Pad."""
from __future__ import annotations

from functools import partial

import numpy as np

from ....graph import Node
from ....runtime.precision import round_to_storage
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
    act, threads = fused_act(node), b.threads_for(node)

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
        return then_activate(run, v[y], act, threads)
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
    act, threads = fused_act(node), b.threads_for(node)

    def bind(v: Views) -> Runner:
        out, fill = v.logical(y), partial(v[y].fill, value)
        copy = partial(np.copyto, out[place], v.logical(x)[crop])

        def run() -> None:
            fill()
            copy()
        return then_activate(run, v[y], act, threads)
    b.emit(node, "numpy", bind, "constant pad")
