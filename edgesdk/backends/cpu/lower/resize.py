"""The cpu lowering of the resize family (``edgesdk/ops/resize.py``): Resize (and Upsample, which
imports as Resize) on the native ``resize_nearest`` / ``resize_linear`` kernels, which gather
through the op's own coordinate tables (``plane_tables``, computed once here)."""
from __future__ import annotations

from functools import partial

from ....graph import Node
from ....ops.resize import plane_shape, plane_tables
from ..program import NCHW, NHWC, Builder, Runner, Views
from .base import fallback, lowering, native_kernels


@lowering("Resize")
def resize(node: Node, b: Builder) -> None:
    k = native_kernels()
    x_name, y_name = node.inputs[0], node.outputs[0]
    shape = b.shape(x_name)
    if len(shape) not in (3, 4):
        return fallback(node, b, f"Resize of a rank-{len(shape)} tensor")
    rows, cols = plane_tables(node, shape)
    # Either layout suits the kernels: keep the one the input is stored in (no conversion step),
    # except for a graph output, which is returned in graph order: an upsampled output is many
    # times its input (LRASPP's 21x256x256 logits: a 5.5 MB transposed copy after the run), so the
    # input is converted instead and the kernel writes graph order.
    layout = NCHW if len(shape) != 4 or y_name in b.graph.outputs else b.stored_layout(x_name)
    x, y = b.read(x_name, layout), b.write(y_name, layout)
    n, c, h, w = plane_shape(shape)
    _, _, oh, ow = plane_shape(b.shape(y_name))
    x_dims = (n, h, w, c) if layout == NHWC else (n, c, h, w)
    y_dims = (n, oh, ow, c) if layout == NHWC else (n, c, oh, ow)
    threads = b.threads_for(node)
    a = node.attrs

    def bind(v: Views) -> Runner:
        xs, ys = v[x].reshape(x_dims), v[y].reshape(y_dims)
        if a["mode"] == "nearest":
            return partial(k.resize_nearest, xs, ys, rows.first, cols.first, layout, threads)
        return partial(k.resize_linear, xs, ys, rows.first, rows.second, rows.weight, cols.first, cols.second,
                       cols.weight, layout, threads)
    b.emit(node, "native", bind, f"{a['mode']}, {a['coordinate_transformation_mode']}, {layout}")
