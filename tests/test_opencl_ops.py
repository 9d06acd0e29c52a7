"""Every op of the opencl backend against the reference backend on small shapes (PoCL here).

fp32: rtol 1e-4. fp16: against the reference backend's fp16 mode, which is the numpy float16
model (weights and activations rounded to half after every op, float32 arithmetic), rtol 1e-2.
Every case also asserts that the node really ran on the device (no silent fallback).
"""
from __future__ import annotations

import numpy as np
import pytest

import edgesdk
from conftest import assert_close
from onnx_builders import single_node_model

pytest.importorskip("pyopencl")
from edgesdk.backends.opencl import OpenCLBackend  # noqa: E402

pytestmark = pytest.mark.skipif(OpenCLBackend.unavailable_reason() is not None,
                                reason=str(OpenCLBackend.unavailable_reason()))

R = np.random.default_rng(7)


def rand(*shape: int) -> np.ndarray:
    return R.standard_normal(shape).astype(np.float32)


def check(model, x: np.ndarray, precision: str = "fp32", placement: str | None = "opencl") -> edgesdk.Session:
    ref = edgesdk.Session(model, backend="reference", precision=precision)
    ocl = edgesdk.Session(model, backend="opencl", precision=precision)
    if placement is not None:
        placements = set(ocl._impl.placements.values()) - {"view"}
        assert placements == {placement}, ocl._impl.fallback_reasons
    feeds = {ref.input_names[0]: x}
    expected, got = ref.run(feeds), ocl.run(feeds)
    rtol = 1e-4 if precision == "fp32" else 1e-2
    for name in ref.output_names:
        assert got[name].dtype == np.float32
        assert_close(got[name], expected[name], rtol, what=f"{name} ({precision})")
    return ocl


CONV_CASES = {
    "plain": dict(x=(1, 3, 9, 9), w=(4, 3, 3, 3)),
    "stride2_pad1": dict(x=(2, 3, 10, 11), w=(5, 3, 3, 3), strides=[2, 2], pads=[1, 1, 1, 1]),
    "stride2_wide": dict(x=(1, 4, 12, 40), w=(6, 4, 3, 3), strides=[2, 2], pads=[1, 1, 1, 1]),
    "stride3": dict(x=(1, 2, 13, 29), w=(3, 2, 3, 3), strides=[3, 3], pads=[1, 1, 1, 1]),
    "asymmetric_pads_strides": dict(x=(1, 4, 13, 7), w=(6, 4, 3, 2), strides=[2, 1], pads=[0, 1, 2, 0]),
    "dilation": dict(x=(1, 2, 15, 12), w=(3, 2, 3, 3), dilations=[2, 3], pads=[2, 3, 2, 3]),
    "grouped": dict(x=(1, 8, 9, 9), w=(12, 2, 3, 3), group=4, pads=[1, 1, 1, 1]),
    "depthwise": dict(x=(1, 6, 8, 21), w=(6, 1, 3, 3), group=6, pads=[1, 1, 1, 1]),
    "depthwise_multiplier": dict(x=(1, 3, 8, 8), w=(6, 1, 5, 5), group=3, strides=[2, 2], pads=[2, 2, 2, 2]),
    "pointwise": dict(x=(1, 16, 7, 7), w=(9, 16, 1, 1)),
    "pointwise_batch_long": dict(x=(2, 5, 9, 13), w=(7, 5, 1, 1)),
    "pointwise_strided": dict(x=(1, 6, 9, 9), w=(5, 6, 1, 1), strides=[2, 2]),
    "wide_7x7": dict(x=(1, 3, 20, 20), w=(8, 3, 7, 7), strides=[2, 2], pads=[3, 3, 3, 3]),
    "no_bias": dict(x=(1, 3, 6, 6), w=(2, 3, 3, 3), bias=False),
}


