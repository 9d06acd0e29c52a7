"""Winograd F(4x4, 3x3) on the cpu backend (issue 17; cpu_native/src/kernels/operators_winograd.cc).

ConvPlan picks it for the fp32 3x3 stride-1 convolutions it wins on (winograd_chosen) and
EDGESDK_CPU_WINOGRAD=0 turns it off. Here: ResNet-18's stride-1 layers through a session at every
x86 level this CPU runs, against ONNX Runtime within the conv tolerance of tests/ops (rtol 1e-4 of
the output's scale) and against the same session with Winograd off; the step note naming the
kernels either way; NaN and infinities as ONNX Runtime gives them; the bindings' ConvPlan forced to
Winograd on odd shapes against a float64 convolution; and the paths that stay direct (fp16
sessions, strided, 1x1, grouped). The transforms themselves are checked per ISA, NEON under qemu,
by the kernel driver's f32_winograd family (tests/test_native_kernels.py).
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper as oh

import edgesdk
from conftest import assert_close, ort_run
from onnx_builders import graph_model

_native = pytest.importorskip("edgesdk._native")
KERNELS = _native.kernels
X86_LEVELS = [isa for isa in ("avx2", "avx512") if isa in KERNELS.supported_isas()]
RTOL = 1e-4  # tests/ops/op_tester.py, fp32


def conv_model(c: int, k: int, h: int, w: int, n: int = 1, pads=(1, 1, 1, 1), act: str | None = "Relu",
               group: int = 1, stride: int = 1, kernel: int = 3, seed: int = 0) -> onnx.ModelProto:
    """Conv (He-scaled weights, bias) + an optional activation, NCHW input (n, c, h, w)."""
    rng = np.random.default_rng(seed)
    weight = (rng.standard_normal((k, c // group, kernel, kernel)) * np.sqrt(2 / (kernel * kernel * c))).astype(np.float32)
    bias = (rng.standard_normal(k) * 0.1).astype(np.float32)
    conv_out = "z" if act else "y"
    nodes = [oh.make_node("Conv", ["x", "w", "b"], [conv_out], pads=list(pads), group=group, strides=[stride, stride])]
    if act:
        nodes.append(oh.make_node(act, ["z"], ["y"]))
    return graph_model(nodes, {"x": (n, c, h, w)}, ["y"], {"w": weight, "b": bias})


def post_relu_input(*shape: int, seed: int = 1) -> np.ndarray:
    return np.maximum(np.random.default_rng(seed).standard_normal(shape), 0).astype(np.float32)


def conv_notes(sess: edgesdk.Session) -> list[str]:
    return [step.note for step in sess._impl.steps if step.op == "Conv"]


@pytest.fixture
def level(request):
    """Forces one kernel level for the test (process-wide), then restores the default."""
    KERNELS.set_isa(request.param)
    yield request.param
    KERNELS.reset_isa()


@pytest.mark.parametrize("level", X86_LEVELS, indirect=True)
@pytest.mark.parametrize(("c", "hw"), [(64, 56), (128, 28), (256, 14)])
def test_resnet18_layers_match_onnxruntime(level, c, hw, monkeypatch):
    model = conv_model(c, c, hw, hw)
    x = post_relu_input(1, c, hw, hw)
    want = ort_run(model, {"x": x})[0]
    sess = edgesdk.Session(model, backend="cpu", threads=2)
    (note,) = conv_notes(sess)
    names = KERNELS.kernel_names(level)
    assert note.startswith("winograd F(4x4,3x3) conv"), note
    assert names["winograd_input"] in note and names["igemm_f32w"] in note and names["winograd_output"] in note, note
    got = sess.run(None, {"x": x})[0]
    assert_close(got, want, RTOL, what=f"winograd {level} {c}x{hw}x{hw}")
    monkeypatch.setenv("EDGESDK_CPU_WINOGRAD", "0")
    direct = edgesdk.Session(model, backend="cpu", threads=2)
    (direct_note,) = conv_notes(direct)
    assert direct_note.startswith("indirect conv") and "winograd" not in direct_note, direct_note
    assert names["igemm_f32w"] in direct_note, direct_note
    reference = direct.run(None, {"x": x})[0]
    assert_close(reference, want, RTOL, what=f"direct {level}")
    assert_close(got, reference, RTOL, what=f"winograd vs direct {level}")


def test_environment_variable_only_turns_auto_off(monkeypatch):
    """EDGESDK_CPU_WINOGRAD=0 is read when a plan is made; other values leave Winograd on, and a
    plan that asks for it explicitly still gets it."""
    packed = KERNELS.pack_gemm(np.ones((32, 9 * 32), np.float32))
    plan = lambda algorithm="auto": KERNELS.ConvPlan(packed, [1, 28, 28, 32], (3, 3), pads=[1, 1, 1, 1],  # noqa: E731
                                                     algorithm=algorithm)
    assert plan().algorithm == "winograd43" and plan().is_winograd
    monkeypatch.setenv("EDGESDK_CPU_WINOGRAD", "0")
    assert plan().algorithm == "indirect" and not plan().is_winograd
    assert plan("winograd").algorithm == "winograd43"
    monkeypatch.setenv("EDGESDK_CPU_WINOGRAD", "1")
    assert plan().algorithm == "winograd43"
    assert plan("direct").algorithm == "indirect"


def test_nonfinite_inputs_as_onnxruntime():
    """Inf and NaN inputs: the transforms give NaN around them (inf - inf) where the direct
    convolution gives a finite value or +-inf; those outputs are recomputed directly."""
    model = conv_model(32, 48, 20, 19, act="Relu")
    x = post_relu_input(1, 32, 20, 19)
    flat = x.reshape(-1)
    flat[5::997] = np.resize(np.array([np.nan, np.inf, -np.inf], np.float32), flat[5::997].size)
    sess = edgesdk.Session(model, backend="cpu")
    assert conv_notes(sess)[0].startswith("winograd"), conv_notes(sess)
    got, want = sess.run(None, {"x": x})[0], ort_run(model, {"x": x})[0]
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(np.isinf(got), np.isinf(want))
    assert np.array_equal(got[np.isinf(want)], want[np.isinf(want)])
    finite = np.isfinite(want)
    assert np.isnan(want).any() and finite.any()
    assert_close(got[finite], want[finite], RTOL, what="finite outputs")


def direct_conv64(x: np.ndarray, w: np.ndarray, b: np.ndarray, pads) -> np.ndarray:
    """NHWC x, OHWI w, float64."""
    top, left, bottom, right = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (top, bottom), (left, right), (0, 0)))
    n, hp, wp, _ = xp.shape
    oh_, ow_ = hp - 2, wp - 2
    out = np.zeros((n, oh_, ow_, w.shape[0])) + b
    for ky in range(3):
        for kx in range(3):
            out += xp[:, ky:ky + oh_, kx:kx + ow_, :] @ w[:, ky, kx, :].astype(np.float64).T
    return out


@pytest.mark.parametrize(("shape", "k", "pads"), [
    ((2, 13, 11, 17), 33, [0, 1, 2, 1]),
    ((1, 5, 7, 3), 5, [2, 2, 2, 2]),
    ((3, 9, 4, 40), 9, [1, 0, 0, 2]),
    ((1, 1, 1, 8), 8, [1, 1, 1, 1]),
])
def test_plan_forced_to_winograd_on_odd_shapes(shape, k, pads):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((k, 3, 3, shape[3])).astype(np.float32)
    b = rng.standard_normal(k).astype(np.float32)
    plan = KERNELS.ConvPlan(KERNELS.pack_gemm(w.reshape(k, -1), b), list(shape), (3, 3), pads=pads,
                            algorithm="winograd")
    assert plan.algorithm == "winograd43"
    out = np.full(plan.output_shape, np.nan, np.float32)
    plan.run(x, out, act="clip", alpha=-1.0, beta=2.0, threads=2)
    want = np.clip(direct_conv64(x, w, b, pads), -1.0, 2.0)
    assert_close(out, want, RTOL, what=f"forced winograd {shape} -> {k}")


def test_paths_that_stay_direct(monkeypatch):
    packed = KERNELS.pack_gemm(np.ones((64, 9 * 64), np.float32))
    for kwargs in ({"stride": (2, 2)}, {"dilation": (2, 2)}):
        assert KERNELS.ConvPlan(packed, [1, 56, 56, 64], (3, 3), pads=[2, 2, 2, 2], **kwargs).algorithm == "indirect"
        with pytest.raises(ValueError, match="Winograd needs"):
            KERNELS.ConvPlan(packed, [1, 56, 56, 64], (3, 3), pads=[2, 2, 2, 2], algorithm="winograd", **kwargs)
    half = KERNELS.pack_gemm(np.ones((64, 9 * 64), np.float16), fp16=True)
    assert KERNELS.ConvPlan(half, [1, 56, 56, 64], (3, 3), pads=[1, 1, 1, 1]).algorithm == "indirect"
    with pytest.raises(ValueError, match="Winograd needs"):
        KERNELS.ConvPlan(half, [1, 56, 56, 64], (3, 3), pads=[1, 1, 1, 1], algorithm="winograd")
    # The rule: 3 input channels (VGG's first layer) and a 5x5 output (4 tiles 39% full) stay direct.
    assert KERNELS.ConvPlan(KERNELS.pack_gemm(np.ones((64, 27), np.float32)), [1, 224, 224, 3], (3, 3),
                            pads=[1, 1, 1, 1]).algorithm == "indirect"
    assert KERNELS.ConvPlan(packed, [1, 5, 5, 64], (3, 3), pads=[1, 1, 1, 1]).algorithm == "indirect"
    # Sessions: fp16 storage, strided and 1x1 convolutions keep their kernels; a grouped conv of
    # 64 channels a group runs its groups on the direct kernels (algorithm="direct").
    model = conv_model(64, 64, 28, 28)
    assert conv_notes(edgesdk.Session(model, backend="cpu", precision="fp16"))[0].startswith("indirect conv")
    assert conv_notes(edgesdk.Session(conv_model(64, 64, 28, 28, stride=2), backend="cpu"))[0].startswith("indirect")
    assert conv_notes(edgesdk.Session(conv_model(64, 64, 28, 28, kernel=1, pads=(0, 0, 0, 0)),
                                      backend="cpu"))[0].startswith("1x1 GEMM")
    made = []
    real_plan = KERNELS.ConvPlan

    def spy(*args, **kwargs):
        plan = real_plan(*args, **kwargs)
        made.append(plan.algorithm)
        return plan
    monkeypatch.setattr(KERNELS, "ConvPlan", spy)
    grouped = conv_model(128, 128, 28, 28, group=2)
    x = post_relu_input(1, 128, 28, 28)
    sess = edgesdk.Session(grouped, backend="cpu")
    assert conv_notes(sess)[0].startswith("2 groups"), conv_notes(sess)
    assert_close(sess.run(None, {"x": x})[0], ort_run(grouped, {"x": x})[0], RTOL, what="grouped")
    assert made and set(made) == {"indirect"}, made
    made.clear()
    edgesdk.Session(conv_model(64, 64, 28, 28), backend="cpu").run(None, {"x": post_relu_input(1, 64, 28, 28)})
    assert made and set(made) == {"winograd43"}, made  # (the same spy sees the ungrouped one switch)
