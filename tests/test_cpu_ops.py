"""Every op of the cpu backend against the reference backend (rtol 1e-4 fp32, 1e-2 fp16), on small
and odd shapes, as single ONNX nodes (graph-order input and output) and inside hand-built graphs
where a convolution feeds the op (its input arrives in the backend's NHWC layout)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import edgesdk
from conftest import assert_close
from edgesdk.graph import Graph
from edgesdk.runtime.activations import Activation
from geometry_cases import conv_cases, pool_cases
from onnx_builders import single_node_model
from test_ops_vs_onnxruntime import ACTIVATIONS, CONV_CASES, GEMM_CASES

R = np.random.default_rng(7)
TOLERANCE = {"fp32": 1e-4, "fp16": 1e-2}


def rand(*shape: int) -> np.ndarray:
    return R.standard_normal(shape).astype(np.float32)


def compare(model, feeds: dict[str, np.ndarray] | np.ndarray, precision: str = "fp32", **options) -> edgesdk.Session:
    """Run ``model`` on the reference and cpu backends; outputs must agree. Returns the cpu session."""
    cpu = edgesdk.Session(model, backend="cpu", precision=precision, **options)
    if isinstance(feeds, np.ndarray):
        feeds = {cpu.input_names[0]: feeds}
    ref = edgesdk.Session(model, backend="reference", precision=precision)
    expected, got = ref.run(feeds), cpu.run(feeds)
    for name in ref.output_names:
        assert_close(got[name], expected[name], TOLERANCE[precision], what=f"{name} ({precision})")
    return cpu


def placements(sess: edgesdk.Session) -> dict[str, str]:
    return sess._impl.placements


# -- single nodes -------------------------------------------------------------------------------
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("case", CONV_CASES, ids=str)
def test_conv(case: str, precision: str) -> None:
    spec = dict(CONV_CASES[case])
    x_shape, w_shape, bias = spec.pop("x"), spec.pop("w"), spec.pop("bias", True)
    consts = {"W": rand(*w_shape)}
    if bias:
        consts["B"] = rand(w_shape[0])
    sess = compare(single_node_model("Conv", x_shape, consts, **spec), rand(*x_shape), precision)
    assert set(placements(sess).values()) == {"native"}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=conv_cases(batch=2, max_m_per_group=9, min_hw=3, weights=rand))
def test_conv_geometry_fuzz(case) -> None:
    if case is not None:
        model, x_shape = case
        compare(model, rand(*x_shape))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=pool_cases(channels=5))
def test_pool_geometry_fuzz(case) -> None:
    if case is not None:
        model, x_shape = case
        compare(model, rand(*x_shape))


def test_average_pool_counting_a_ceil_overhang_falls_back_explicitly() -> None:
    # 7 -> ceil((7 - 2) / 2) + 1 = 4 windows: the last one hangs one pixel past the input.
    model = single_node_model("AveragePool", (1, 3, 7, 7), kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1,
                              count_include_pad=1)
    sess = compare(model, rand(1, 3, 7, 7))
    assert list(placements(sess).values()) == ["reference"]
    assert "overhang" in next(iter(sess._impl.fallback_reasons.values()))


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pools(op: str) -> None:
    compare(single_node_model(op, (2, 5, 7, 3)), rand(2, 5, 7, 3))


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("case", GEMM_CASES, ids=str)
def test_gemm(case: str, precision: str) -> None:
    spec = dict(GEMM_CASES[case])
    a, b, c = spec.pop("a"), spec.pop("b"), spec.pop("c")
    consts = {"B": rand(*b)}
    if c is not None:
        consts["C"] = rand(*c) if c else np.float32(0.3)
    compare(single_node_model("Gemm", a, consts, **spec), rand(*a), precision)


@pytest.mark.parametrize("a,b", [((3, 4), (4, 5)), ((2, 3, 4), (4, 6)), ((2, 1, 3, 4), (5, 4, 2)), ((4,), (4, 3)),
                                 ((2, 3, 4), (4,)), ((1, 37), (37, 19))])
def test_matmul(a, b) -> None:
    compare(single_node_model("MatMul", a, {"B": rand(*b)}), rand(*a))


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("x,c", [((2, 3, 4, 5), (3, 1, 1)), ((2, 3), (2, 3)), ((1, 4, 1), (3, 1, 5)), ((4,), ()),
                                 ((2, 3, 4, 5), (5,)), ((2, 3, 4, 5), (2, 3, 4, 5))])
def test_eltwise_with_constant(op, x, c) -> None:
    const = rand(*c) if c else np.float32(1.7)
    if op == "Div":
        const = np.abs(const) + np.float32(0.5)
    compare(single_node_model(op, x, {"C": const}), rand(*x))


@pytest.mark.parametrize("op,attrs,consts", ACTIVATIONS, ids=lambda v: str(v) if isinstance(v, str) else "")
def test_activations(op, attrs, consts) -> None:
    x = rand(2, 3, 5, 5) * 4
    names = list(consts) if "max" not in consts or "min" in consts else ["", "max"]
    sess = compare(single_node_model(op, x.shape, consts, extra_inputs=names, **attrs), x)
    assert set(placements(sess).values()) == {"native"}


@pytest.mark.parametrize("opset,axis", [(11, 1), (11, 2), (13, 1), (13, -1), (13, 2)])
def test_softmax_axis_semantics(opset, axis) -> None:
    x = rand(2, 3, 4, 5) * 3
    compare(single_node_model("Softmax", x.shape, opset=opset, axis=axis), x)


def test_lrn_runs_the_reference_kernel_explicitly() -> None:
    x = rand(1, 7, 5, 5)
    sess = compare(single_node_model("LRN", x.shape, size=3, alpha=1e-3, beta=0.75, bias=2.0), x)
    assert list(placements(sess).values()) == ["reference"]


def test_batchnorm_standalone() -> None:
    c = 5
    consts = {"s": rand(c), "b": rand(c), "m": rand(c), "v": np.abs(rand(c)) + np.float32(0.5)}
    sess = compare(single_node_model("BatchNormalization", (2, c, 4, 4), consts, epsilon=1e-3), rand(2, c, 4, 4))
    assert set(placements(sess).values()) == {"native"}


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad(mode: str) -> None:
    x = rand(1, 3, 5, 6)
    pads = np.array([0, 0, 1, 2, 0, 1, 2, 0], dtype=np.int64)
    consts = {"pads": pads} if mode != "constant" else {"pads": pads, "value": np.float32(0.5)}
    compare(single_node_model("Pad", x.shape, consts, mode=mode), x)
    compare(single_node_model("Pad", x.shape, {"pads": np.array([0, 0, -1, 2, 0, 0, 1, -2], np.int64)}), x)


def test_layout_ops() -> None:
    x = rand(2, 3, 4, 5)
    compare(single_node_model("Transpose", x.shape, perm=[0, 2, 3, 1]), x)
    compare(single_node_model("Reshape", x.shape, {"s": np.array([0, -1, 5], np.int64)}), x)
    compare(single_node_model("Flatten", x.shape, axis=2), x)
    compare(single_node_model("Concat", x.shape, {"c": rand(2, 3, 1, 5)}, axis=-2), x)
    compare(single_node_model("Identity", x.shape), x)


@pytest.mark.parametrize("axes,keepdims", [([2, 3], 1), ([2, 3], 0), ([-1], 1), ([1], 0), (None, 0)])
def test_reduce_mean(axes, keepdims) -> None:
    x = rand(2, 3, 4, 5)
    attrs = {} if axes is None else {"axes": axes}
    compare(single_node_model("ReduceMean", x.shape, opset=13, keepdims=keepdims, **attrs), x)


# -- ops fed by a convolution (NHWC inputs) -----------------------------------------------------
def conv_graph(x_shape=(1, 6, 7, 5), out_channels=6, act: Activation | None = None) -> tuple[Graph, str]:
    """x -> 3x3 Conv (padded) -> "c": a graph to extend with the op under test."""
    g = Graph("chain")
    g.add_input("x", x_shape)
    g.add_constant("w", rand(out_channels, x_shape[1], 3, 3))
    g.add_constant("b", rand(out_channels))
    attrs = dict(kernel_shape=(3, 3), strides=(1, 1), dilations=(1, 1), pads=(1, 1, 1, 1), group=1)
    if act is not None:
        attrs["fused_activation"] = act
    g.add_node("Conv", ["x", "w", "b"], ["c"], **attrs)
    return g, "c"


def _finish(g: Graph, *outputs: str) -> Graph:
    g.outputs = list(outputs)
    return g


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("other", ["channel", "scalar", "full", "row", "activation", "activation_channel"])
def test_eltwise_after_conv(op: str, other: str) -> None:
    g, c = conv_graph()
    shapes = {"channel": (1, 6, 1, 1), "scalar": (1,), "full": (1, 6, 7, 5), "row": (5,)}
    if other in shapes:
        value = rand(*shapes[other])
        g.add_constant("k", np.abs(value) + 0.5 if op == "Div" else value)
        operand = "k"
    elif other == "activation":
        g.add_node("Conv", ["x", "w", "b"], ["c2"], kernel_shape=(3, 3), strides=(1, 1), dilations=(1, 1),
                   pads=(1, 1, 1, 1), group=1)
        operand = "c2"
    else:
        g.add_node("GlobalAveragePool", ["c"], ["gap"])
        operand = "gap"
    g.add_node(op, [operand, c] if op == "Sub" else [c, operand], ["y"])
    outputs = ["y"]
    if op in ("Add", "Mul"):
        g.add_node(op, [c, operand], ["y2"], fused_activation=Activation("Relu"))
        outputs.append("y2")
    compare(_finish(g, *outputs), rand(1, 6, 7, 5))


@pytest.mark.parametrize("act", [Activation("Relu"), Activation("Clip", (0.0, 6.0)), Activation("Clip", (-0.5, 0.7)),
                                 Activation("LeakyRelu", (0.1,)), Activation("Sigmoid"), Activation("Tanh"),
                                 Activation("HardSigmoid", (0.2, 0.5)), Activation("HardSwish")], ids=str)
def test_fused_activations(act: Activation) -> None:
    g, c = conv_graph(act=act)
    g.add_node("GlobalAveragePool", [c], ["p"])
    g.add_node("Reshape", ["p"], ["f"], shape=(1, 6))
    g.add_constant("fw", rand(4, 6))
    g.add_node("Gemm", ["f", "fw"], ["y"], alpha=1.0, beta=1.0, transA=False, transB=True, fused_activation=act)
    g.add_node(act.kind, [c], ["z"], activation=act)  # stand-alone as well
    compare(_finish(g, "y", "c", "z"), rand(1, 6, 7, 5) * 3)


def test_layout_sensitive_ops_after_conv() -> None:
    g, c = conv_graph()
    g.add_node("Reshape", [c], ["flat"], shape=(1, 6 * 7 * 5))
    g.add_node("Transpose", [c], ["t_nhwc"], perm=(0, 2, 3, 1))
    g.add_node("Transpose", [c], ["t_other"], perm=(0, 3, 1, 2))
    g.add_node("Softmax", [c], ["sm1"], axis=1, coerce_2d=False)
    g.add_node("Softmax", [c], ["sm3"], axis=3, coerce_2d=False)
    g.add_node("Softmax", [c], ["sm_coerce"], axis=2, coerce_2d=True)
    g.add_node("Softmax", [c], ["sm2"], axis=2, coerce_2d=False)
    g.add_node("Concat", [c, "x"], ["cat1"], axis=1)
    g.add_node("Concat", [c, c], ["cat3"], axis=3)
    g.add_node("LRN", [c], ["lrn"], size=3, alpha=1e-3, beta=0.75, bias=2.0)
    g.add_node("Pad", [c], ["pad"], pads=(0, 0, 1, 0, 0, 0, 0, 2), mode="constant", value=0.0)
    g.add_node("MaxPool", [c], ["mp"], kernel_shape=(3, 3), strides=(2, 2), dilations=(1, 1), pads=(0, 0, 0, 0),
               ceil_mode=True)
    g.add_node("ReduceMean", [c], ["rm"], axes=(1,), keepdims=True)
    g.add_node("ReduceMean", [c], ["gm"], axes=(2, 3), keepdims=False)
    g.add_node("GlobalMaxPool", [c], ["gmax"])
    for p in ("bn_s", "bn_b", "bn_m"):
        g.add_constant(p, rand(6))
    g.add_constant("bn_v", np.abs(rand(6)) + 0.5)
    g.add_node("BatchNormalization", [c, "bn_s", "bn_b", "bn_m", "bn_v"], ["bn"], epsilon=1e-5)
    outs = ["flat", "t_nhwc", "t_other", "sm1", "sm3", "sm_coerce", "sm2", "cat1", "cat3", "lrn", "pad", "mp",
            "rm", "gm", "gmax", "bn"]
    sess = compare(_finish(g, *outs), rand(1, 6, 7, 5))
    assert placements(sess)[next(n.name for n in sess.graph.nodes if n.outputs == ["t_nhwc"])] == "view"


def test_grouped_and_depthwise_chains_with_matmul_and_transposed_gemm() -> None:
    g, c = conv_graph((1, 8, 9, 6), out_channels=8)
    g.add_constant("wg", rand(12, 2, 3, 3))
    g.add_node("Conv", [c, "wg"], ["grouped"], kernel_shape=(3, 3), strides=(2, 1), dilations=(1, 2),
               pads=(1, 2, 1, 2), group=4, fused_activation=Activation("Relu"))
    g.add_constant("wd", rand(8, 1, 3, 3))
    g.add_node("Conv", [c, "wd"], ["dw"], kernel_shape=(3, 3), strides=(1, 1), dilations=(1, 1),
               pads=(1, 1, 1, 1), group=8)
    g.add_node("Transpose", ["dw"], ["t"], perm=(0, 2, 3, 1))
    g.add_constant("mw", rand(8, 3))
    g.add_node("MatMul", ["t", "mw"], ["mm"])
    g.add_node("Reshape", ["grouped"], ["flat"], shape=(12, 30))
    g.add_constant("gw", rand(12, 5))
    g.add_node("Gemm", ["flat", "gw"], ["gt"], alpha=0.5, beta=1.0, transA=True, transB=False)
    sess = compare(_finish(g, "mm", "gt", "grouped"), rand(1, 8, 9, 6))
    assert "reference" not in placements(sess).values()
