"""The cpu lowering of the reduce family (``edgesdk/ops/reduce.py``): Reductions."""
from __future__ import annotations

from functools import partial

import numpy as np

from ....graph import Node
from ..program import NCHW, NHWC, Builder, Runner, Views
from .base import fused_act, native_kernels, then_activate, lowering


@lowering("ReduceMean")
def reduce_mean(node: Node, b: Builder) -> None:
    k = native_kernels()
    shape = b.shape(node.inputs[0])
    axes, keep = tuple(node.attrs["axes"]), node.attrs["keepdims"]
    act, threads = fused_act(node), b.threads_for(node)
    if len(shape) == 4 and axes == (2, 3):  # a global average pool
        n, c = shape[:2]
        x = b.read(node.inputs[0], NHWC)
        y = b.write(node.outputs[0], NHWC if keep else NCHW)
        b.emit(node, "native", lambda v: partial(k.global_avg_pool, v[x], v[y].reshape(n, c), *act, threads),
               "global average")
        return
    x = b.read_stored(node.inputs[0])
    y = b.write(node.outputs[0], NCHW)

    def bind(v: Views) -> Runner:
        src, dst = v.logical(x), v[y].reshape(b.shape(node.outputs[0]))
        mean = partial(np.mean, src, axis=axes, keepdims=bool(keep), dtype=np.float32, out=dst)
        return then_activate(mean, v[y], act, threads)
    b.emit(node, "numpy", bind, f"mean over axes {axes}")
