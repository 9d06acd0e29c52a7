"""One layer on the opencl backend, for the per-layer OpenCL benchmarks (bench_huffman_opencl.py,
bench_lq_opencl.py): the layer's graph and its best device time over repeated profiles."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from edgesdk import Session  # noqa: E402
from edgesdk.graph import Graph  # noqa: E402
from edgesdk.loader import load_model  # noqa: E402

LAYER, QUANTIZE = "layer", "quantize"  # the node names device_ms times


def layer_graph(weights, x_shape, k: int, pad: int, quantizer=None) -> Graph:
    """x -> [LQQuantize(basis, offset) when ``quantizer``] -> Conv KxK (stride 1, ``pad`` on every
    side), or Gemm with transB when ``k`` is 0, over ``weights`` (an array or an encoding) -> y."""
    g = Graph("layer")
    g.add_input("x", x_shape)
    if isinstance(weights, np.ndarray):
        g.add_constant("w", weights)
    else:
        g.add_encoded("w", weights)
    src = "x"
    if quantizer is not None:
        g.add_tensor("q", x_shape, np.float32)
        g.add_node("LQQuantize", ["x"], ["q"], name=QUANTIZE, basis=tuple(float(v) for v in quantizer[0]),
                   offset=float(quantizer[1]))
        src = "q"
    if k:
        g.add_node("Conv", [src, "w"], ["y"], name=LAYER, kernel_shape=(k, k), strides=(1, 1), dilations=(1, 1),
                   pads=(pad,) * 4, group=1)
    else:
        g.add_node("Gemm", [src, "w"], ["y"], name=LAYER, alpha=1.0, beta=1.0, transA=False, transB=True)
    g.outputs = ["y"]
    return load_model(g)


def device_ms(graph: Graph, x: np.ndarray, repeats: int) -> tuple[float, str, np.ndarray]:
    """(best device ms of the layer and its quantizer over ``repeats`` profiles, the kernels it
    launches, its output). Refuses a layer that falls back to the reference backend."""
    sess = Session(graph, backend="opencl")
    assert not sess._impl.fallback_reasons, sess._impl.fallback_reasons
    kernels = ",".join(launch.name for step in sess._impl._steps for launch in step.launches)
    sess.run({"x": x})
    best = min(sum(r.device_ms for r in sess.profile({"x": x}).ops if r.node in (LAYER, QUANTIZE))
               for _ in range(repeats))
    return best, kernels, sess.run({"x": x})["y"]
