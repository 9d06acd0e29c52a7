"""The conv family (``edgesdk/ops/conv.py``) on every backend: Conv 2-D and 1-D (imported as 2-D
between reshapes) with groups (depthwise, with a multiplier), strides, dilations, asymmetric pads,
auto_pad, pointwise and wide kernels, with and without bias; a hypothesis fuzz of the geometry;
activations fused into Conv and Gemm, BatchNormalization folded into Conv, and grouped/depthwise
chains whose NHWC outputs (cpu) feed MatMul and a transposed Gemm."""
from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import pytest
from hypothesis import HealthCheck, given, settings

from geometry_cases import conv_cases
from onnx_builders import graph_model, single_node_model

R = np.random.default_rng(7)


@pytest.fixture(autouse=True)
def _same_numbers_in_any_order():
    """Every test draws the same inputs whichever worker runs it, after whichever other tests."""
    global R
    R = np.random.default_rng(7)


def rand(*shape: int) -> np.ndarray:
    return R.standard_normal(shape).astype(np.float32)


# name: (x shape, weight shape, bias, attributes)
CONV_CASES = {
    "plain": ((1, 3, 9, 9), (4, 3, 3, 3), True, {}),
    "stride2_pad1": ((2, 3, 10, 11), (5, 3, 3, 3), True, dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    "stride2_wide": ((1, 4, 12, 40), (6, 4, 3, 3), True, dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    "stride3": ((1, 2, 13, 29), (3, 2, 3, 3), True, dict(strides=[3, 3], pads=[1, 1, 1, 1])),
    "asymmetric_pads_strides": ((1, 4, 13, 7), (6, 4, 3, 2), True, dict(strides=[2, 1], pads=[0, 1, 2, 0])),
    "dilation": ((1, 2, 15, 12), (3, 2, 3, 3), True, dict(dilations=[2, 3], pads=[2, 3, 2, 3])),
    "grouped": ((1, 8, 9, 9), (12, 2, 3, 3), True, dict(group=4, pads=[1, 1, 1, 1])),
    "depthwise": ((1, 6, 8, 21), (6, 1, 3, 3), True, dict(group=6, pads=[1, 1, 1, 1])),
    "depthwise_multiplier": ((1, 3, 8, 8), (6, 1, 5, 5), True, dict(group=3, strides=[2, 2], pads=[2, 2, 2, 2])),
    "pointwise": ((1, 16, 7, 7), (9, 16, 1, 1), True, {}),
    "pointwise_batch_long": ((2, 5, 9, 13), (7, 5, 1, 1), True, {}),
    "pointwise_strided": ((1, 6, 9, 9), (5, 6, 1, 1), True, dict(strides=[2, 2])),
    "wide_7x7": ((1, 3, 20, 20), (8, 3, 7, 7), True, dict(strides=[2, 2], pads=[3, 3, 3, 3])),
    "same_upper": ((1, 3, 10, 9), (4, 3, 4, 3), True, dict(strides=[3, 2], auto_pad="SAME_UPPER")),
    "same_lower": ((1, 3, 10, 9), (4, 3, 4, 3), True, dict(strides=[3, 2], auto_pad="SAME_LOWER")),
    "valid": ((1, 3, 10, 9), (4, 3, 3, 3), True, dict(auto_pad="VALID")),
    "no_bias": ((1, 3, 6, 6), (2, 3, 3, 3), False, {}),
    "1d": ((1, 3, 17), (4, 3, 3), True, dict(pads=[1, 1])),
    "1d_strided_dilated_grouped": ((2, 4, 20), (6, 2, 3), False, dict(strides=[2], dilations=[2], group=2,
                                                                      pads=[2, 1])),
}


def conv_model(x_shape, w_shape, bias: bool = True, **attrs) -> onnx.ModelProto:
    constants = {"W": rand(*w_shape)}
    if bias:
        constants["B"] = rand(w_shape[0])
    return single_node_model("Conv", x_shape, constants, **attrs)


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv(target, case: str) -> None:
    x_shape, w_shape, bias, attrs = CONV_CASES[case]
    sess = target.check(conv_model(x_shape, w_shape, bias, **attrs), {"x": rand(*x_shape)})
    assert [n.op for n in sess.graph.nodes if n.op != "Reshape"] == ["Conv"]


def test_conv_geometry_fuzz(target) -> None:
    """Grouped convolutions of any kernel, stride, dilation and pads. OpenCL compiles programs
    per geometry: there fewer examples, the same every run (its kernel cache stays warm)."""
    @settings(max_examples=12 if target.backend == "opencl" else 25, deadline=None,
              derandomize=target.backend == "opencl",
              suppress_health_check=[HealthCheck.too_slow])
    @given(case=conv_cases(batch=2, max_m_per_group=9, min_hw=3, weights=rand))
    def run(case) -> None:
        if case is not None:
            model, x_shape = case
            target.check(model, {"x": rand(*x_shape)})
    run()


# -- fused patterns ---------------------------------------------------------------------------------
# id: (ONNX op, attributes, Clip's (min, max) as inputs)
ACTIVATIONS = {
    "Relu": ("Relu", {}, None), "Clip-0-6": ("Clip", {}, (0.0, 6.0)), "Clip-narrow": ("Clip", {}, (-0.5, 0.7)),
    "LeakyRelu": ("LeakyRelu", {"alpha": 0.1}, None), "Sigmoid": ("Sigmoid", {}, None), "Tanh": ("Tanh", {}, None),
    "HardSigmoid": ("HardSigmoid", {"alpha": 0.2, "beta": 0.5}, None), "HardSwish": ("HardSwish", {}, None),
}


@pytest.mark.parametrize("act", ACTIVATIONS)
def test_activation_fused_into_conv_and_gemm(target, act: str) -> None:
    """x -> Conv -> act (fused) -> GlobalAveragePool -> Reshape -> Gemm -> act (fused), and the
    activation stand-alone on the Conv's (NHWC on cpu) output."""
    op, attrs, clip = ACTIVATIONS[act]
    bounds = ["lo", "hi"] if clip else []

    def activation(inp: str, out: str) -> onnx.NodeProto:
        return oh.make_node(op, [inp, *bounds], [out], **attrs)
    nodes = [oh.make_node("Conv", ["x", "w", "b"], ["c0"], pads=[1, 1, 1, 1]), activation("c0", "c"),
             oh.make_node("GlobalAveragePool", ["c"], ["p"]), oh.make_node("Reshape", ["p", "shape"], ["f"]),
             oh.make_node("Gemm", ["f", "fw"], ["g"], transB=1), activation("g", "y"), activation("c", "z")]
    # Conv outputs of about 2.5 standard deviations span every activation's bends; larger ones
    # would leave fp16's absolute rounding where a saturating activation shrinks the output's scale
    constants = {"w": rand(6, 6, 3, 3) * 0.35, "b": rand(6), "shape": np.array([1, 6], np.int64), "fw": rand(4, 6)}
    if clip:
        constants.update(lo=np.float32(clip[0]), hi=np.float32(clip[1]))
    model = graph_model(nodes, {"x": (1, 6, 7, 5)}, ["y", "c", "z"], constants)
    sess = target.check(model, {"x": rand(1, 6, 7, 5)})
    fused = {n.op: n.attrs["fused_activation"].kind for n in sess.graph.nodes if "fused_activation" in n.attrs}
    assert fused == {"Conv": op, "Gemm": op}


def test_batchnorm_and_activation_fold_into_conv(target) -> None:
    nodes = [oh.make_node("Conv", ["x", "w"], ["c"], strides=[2, 2], pads=[1, 1, 1, 1]),
             oh.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["n"], epsilon=1e-3),
             oh.make_node("Relu", ["n"], ["y"])]
    constants = {"w": rand(8, 4, 3, 3), "s": rand(8), "bb": rand(8), "m": rand(8), "v": np.abs(rand(8)) + 0.5}
    sess = target.check(graph_model(nodes, {"x": (1, 4, 9, 8)}, ["y"], constants), {"x": rand(1, 4, 9, 8)})
    assert [n.op for n in sess.graph.nodes] == ["Conv"]


def test_grouped_and_depthwise_chains_with_matmul_and_transposed_gemm(target) -> None:
    """A conv feeding a grouped (strided, dilated, asymmetric pads, fused ReLU) and a depthwise
    conv; the depthwise output transposed to NHWC into a MatMul, the grouped one reshaped into a
    Gemm with transA."""
    nodes = [oh.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             oh.make_node("Conv", ["c", "wg"], ["g0"], strides=[2, 1], dilations=[1, 2], pads=[1, 2, 1, 2], group=4),
             oh.make_node("Relu", ["g0"], ["grouped"]),
             oh.make_node("Conv", ["c", "wd"], ["dw"], pads=[1, 1, 1, 1], group=8),
             oh.make_node("Transpose", ["dw"], ["t"], perm=[0, 2, 3, 1]),
             oh.make_node("MatMul", ["t", "mw"], ["mm"]),
             oh.make_node("Reshape", ["grouped", "shape"], ["flat"]),
             oh.make_node("Gemm", ["flat", "gw"], ["gt"], alpha=0.5, transA=1)]
    constants = {"w": rand(8, 8, 3, 3), "b": rand(8), "wg": rand(12, 2, 3, 3), "wd": rand(8, 1, 3, 3),
                 "mw": rand(8, 3), "shape": np.array([12, 30], np.int64), "gw": rand(12, 5)}
    model = graph_model(nodes, {"x": (1, 8, 9, 6)}, ["mm", "gt", "grouped"], constants)
    why = "Gemm with transA: no OpenCL kernel"
    target.check(model, {"x": rand(1, 8, 9, 6)}, may_fall_back={"opencl/fp32:Gemm": why, "opencl/fp16:Gemm": why})
