"""The opencl backend's mechanisms, not its ops (those are tests/ops/, on every backend): how a
fallback is reported, which tensors stay float32 in fp16 mode, views that take no arena memory,
and the convolution kernels a device configuration selects (conv_oc and Winograd forced by a user
config so every device runs them; the selection heuristics; the Winograd weight transform; the GPU
families' tunings), each against the reference backend.

fp32: rtol 1e-4. fp16: against the reference backend's fp16 mode, rtol 1e-2.
"""
from __future__ import annotations

import numpy as np
import onnx.helper as oh
import pytest

import edgesdk
from conftest import assert_close
from onnx_builders import graph_model, single_node_model

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


def _conv_model(spec: dict):
    spec = dict(spec)
    x_shape, w_shape, bias = spec.pop("x"), spec.pop("w"), spec.pop("bias", True)
    consts = {"W": rand(*w_shape)}
    if bias:
        consts["B"] = rand(w_shape[0])
    return single_node_model("Conv", x_shape, consts, **spec), x_shape


# -- fallbacks, storage and views ------------------------------------------------------------------
def test_gemm_trans_a_falls_back_visibly() -> None:
    model = single_node_model("Gemm", (6, 2), {"B": rand(6, 3)}, transA=1)
    sess = check(model, rand(6, 2), placement="reference")
    assert "transA" in next(iter(sess._impl.fallback_reasons.values()))


def test_softmax_and_lrn_stay_fp32_in_fp16_mode() -> None:
    sess = check(single_node_model("LRN", (1, 7, 4, 4), size=5, alpha=1e-3, beta=0.75, bias=2.0),
                 rand(1, 7, 4, 4), "fp16")
    assert not sess._impl._tensors[sess.output_names[0]].half


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


def _conv_act_model(act: str, oc: int = 5, **attrs):
    """Conv followed by an activation, which the graph passes fuse into the conv."""
    nodes = [oh.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]), oh.make_node(act, ["c"], ["y"], **attrs)]
    return graph_model(nodes, {"x": (1, 3, 8, 8)}, ["y"], {"W": rand(oc, 3, 3, 3), "B": rand(oc)})


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
    config = sess._impl.config  # OC = 13 is padded to whole blocks of the family's vector width
    block = config.vector_width * min(config.tuning("winograd").vectors, -(-13 // config.vector_width))
    padded_oc = -(-13 // block) * block
    assert record.scratch_bytes >= 16 * 16 * tiles * 4 + 16 * tiles * padded_oc * 4  # V (C = 16) + M
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
