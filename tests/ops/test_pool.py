"""The pool family (``edgesdk/ops/pool.py``) on every backend: max, average and global pools,
2-D and 1-D (rank-3 inputs, imported as 2-D between reshapes), a hypothesis fuzz of the window
geometry, and pools of a Conv's output (NHWC storage on cpu)."""
from __future__ import annotations

import numpy as np
import onnx.helper as oh
import pytest
from hypothesis import HealthCheck, given, settings

from geometry_cases import pool_cases
from onnx_builders import graph_model, single_node_model

R = np.random.default_rng(11)

POOL_CASES = {
    "max_3x3_s2_p1": ("MaxPool", (1, 5, 11, 9), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    "max_2x2_s2": ("MaxPool", (1, 3, 11, 13), dict(kernel_shape=[2, 2], strides=[2, 2])),
    "max_ceil": ("MaxPool", (1, 3, 10, 10), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    "max_ceil_squeezenet": ("MaxPool", (1, 4, 13, 13), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    "max_dilated": ("MaxPool", (1, 2, 12, 12), dict(kernel_shape=[2, 2], dilations=[2, 2])),
    "max_asymmetric_dilated": ("MaxPool", (1, 3, 11, 13), dict(kernel_shape=[2, 3], strides=[1, 2], dilations=[2, 1],
                                                                pads=[1, 0, 1, 1])),
    "avg_exclude_pad": ("AveragePool", (1, 4, 9, 9), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
    "avg_include_pad": ("AveragePool", (1, 4, 9, 9), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                                                          count_include_pad=1)),
    # 7 -> ceil((7 - 2) / 2) + 1 = 4 windows: the last one hangs one pixel past the input
    "avg_ceil_overhang_include_pad": ("AveragePool", (1, 3, 7, 7), dict(kernel_shape=[2, 2], strides=[2, 2],
                                                                        ceil_mode=1, count_include_pad=1)),
    # 101 channels: the cpu kernels' blocks of 4, 2 and 1 vectors and a tail, on every level
    "max_101_channels": ("MaxPool", (2, 101, 7, 7), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    "avg_101_channels_include_pad": ("AveragePool", (1, 101, 6, 6), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                                                                       count_include_pad=1)),
    # 17x17 = 289 taps: more than the cpu kernel's tap list holds (its other path)
    "avg_289_taps": ("AveragePool", (1, 3, 20, 21), dict(kernel_shape=[17, 17], strides=[3, 2], pads=[1, 0, 1, 2])),
    "max_289_taps": ("MaxPool", (1, 35, 18, 18), dict(kernel_shape=[17, 17], pads=[1, 1, 0, 0])),
    "global_avg": ("GlobalAveragePool", (2, 6, 7, 5), {}),
    "global_max": ("GlobalMaxPool", (1, 6, 7, 5), {}),
    "max_1d": ("MaxPool", (1, 4, 17), dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
    "avg_1d": ("AveragePool", (2, 3, 16), dict(kernel_shape=[4], strides=[4])),
}

OVERHANG = "the cpu kernel does not count a ceil_mode window's overhang past the pads (count_include_pad)"
FALLBACKS = {"avg_ceil_overhang_include_pad": {"cpu/fp32:AveragePool": OVERHANG, "cpu/fp16:AveragePool": OVERHANG}}


@pytest.mark.parametrize("case", POOL_CASES)
def test_pool(target, case: str) -> None:
    op, shape, attrs = POOL_CASES[case]
    x = R.standard_normal(shape).astype(np.float32)
    target.check(single_node_model(op, shape, **attrs), {"x": x}, may_fall_back=FALLBACKS.get(case))


def test_pool_geometry_fuzz(target) -> None:
    """MaxPool (dilated or not) and AveragePool (either padding count) of any kernel, stride,
    pads and ceil mode. OpenCL compiles programs per geometry: there fewer examples, the same every
    run (its kernel cache stays warm)."""
    @settings(max_examples=20 if target.backend == "opencl" else 40, deadline=None,
              derandomize=target.backend == "opencl",
              suppress_health_check=[HealthCheck.too_slow])
    @given(case=pool_cases(channels=5))
    def run(case) -> None:
        if case is not None:
            model, x_shape = case
            attrs = {a.name: oh.get_attribute_value(a) for a in model.graph.node[0].attribute}
            overhang = attrs.get("ceil_mode") and attrs.get("count_include_pad")
            target.check(model, {"x": R.standard_normal(x_shape).astype(np.float32)},
                         may_fall_back=FALLBACKS["avg_ceil_overhang_include_pad"] if overhang else None)
    run()


@pytest.mark.parametrize("op,attrs", [
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("GlobalMaxPool", {}),
], ids=["max_ceil", "global_max"])
def test_pool_of_a_conv_output(target, op: str, attrs: dict) -> None:
    nodes = [oh.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), oh.make_node(op, ["c"], ["y"], **attrs)]
    constants = {"w": R.standard_normal((6, 6, 3, 3)).astype(np.float32), "b": R.standard_normal(6).astype(np.float32)}
    model = graph_model(nodes, {"x": (1, 6, 7, 5)}, ["y"], constants)
    target.check(model, {"x": R.standard_normal((1, 6, 7, 5)).astype(np.float32)})