def _conv_model(spec: dict):
    spec = dict(spec)
    x_shape, w_shape, bias = spec.pop("x"), spec.pop("w"), spec.pop("bias", True)
    consts = {"W": rand(*w_shape)}
    if bias:
        consts["B"] = rand(w_shape[0])
    return single_node_model("Conv", x_shape, consts, **spec), x_shape


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("case", CONV_CASES, ids=str)
def test_conv(case: str, precision: str) -> None:
    model, x_shape = _conv_model(CONV_CASES[case])
    check(model, rand(*x_shape), precision)


POOL_CASES = [
    ("MaxPool", dict(kernel_shape=[2, 2], strides=[2, 2])),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("MaxPool", dict(kernel_shape=[2, 3], strides=[1, 2], dilations=[2, 1], pads=[1, 0, 1, 1])),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1], count_include_pad=0)),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1)),
    ("AveragePool", dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1, count_include_pad=1)),
]


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("op,attrs", POOL_CASES, ids=lambda v: v if isinstance(v, str) else "")
def test_pool(op: str, attrs: dict, precision: str) -> None:
    check(single_node_model(op, (1, 3, 11, 13), **attrs), rand(1, 3, 11, 13), precision)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pools(op: str) -> None:
    check(single_node_model(op, (2, 5, 7, 3)), rand(2, 5, 7, 3))
    check(single_node_model(op, (1, 4, 9, 9)), rand(1, 4, 9, 9), "fp16")


GEMM_CASES = {
    "plain": dict(a=(3, 5), b=(5, 4), c=(4,)),
    "transB_gemv": dict(a=(1, 37), b=(11, 37), c=(11,), transB=1),
    "transB_batch": dict(a=(6, 20), b=(3, 20), c=(1, 3), transB=1),
    "alpha_beta_full_c": dict(a=(5, 9), b=(9, 3), c=(5, 3), alpha=0.5, beta=2.0),
    "column_c": dict(a=(4, 8), b=(8, 5), c=(4, 1)),
    "scalar_c": dict(a=(1, 7), b=(7, 2), c=()),
    "no_c": dict(a=(4, 3), b=(3, 5), c=None),
}


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("case", GEMM_CASES, ids=str)
def test_gemm(case: str, precision: str) -> None:
    spec = dict(GEMM_CASES[case])
    a, b, c = spec.pop("a"), spec.pop("b"), spec.pop("c")
    consts = {"B": rand(*b)}
    if c is not None:
        consts["C"] = rand(*c) if c else np.float32(0.3)
    check(single_node_model("Gemm", a, consts, **spec), rand(*a), precision)


def test_gemm_trans_a_falls_back_visibly() -> None:
    model = single_node_model("Gemm", (6, 2), {"B": rand(6, 3)}, transA=1)
    sess = check(model, rand(6, 2), placement="reference")
    assert "transA" in next(iter(sess._impl.fallback_reasons.values()))


@pytest.mark.parametrize("a,b", [((3, 4), (4, 5)), ((2, 3, 4), (4, 6)), ((2, 1, 3, 4), (5, 4, 2)),
                                 ((4,), (4, 3)), ((2, 3, 4), (4,)), ((1, 3, 13, 32), (3, 32, 8))])
def test_matmul_broadcasting(a, b) -> None:
    check(single_node_model("MatMul", a, {"B": rand(*b)}), rand(*a))


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("x,c", [((2, 3, 4, 5), (3, 1, 1)), ((2, 3), (2, 3)), ((1, 4, 1), (3, 1, 5)), ((4,), ()),
                                 ((1, 5, 3, 3), (1, 5, 3, 3))])
def test_eltwise_broadcasting(op, x, c) -> None:
    const = rand(*c) if c else np.float32(1.7)
    if op == "Div":
        const = np.abs(const) + np.float32(0.5)
    check(single_node_model(op, x, {"C": const}), rand(*x))


def test_eltwise_fp16() -> None:
    check(single_node_model("Mul", (1, 6, 5, 5), {"C": rand(1, 6, 1, 1)}), rand(1, 6, 5, 5), "fp16")
    check(single_node_model("Add", (1, 6, 5, 5), {"C": rand(1, 6, 5, 5)}), rand(1, 6, 5, 5), "fp16")


