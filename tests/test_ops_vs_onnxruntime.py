"""Every runtime op of the reference backend against ONNX Runtime (rtol 1e-4)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import edgesdk
from conftest import assert_close, ort_run
from geometry_cases import conv_cases, pool_cases
from onnx_builders import single_node_model

R = np.random.default_rng(1)


def rand(*shape: int) -> np.ndarray:
    return R.standard_normal(shape).astype(np.float32)


def check(model, x: np.ndarray, rtol: float = 1e-4) -> None:
    expected = ort_run(model, {"x": x})
    sess = edgesdk.Session(model, backend="reference")
    got = sess.run({"x": x})
    for name, exp in zip(sess.output_names, expected):
        assert_close(got[name], exp, rtol, what=name)


CONV_CASES = {
    "plain": dict(x=(1, 3, 9, 9), w=(4, 3, 3, 3)),
    "stride2_pad1": dict(x=(2, 3, 10, 11), w=(5, 3, 3, 3), strides=[2, 2], pads=[1, 1, 1, 1]),
    "asymmetric_pads_strides": dict(x=(1, 4, 13, 7), w=(6, 4, 3, 2), strides=[2, 1], pads=[0, 1, 2, 0]),
    "dilation": dict(x=(1, 2, 15, 12), w=(3, 2, 3, 3), dilations=[2, 3], pads=[2, 3, 2, 3]),
    "grouped": dict(x=(1, 8, 9, 9), w=(12, 2, 3, 3), group=4, pads=[1, 1, 1, 1]),
    "depthwise": dict(x=(1, 6, 8, 8), w=(6, 1, 3, 3), group=6, pads=[1, 1, 1, 1]),
    "depthwise_multiplier": dict(x=(1, 3, 8, 8), w=(6, 1, 5, 5), group=3, strides=[2, 2], pads=[2, 2, 2, 2]),
    "pointwise": dict(x=(1, 16, 7, 7), w=(8, 16, 1, 1)),
    "same_upper": dict(x=(1, 3, 10, 9), w=(4, 3, 4, 3), strides=[3, 2], auto_pad="SAME_UPPER"),
    "same_lower": dict(x=(1, 3, 10, 9), w=(4, 3, 4, 3), strides=[3, 2], auto_pad="SAME_LOWER"),
    "valid": dict(x=(1, 3, 10, 9), w=(4, 3, 3, 3), auto_pad="VALID"),
    "no_bias": dict(x=(1, 3, 6, 6), w=(2, 3, 3, 3), bias=False),
}


@pytest.mark.parametrize("case", CONV_CASES, ids=str)
def test_conv(case: str) -> None:
    spec = dict(CONV_CASES[case])
    x_shape, w_shape, bias = spec.pop("x"), spec.pop("w"), spec.pop("bias", True)
    consts = {"W": rand(*w_shape)}
    if bias:
        consts["B"] = rand(w_shape[0])
    check(single_node_model("Conv", x_shape, consts, **spec), rand(*x_shape))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=conv_cases(batch=1, max_m_per_group=3, min_hw=5, weights=rand))
def test_conv_geometry_fuzz(case) -> None:
    if case is not None:
        model, x_shape = case
        check(model, rand(*x_shape))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=pool_cases(channels=2, opset=17))
def test_pool_geometry_fuzz(case) -> None:
    if case is not None:
        model, x_shape = case
        check(model, rand(*x_shape))


def test_squeezenet_style_ceil_pool() -> None:
    check(single_node_model("MaxPool", (1, 4, 13, 13), kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
          rand(1, 4, 13, 13))


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pools(op: str) -> None:
    check(single_node_model(op, (2, 5, 7, 3)), rand(2, 5, 7, 3))


GEMM_CASES = {
    "plain": dict(a=(3, 5), b=(5, 4), c=(4,)),
    "transB": dict(a=(2, 6), b=(3, 6), c=(3,), transB=1),
    "transA_alpha_beta": dict(a=(6, 2), b=(6, 3), c=(2, 3), transA=1, alpha=0.5, beta=2.0),
    "scalar_c": dict(a=(1, 7), b=(7, 2), c=()),
    "no_c": dict(a=(4, 3), b=(3, 5), c=None),
}


@pytest.mark.parametrize("case", GEMM_CASES, ids=str)
def test_gemm(case: str) -> None:
    spec = dict(GEMM_CASES[case])
    a, b, c = spec.pop("a"), spec.pop("b"), spec.pop("c")
    consts = {"B": rand(*b)}
    if c is not None:
        consts["C"] = rand(*c) if c else np.float32(0.3)
    check(single_node_model("Gemm", a, consts, **spec), rand(*a))


@pytest.mark.parametrize("a,b", [((3, 4), (4, 5)), ((2, 3, 4), (4, 6)), ((2, 1, 3, 4), (5, 4, 2)), ((4,), (4, 3)),
                                 ((2, 3, 4), (4,))])
def test_matmul_broadcasting(a, b) -> None:
    check(single_node_model("MatMul", a, {"B": rand(*b)}), rand(*a))


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("x,c", [((2, 3, 4, 5), (3, 1, 1)), ((2, 3), (2, 3)), ((1, 4, 1), (3, 1, 5)), ((4,), ())])
def test_eltwise_broadcasting(op, x, c) -> None:
    const = rand(*c) if c else np.float32(1.7)
    if op == "Div":
        const = np.abs(const) + np.float32(0.5)
    check(single_node_model(op, x, {"C": const}), rand(*x))


ACTIVATIONS = [
    ("Relu", {}, {}), ("Sigmoid", {}, {}), ("Tanh", {}, {}), ("HardSwish", {}, {}),
    ("LeakyRelu", {"alpha": 0.1}, {}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, {}),
    ("Clip", {}, {"min": np.float32(-0.5), "max": np.float32(0.7)}), ("Clip", {}, {"min": np.float32(0.0)}),
]


@pytest.mark.parametrize("op,attrs,consts", ACTIVATIONS, ids=lambda v: str(v) if isinstance(v, str) else "")
def test_activations(op, attrs, consts) -> None:
    x = rand(2, 3, 5, 5) * 4
    names = list(consts) if "max" not in consts or "min" in consts else ["", "max"]
    check(single_node_model(op, x.shape, consts, extra_inputs=names, **attrs), x)


def test_clip_attributes_in_opset_10_are_upgraded() -> None:
    x = rand(2, 6)
    check(single_node_model("Clip", x.shape, opset=10, min=-0.2, max=0.3), x)


@pytest.mark.parametrize("opset,axis", [(11, 1), (11, 2), (13, 1), (13, -1), (13, 2)])
def test_softmax_axis_semantics(opset, axis) -> None:
    x = rand(2, 3, 4, 5) * 3
    check(single_node_model("Softmax", x.shape, opset=opset, axis=axis), x)


def test_lrn() -> None:
    x = rand(1, 7, 5, 5)
    check(single_node_model("LRN", x.shape, size=3, alpha=1e-3, beta=0.75, bias=2.0), x)
    check(single_node_model("LRN", x.shape, size=5), x)


def test_batchnorm_standalone() -> None:
    c = 5
    consts = {"s": rand(c), "b": rand(c), "m": rand(c), "v": np.abs(rand(c)) + np.float32(0.5)}
    check(single_node_model("BatchNormalization", (2, c, 4, 4), consts, epsilon=1e-3), rand(2, c, 4, 4))


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad(mode: str) -> None:
    x = rand(1, 3, 5, 6)
    pads = np.array([0, 0, 1, 2, 0, 1, 2, 0], dtype=np.int64)
    consts = {"pads": pads} if mode != "constant" else {"pads": pads, "value": np.float32(0.5)}
    check(single_node_model("Pad", x.shape, consts, mode=mode), x)


def test_pad_negative_crops() -> None:
    x = rand(1, 2, 6, 6)
    check(single_node_model("Pad", x.shape, {"pads": np.array([0, 0, -1, 2, 0, 0, 1, -2], np.int64)}), x)


@pytest.mark.parametrize("pads", [[0, 0, 10, 0, 0, 0, -10, 0], [0, 0, -10, 0, 0, 0, 10, 0],
                                  [0, 0, 6, -5, 0, 0, -9, 2], [0, 0, -4, 0, 0, 0, 3, 0]])
def test_pad_crop_larger_than_the_dimension_eats_the_padding(pads: list[int]) -> None:
    # +10 / -10 on a dimension of 4: four padding values (crop-then-pad gave 10)
    x = rand(1, 2, 4, 5)
    check(single_node_model("Pad", x.shape, {"pads": np.array(pads, np.int64), "value": np.float32(0.25)}), x)


def test_layout_ops() -> None:
    x = rand(2, 3, 4, 5)
    check(single_node_model("Transpose", x.shape, perm=[0, 2, 3, 1]), x)
    check(single_node_model("Reshape", x.shape, {"s": np.array([0, -1, 5], np.int64)}), x)
    check(single_node_model("Flatten", x.shape, axis=2), x)
    check(single_node_model("Flatten", x.shape, axis=-1), x)
    check(single_node_model("Unsqueeze", x.shape, {"axes": np.array([0, -1], np.int64)}), x)
    check(single_node_model("Unsqueeze", x.shape, opset=11, axes=[1]), x)
    y = rand(2, 1, 4, 1)
    check(single_node_model("Squeeze", y.shape, {"axes": np.array([1], np.int64)}), y)
    check(single_node_model("Squeeze", y.shape), y)
    check(single_node_model("Concat", x.shape, {"c": rand(2, 3, 1, 5)}, axis=-2), x)
    check(single_node_model("Identity", x.shape), x)
    check(single_node_model("Dropout", x.shape, {"ratio": np.float32(0.3)}), x)


@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("axes,keepdims", [([2, 3], 1), ([2, 3], 0), ([-1], 1), ([1], 0), (None, 0)])
def test_reduce_mean(opset, axes, keepdims) -> None:
    x = rand(2, 3, 4, 5)
    if axes is None:
        model = single_node_model("ReduceMean", x.shape, opset=opset, keepdims=keepdims)
    elif opset >= 18:
        model = single_node_model("ReduceMean", x.shape, {"axes": np.array(axes, np.int64)}, opset=opset,
                                  keepdims=keepdims)
    else:
        model = single_node_model("ReduceMean", x.shape, opset=opset, axes=axes, keepdims=keepdims)
    check(model, x)
