"""The cpu backend's mechanisms, not its ops (those are tests/ops/, on every backend): which nodes
run the reference kernel, and that the fallback says why."""
from __future__ import annotations

import numpy as np

import edgesdk
from conftest import assert_close
from onnx_builders import single_node_model

R = np.random.default_rng(7)


def rand(*shape: int) -> np.ndarray:
    return R.standard_normal(shape).astype(np.float32)


def compare(model, x: np.ndarray) -> edgesdk.Session:
    """Run ``model`` on the reference and cpu backends; outputs must agree. Returns the cpu session."""
    cpu = edgesdk.Session(model, backend="cpu")
    ref = edgesdk.Session(model, backend="reference")
    feeds = {cpu.input_names[0]: x}
    expected, got = ref.run(feeds), cpu.run(feeds)
    for name in ref.output_names:
        assert_close(got[name], expected[name], 1e-4, what=name)
    return cpu


def test_average_pool_counting_a_ceil_overhang_falls_back_explicitly() -> None:
    # 7 -> ceil((7 - 2) / 2) + 1 = 4 windows: the last one hangs one pixel past the input.
    model = single_node_model("AveragePool", (1, 3, 7, 7), kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1,
                              count_include_pad=1)
    sess = compare(model, rand(1, 3, 7, 7))
    assert list(sess._impl.placements.values()) == ["reference"]
    assert "overhang" in next(iter(sess._impl.fallback_reasons.values()))


def test_lrn_runs_the_reference_kernel_explicitly() -> None:
    x = rand(1, 7, 5, 5)
    sess = compare(single_node_model("LRN", x.shape, size=3, alpha=1e-3, beta=0.75, bias=2.0), x)
    assert list(sess._impl.placements.values()) == ["reference"]