ACTIVATIONS = [
    ("Relu", {}, {}), ("Sigmoid", {}, {}), ("Tanh", {}, {}), ("HardSwish", {}, {}),
    ("LeakyRelu", {"alpha": 0.1}, {}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, {}),
    ("Clip", {}, {"min": np.float32(-0.5), "max": np.float32(0.7)}), ("Clip", {}, {"min": np.float32(0.0)}),
]


@pytest.mark.parametrize("op,attrs,consts", ACTIVATIONS, ids=lambda v: str(v) if isinstance(v, str) else "")
def test_activations(op, attrs, consts) -> None:
    x = rand(2, 3, 5, 5) * 4
    names = ["min", "max"]
    extra = [n if n in consts else "" for n in names] if consts else None
    while extra and extra[-1] == "":
        extra.pop()
    model = single_node_model(op, x.shape, consts, extra_inputs=extra, **attrs)
    check(model, x)
    check(model, x, "fp16")


def _conv_act_model(act: str, oc: int = 5, **attrs):
    """Conv followed by an activation, which the graph passes fuse into the conv."""
    import onnx
    import onnx.helper as oh
    import onnx.numpy_helper as nh
    w, b = rand(oc, 3, 3, 3), rand(oc)
    nodes = [oh.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]), oh.make_node(act, ["c"], ["y"], **attrs)]
    graph = oh.make_graph(nodes, "conv_act", [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
                          [oh.make_empty_tensor_value_info("y")], [nh.from_array(w, "W"), nh.from_array(b, "B")])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("act,attrs", [("Relu", {}), ("Sigmoid", {}), ("Tanh", {}), ("HardSwish", {}),
                                       ("LeakyRelu", {"alpha": 0.2}), ("HardSigmoid", {"alpha": 0.2, "beta": 0.5})])
def test_fused_activation(act: str, attrs: dict) -> None:
    sess = check(_conv_act_model(act, **attrs), rand(1, 3, 8, 8) * 2)
    assert [n.op for n in sess.graph.nodes] == ["Conv"]  # really fused, one kernel


@pytest.mark.parametrize("shape,axis,opset", [((2, 10), 1, 13), ((2, 3, 4), 1, 13), ((3, 700), -1, 13),
                                              ((2, 3, 4), 1, 11)])
def test_softmax(shape, axis, opset) -> None:
    check(single_node_model("Softmax", shape, axis=axis, opset=opset), rand(*shape) * 3)


def test_softmax_extreme_inputs_two_pass() -> None:
    """The (mantissa, exponent) sums never overflow: no max pass is needed even at +-1e4."""
    x = np.stack([rand(50) * 5 + 1e4, rand(50) * 5 - 1e4, rand(50) * 30]).astype(np.float32)
    check(single_node_model("Softmax", x.shape, axis=1, opset=13), x)


def test_softmax_and_lrn_stay_fp32_in_fp16_mode() -> None:
    sess = check(single_node_model("LRN", (1, 7, 4, 4), size=5, alpha=1e-3, beta=0.75, bias=2.0),
                 rand(1, 7, 4, 4), "fp16")
    assert not sess._impl._tensors[sess.output_names[0]].half


@pytest.mark.parametrize("size", [3, 4, 5])
def test_lrn(size: int) -> None:
    check(single_node_model("LRN", (2, 9, 5, 4), size=size, alpha=1e-2, beta=0.75, bias=1.5), rand(2, 9, 5, 4))


@pytest.mark.parametrize("axes,keepdims", [([1, 2], 0), ([2, 3], 1), ([0], 1), ([1], 0)])
def test_reduce_mean(axes, keepdims) -> None:
    check(single_node_model("ReduceMean", (2, 3, 5, 4), axes=axes, keepdims=keepdims, opset=17), rand(2, 3, 5, 4))


def test_batchnorm_unfused() -> None:
    consts = {"s": rand(4), "b": rand(4), "m": rand(4), "v": np.abs(rand(4)) + 0.5}
    check(single_node_model("BatchNormalization", (2, 4, 3, 5), consts, epsilon=1e-3), rand(2, 4, 3, 5))


@pytest.mark.parametrize("axis", [0, 1, 3])
def test_concat(axis: int) -> None:
    other = [2, 3, 4, 5]
    other[axis] = 3
    check(single_node_model("Concat", (2, 3, 4, 5), {"C": rand(*other)}, axis=axis), rand(2, 3, 4, 5))


@pytest.mark.parametrize("perm", [(0, 2, 3, 1), (3, 2, 1, 0), (1, 0)])
def test_transpose(perm) -> None:
    shape = (2, 3, 4, 5)[: len(perm)]
    check(single_node_model("Transpose", shape, perm=list(perm)), rand(*shape))


def test_pad_constant_and_crop() -> None:
    model = single_node_model("Pad", (1, 3, 5, 6), {"pads": np.array([0, 0, 2, -1, 0, 1, 1, 2], np.int64),
                                                    "value": np.float32(0.5)})
    check(model, rand(1, 3, 5, 6))


def test_pad_reflect_runs_on_reference_and_says_so() -> None:
    model = single_node_model("Pad", (1, 2, 5, 6), {"pads": np.array([0, 0, 1, 2, 0, 0, 1, 2], np.int64)},
                              mode="reflect")
    sess = check(model, rand(1, 2, 5, 6), placement="reference")
    report = sess._impl.profile({"x": rand(1, 2, 5, 6)})
    (record,) = [r for r in report.ops if r.op == "Pad"]
    assert record.placement == "reference" and "reflect" in record.note


def test_flatten_is_a_view() -> None:
    sess = check(single_node_model("Flatten", (2, 3, 4, 5), axis=1), rand(2, 3, 4, 5), placement=None)
    backend = sess._impl
    assert set(backend.placements.values()) == {"view"}
    assert backend.memory_report.arena_bytes == 0


# -- conv_oc and Winograd: forced by a user config (thresholds 1), so every device runs them ----------

FORCE_OC = "kernels:\n  winograd: {min_tiles: null}\n  conv_oc: {min_k: 1}\n"
FORCE_WINOGRAD = "kernels:\n  winograd: {min_k: 1, min_tiles: 1}\n"


@pytest.fixture
def forced(tmp_path, monkeypatch):
    """forced(text): later sessions merge the device config ``text`` over their family's."""
    def use(text: str) -> None:
        path = tmp_path / "forced.yaml"
        path.write_text(text)
        monkeypatch.setenv("EDGESDK_OPENCL_CONFIG", str(path))
    return use


def kernels_of(sess: edgesdk.Session) -> set[str]:
    return {launch.name for step in sess._impl._steps for launch in step.launches}


CONV_OC_CASES = {  # output channels 13 and 40: partial channel blocks (lanes past OC never stored)
    "stride2_oc13": dict(x=(1, 5, 11, 13), w=(13, 5, 3, 3), strides=[2, 2], pads=[1, 1, 1, 1]),
    "dilated_asymmetric_batch2": dict(x=(2, 3, 12, 9), w=(16, 3, 3, 2), dilations=[2, 1], pads=[2, 0, 1, 1]),
    "pointwise_oc40": dict(x=(1, 20, 5, 9), w=(40, 20, 1, 1)),  # no tap reaches the padding: ALL_INTERIOR
    "bottom_right_pads_only": dict(x=(1, 4, 9, 8), w=(8, 4, 3, 3), pads=[0, 0, 2, 1]),
    "stem_7x7_no_bias": dict(x=(1, 3, 17, 15), w=(8, 3, 7, 7), strides=[2, 2], pads=[3, 3, 3, 3], bias=False),
}


@pytest.mark.parametrize("case", CONV_OC_CASES, ids=str)
def test_conv_oc(case: str, forced) -> None:
    forced(FORCE_OC)
    model, x_shape = _conv_model(CONV_OC_CASES[case])
    sess = check(model, rand(*x_shape))
    assert kernels_of(sess) == {"conv_oc"}
    if case == "stride2_oc13":
        assert kernels_of(check(model, rand(*x_shape), "fp16")) == {"conv_oc"}


WINOGRAD_CASES = {
    "same_oc13": dict(x=(1, 16, 9, 11), w=(13, 16, 3, 3), pads=[1, 1, 1, 1]),
    "valid_batch2": dict(x=(2, 6, 8, 7), w=(16, 6, 3, 3)),
    "asymmetric_pads": dict(x=(1, 5, 7, 10), w=(7, 5, 3, 3), pads=[0, 1, 2, 0]),
    "wide_rows_no_bias": dict(x=(1, 4, 6, 45), w=(8, 4, 3, 3), pads=[1, 1, 1, 1], bias=False),
}


@pytest.mark.parametrize("case", WINOGRAD_CASES, ids=str)
def test_winograd(case: str, forced) -> None:
    forced(FORCE_WINOGRAD)
    model, x_shape = _conv_model(WINOGRAD_CASES[case])
    sess = check(model, rand(*x_shape))
    assert kernels_of(sess) == {"winograd_input", "winograd_gemm", "winograd_output"}
    if case in ("same_oc13", "wide_rows_no_bias"):
        check(model, rand(*x_shape), "fp16")


@pytest.mark.parametrize("force,act,attrs", [("oc", "HardSwish", {}), ("winograd", "LeakyRelu", {"alpha": 0.2})])
def test_fused_activation_conv_oc_winograd(force: str, act: str, attrs: dict, forced) -> None:
    forced(FORCE_OC if force == "oc" else FORCE_WINOGRAD)
    sess = check(_conv_act_model(act, oc=8, **attrs), rand(1, 3, 8, 8) * 2)
    assert [n.op for n in sess.graph.nodes] == ["Conv"]
    assert ("conv_oc" if force == "oc" else "winograd_gemm") in kernels_of(sess)


def test_winograd_scratch_is_planned_in_the_arena(forced) -> None:
    """V and M live in a scratch block of the arena: profiled per node, counted in peak memory."""
    model, x_shape = _conv_model(WINOGRAD_CASES["same_oc13"])
    forced(FORCE_OC)
    plain = edgesdk.Session(model, backend="opencl")._impl
    forced(FORCE_WINOGRAD)
    sess = check(model, rand(*x_shape))
    report = sess._impl.profile({"x": rand(*x_shape)})
    (record,) = [r for r in report.ops if r.op == "Conv"]
    tiles = 5 * 6
    assert record.scratch_bytes >= 16 * 16 * tiles * 4 + 16 * tiles * 16 * 4  # V (C = 16) + M (OC padded)
    assert report.memory.arena_bytes >= record.scratch_bytes
    assert report.memory.arena_bytes > plain.memory_report.arena_bytes


def test_kernel_choice_on_resnet_and_mobilenet_shapes(monkeypatch) -> None:
    """The selection heuristics with the pocl-cpu tunables (the measured family)."""
    from edgesdk.backends.opencl import config as cl_config
    from edgesdk.backends.opencl.device import DeviceInfo
    from edgesdk.backends.opencl.lower.conv import ConvGeometry, _channel_vectorised
    from edgesdk.backends.opencl.lower.conv_winograd import winograd_applies

    monkeypatch.delenv(cl_config.CONFIG_ENV, raising=False)
    pocl = cl_config.load_device_config(DeviceInfo(
        platform="Portable Computing Language", name="pthread", vendor="x", type="CPU", version="", driver_version="",
        global_mem_bytes=0, global_mem_cache_bytes=0, global_mem_cacheline_bytes=0, local_mem_bytes=0,
        constant_buffer_bytes=0, compute_units=2, max_clock_mhz=0, max_work_group_size=4096,
        max_work_item_sizes=(4096,) * 3, host_unified_memory=True, fp16=False, mem_base_addr_align_bits=1024,
        preferred_vector_width_float=8, extensions=()))
    assert pocl.family == "pocl-cpu"

    class Ctx:
        config, vec = pocl, pocl.vector_width

    def conv(c, h, oc, k=3, s=1, g=1):
        o = (h + 2 * (k // 2) - k) // s + 1
        return ConvGeometry(1, c, h, h, oc, o, o, k, k, s, s, 1, 1, k // 2, k // 2, g)

    for geom in (conv(64, 56, 64), conv(128, 28, 128), conv(256, 14, 256), conv(512, 7, 512)):
        assert winograd_applies(pocl, geom, "dense") and winograd_applies(pocl, geom, "fp16")
        assert not winograd_applies(pocl, geom, "clustered")
    for geom in (conv(64, 56, 128, s=2), conv(3, 224, 64, k=7, s=2), conv(3, 224, 32, s=2), conv(64, 56, 128, k=1),
                 conv(32, 112, 32, g=32), conv(512, 3, 512), conv(64, 512, 64)):
        # strided, stem, C = 3, 1x1, depthwise, 4 tiles, 512 MiB of scratch
        assert not winograd_applies(pocl, geom, "dense")
    assert _channel_vectorised(Ctx, conv(64, 56, 128, s=2)) and _channel_vectorised(Ctx, conv(3, 224, 64, k=7, s=2))
    assert _channel_vectorised(Ctx, conv(384, 14, 64, k=1))  # 1x1 with a long reduction
    assert not _channel_vectorised(Ctx, conv(3, 224, 32, s=2))  # K = 27: conv_direct
    assert not _channel_vectorised(Ctx, conv(24, 56, 144, k=1))  # short 1x1 reduction: conv_gemm
    assert not _channel_vectorised(Ctx, conv(144, 56, 24, k=1))  # 24 channels fill 75% of 16-lane blocks


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_winograd_weight_transform(dtype) -> None:
    """U = G g G^T, packed (16, OC blocks, C, block), zero past OC, in the storage type: within
    float32 rounding of the exact values (for these half weights, the correctly rounded ones)."""
    from edgesdk.backends.opencl.lower.conv_winograd import G, transform_weights
    w = rand(13, 5, 3, 3).astype(dtype)
    u = transform_weights(w, 8)
    assert u.dtype == dtype and u.shape == (16, 2, 5, 8) and u.flags.c_contiguous
    exact = np.einsum("ai,ocij,bj->abco", G, w.astype(np.float64), G).reshape(16, 5, 13)
    got = u.transpose(0, 2, 1, 3).reshape(16, 5, 16)
    if dtype == np.float16:
        assert np.array_equal(got[:, :, :13], exact.astype(np.float16))
    else:
        np.testing.assert_allclose(got[:, :, :13], exact, rtol=0, atol=4e-7 * np.abs(exact).max())
    assert not u[:, 1, :, 5:].any()


@pytest.mark.parametrize("family", ["generic", "adreno-6xx", "intel-igpu", "mali-bifrost"])
def test_winograd_with_gpu_family_tunings(family: str) -> None:
    """The GPU families' Winograd tiles and work-groups (float4 / float8, one vector of channels),
    on a layer past their thresholds (C*9 >= 288, >= 64 tiles), run on this device."""
    from edgesdk.backends.opencl import config as cl_config
    model, x_shape = _conv_model(dict(x=(1, 32, 16, 15), w=(16, 32, 3, 3), pads=[1, 1, 1, 1]))
    backend = OpenCLBackend(edgesdk.Session(model).plan, config=cl_config.CONFIG_DIR / f"{family}.yaml")
    assert {launch.name for step in backend._steps for launch in step.launches} >= {"winograd_gemm"}
    x = rand(*x_shape)
    assert_close(backend.run({"x": x})["y"], edgesdk.Session(model, backend="reference").run({"x": x})["y"], 1e-4)
