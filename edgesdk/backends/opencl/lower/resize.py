"""The opencl lowering of the resize family (``edgesdk/ops/resize.py``): Resize (and Upsample,
which imports as Resize) on ``resize.cl``, one work-item per output element, gathering through
the op's coordinate tables (``plane_tables``), uploaded once per node."""
from __future__ import annotations

from ....graph import Node
from ....ops.resize import plane_shape, plane_tables
from ..kernels import Launch, LoweringContext, NotLowerable, kernel, storage_defines


@kernel("Resize")
def resize(ctx: LoweringContext, node: Node) -> list[Launch]:
    x, y = ctx.act(node.inputs[0]), ctx.act(node.outputs[0])
    if len(x.shape) not in (3, 4):
        raise NotLowerable(f"Resize of a rank-{len(x.shape)} tensor")
    rows, cols = plane_tables(node, x.shape)
    n, c, h, w = plane_shape(x.shape)
    _, _, oh, ow = plane_shape(y.shape)
    defines = {"NC": n * c, "H": h, "W": w, "OH": oh, "OW": ow, **storage_defines(X=x.half, Y=y.half)}
    iy0, ix0 = ctx.raw(node.name, "resize-iy0", rows.first), ctx.raw(node.name, "resize-ix0", cols.first)
    if node.attrs["mode"] == "nearest":
        return [ctx.launch("resize.cl", "resize_nearest", {"RESIZE_NEAREST": 1, **defines},
                           [x.buffer, iy0, ix0, y.buffer], (y.size,), "eltwise")]
    iy1, ix1 = ctx.raw(node.name, "resize-iy1", rows.second), ctx.raw(node.name, "resize-ix1", cols.second)
    wy, wx = ctx.small_float(node.name, "resize-wy", rows.weight), ctx.small_float(node.name, "resize-wx", cols.weight)
    args = [x.buffer, iy0, iy1, wy, ix0, ix1, wx, y.buffer]
    return [ctx.launch("resize.cl", "resize_linear", {"RESIZE_LINEAR": 1, **defines}, args, (y.size,), "eltwise")]
