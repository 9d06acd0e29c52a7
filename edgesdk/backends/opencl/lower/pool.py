"""The opencl lowering of the pool family (``edgesdk/ops/pool.py``): max/average/global pooling."""
from __future__ import annotations

import math


from ....graph import Node
from ....ops.geometry import pool_sweep
from ..kernels import Launch, LoweringContext, NotLowerable, kernel, storage_defines


@kernel("MaxPool", "AveragePool")
def pool(ctx: LoweringContext, node: Node) -> list[Launch]:
    x, y = ctx.act(node.inputs[0]), ctx.act(node.outputs[0])
    if len(x.shape) != 4:
        raise NotLowerable("only 2-D pooling has kernels")
    n, c, h, w = x.shape
    a = node.attrs
    (oh, ow), _ = pool_sweep(node, h, w)
    pt, pl, pb, pr = a["pads"]
    counted = (-pt, h + pb, -pl, w + pr) if a.get("count_include_pad") else (0, h, 0, w)
    defines = {"POOL2D": 1, "IS_MAX": int(node.op == "MaxPool"), "N": n, "C": c, "H": h, "W": w, "OH": oh,
               "OW": ow, "KH": a["kernel_shape"][0], "KW": a["kernel_shape"][1], "SH": a["strides"][0],
               "SW": a["strides"][1], "DH": a["dilations"][0], "DW": a["dilations"][1], "PT": pt, "PL": pl,
               "CH0": counted[0], "CH1": counted[1], "CW0": counted[2], "CW1": counted[3],
               **storage_defines(X=x.half, Y=y.half)}
    return [ctx.launch("pool.cl", "pool2d", defines, [x.buffer, y.buffer], (y.size,), "pool")]


@kernel("GlobalAveragePool", "GlobalMaxPool")
def global_pool(ctx: LoweringContext, node: Node) -> list[Launch]:
    x, y = ctx.act(node.inputs[0]), ctx.act(node.outputs[0])
    planes = x.shape[0] * x.shape[1]
    defines = {"GLOBAL_POOL": 1, "IS_MAX": int(node.op == "GlobalMaxPool"), "PLANES": planes,
               "SPATIAL": math.prod(x.shape[2:]), **storage_defines(X=x.half, Y=y.half)}
    return [ctx.launch("pool.cl", "global_pool", defines, [x.buffer, y.buffer], (planes,), "reduce")]
