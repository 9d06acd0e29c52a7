"""The opencl lowering of the reduce family (``edgesdk/ops/reduce.py``): ReduceMean."""
from __future__ import annotations


from ....graph import Node
from ..kernels import Launch, LoweringContext, NotLowerable, kernel, storage_defines
from .common import strides_of


@kernel("ReduceMean")
def reduce_mean(ctx: LoweringContext, node: Node) -> list[Launch]:
    x, y = ctx.act(node.inputs[0]), ctx.act(node.outputs[0])
    axes = set(node.attrs["axes"])
    strides = strides_of(x.shape)
    kept = [(d, s) for i, (d, s) in enumerate(zip(x.shape, strides)) if i not in axes]
    reduced = [(d, s) for i, (d, s) in enumerate(zip(x.shape, strides)) if i in axes]
    if len(kept) > 4 or len(reduced) > 4:
        raise NotLowerable("ReduceMean over more than 4 kept or reduced dims")
    kept = [(1, 0)] * (4 - len(kept)) + kept
    reduced = [(1, 0)] * (4 - len(reduced)) + reduced
    defines = {"REDUCE_MEAN": 1, "OUT_TOTAL": y.size, **storage_defines(X=x.half, Y=y.half)}
    for i, ((kd, ks), (rd, rs)) in enumerate(zip(kept, reduced)):
        defines.update({f"K{i}": kd, f"KS{i}": ks, f"R{i}": rd, f"RS{i}": rs})
    return [ctx.launch("normalization.cl", "reduce_mean", defines, [x.buffer, y.buffer], (y.size,), "reduce")]
