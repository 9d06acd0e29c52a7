"""LQ-Nets layers on the opencl backend (issue 16, ``cl_kernels/lq.cl``, ``lower/lq.py``).

Every path against the reference backend (which quantizes, decodes the weights and runs the
dense float product): the fused LQ layer (``lq_encode`` + ``lq_gemm``: popcount conv / GEMM) on
1x1, 3x3 padded, strided, dilated and asymmetrically padded convs with C = 3, 16, 70 and on Gemm
with N = 5, 63, 64, 65, 700 (word boundaries), Kw and Kx in 1..4, offset 0 and not, relu or no
activation, NaN / +-inf inputs; the standalone quantizer (``lq_quantize``: a graph output, two
readers, a float layer behind it); weights-only LQ layers (float input: the clustered kernel);
fp16 storage; and the digits package end to end. fp32: rtol 1e-4 (conftest.assert_close: relative
to the output's magnitude as well); the popcount path sums in integers, so only the final float
combination differs from the reference's float sums.
"""
from __future__ import annotations

import numpy as np
import pytest

import edgesdk
from conftest import assert_close
from edgesdk.compress.encodings import LQBinary
from edgesdk.compress.lq import fit_weight_basis, pack_planes
from edgesdk.graph import Graph
from edgesdk.loader import load_model
from edgesdk.runtime.activations import Activation

pytest.importorskip("pyopencl")
from edgesdk.backends.opencl import OpenCLBackend  # noqa: E402

pytestmark = pytest.mark.skipif(OpenCLBackend.unavailable_reason() is not None,
                                reason=str(OpenCLBackend.unavailable_reason()))

R = np.random.default_rng(16)
RELU = Activation("Relu")


def rand(*shape: int) -> np.ndarray:
    return R.standard_normal(shape).astype(np.float32)


def lq_weights(shape: tuple[int, ...], bits: int) -> LQBinary:
    w = rand(*shape).reshape(shape[0], -1)
    beta, codes = fit_weight_basis(w, bits, iters=4)
    return LQBinary(tuple(shape), basis=beta, planes=pack_planes(codes, bits), bits=bits)


def act_basis(bits: int, offset: float) -> tuple[tuple[float, ...], float]:
    """A basis whose levels span about [offset, offset + 2.2] (inputs are standard normal)."""
    alpha = 2.2 * 2.0 ** np.arange(bits) / ((1 << bits) - 1) * R.uniform(0.8, 1.2, bits)
    return tuple(float(v) for v in np.float32(alpha)), float(np.float32(offset))


def lq_graph(op: str, x_shape: tuple[int, ...], enc: LQBinary, *, kx: int | None, offset: float = 0.0,
             activation: Activation | None = None, bias: bool = True, extra_reader: bool = False,
             quantizer_output: bool = False, **attrs) -> Graph:
    """x -> [LQQuantize (kx bits)] -> Conv / Gemm with LQBinary weights -> y."""
    g = Graph("lq")
    g.add_input("x", x_shape)
    g.add_encoded("w", enc)
    layer_in = "x"
    if kx is not None:
        basis, off = act_basis(kx, offset)
        g.add_tensor("q", x_shape, np.float32)
        g.add_node("LQQuantize", ["x"], ["q"], name="quantize", basis=basis, offset=off)
        layer_in = "q"
    inputs = [layer_in, "w"]
    if bias:
        g.add_constant("b", rand(enc.shape[0]))
        inputs.append("b")
    if op == "Conv":
        a = dict(kernel_shape=tuple(enc.shape[2:]), strides=(1, 1), dilations=(1, 1), pads=(0, 0, 0, 0), group=1)
        a.update(attrs)
    else:
        a = dict(alpha=1.0, beta=1.0, transA=False, transB=True)
        a.update(attrs)
    if activation is not None:
        a["fused_activation"] = activation
    g.add_node(op, inputs, ["y"], name="layer", **a)
    g.outputs = ["y"]
    if extra_reader:  # a second reader of the quantizer's output: it must be materialised
        g.add_node("Relu", [layer_in], ["r"], name="other", activation=RELU)
        g.outputs.append("r")
    if quantizer_output:
        g.outputs.append(layer_in)
    return load_model(g)


def run_both(graph: Graph, x: np.ndarray, precision: str = "fp32", rtol: float = 1e-4):
    ref = edgesdk.Session(graph, backend="reference", precision=precision)
    ocl = edgesdk.Session(graph, backend="opencl", precision=precision)
    assert not ocl._impl.fallback_reasons, ocl._impl.fallback_reasons
    with np.errstate(all="ignore"):
        want = ref.run({"x": x})
    got = ocl.run({"x": x})
    for name in want:
        nan = np.isnan(want[name])
        assert np.array_equal(np.isnan(got[name]), nan), name
        assert_close(got[name][~nan], want[name][~nan], rtol, what=name)
    steps = {s.node.name: s for s in ocl._impl._steps}
    return got, want, steps


def kernels_of(step) -> list[str]:
    return [launch.name for launch in step.launches]


def assert_fused(steps) -> None:
    assert kernels_of(steps["quantize"]) == [], steps["quantize"].note
    assert "fused into" in steps["quantize"].note
    assert kernels_of(steps["layer"]) in (["lq_encode", "lq_gemm"], ["lq_codes", "lq_encode", "lq_gemm"]), \
        steps["layer"].note
    assert "fused LQ layer" in steps["layer"].note


# (weights shape, input shape, attrs)
CONVS = {
    "1x1-c3": ((5, 3, 1, 1), (2, 3, 5, 7), {}),
    "3x3-pad1-c16": ((8, 16, 3, 3), (1, 16, 6, 7), {"pads": (1, 1, 1, 1)}),
    "3x3-stride2-c16": ((7, 16, 3, 3), (2, 16, 9, 8), {"pads": (1, 1, 1, 1), "strides": (2, 2)}),
    "3x3-dilation2-c3": ((6, 3, 3, 3), (1, 3, 9, 10), {"pads": (2, 2, 2, 2), "dilations": (2, 2)}),
    "3x3-asym-pads-c70": ((9, 70, 3, 3), (1, 70, 5, 6), {"pads": (1, 0, 0, 2)}),
    "2x3-valid-c70": ((4, 70, 2, 3), (1, 70, 4, 5), {}),
    "1x1-stride2-c16": ((6, 16, 1, 1), (1, 16, 7, 8), {"strides": (2, 2)}),
}
# (Kw, Kx, offset, activation): every bit count 1..4 on both sides, offsets zero and not
SETTINGS = [(1, 1, 0.0, None), (2, 3, -0.7, RELU), (3, 4, 0.0, RELU), (4, 2, 0.4, None), (2, 2, -1.1, None)]


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: f"w{s[0]}a{s[1]}-c{s[2]}-{'relu' if s[3] else 'none'}")
@pytest.mark.parametrize("conv", list(CONVS))
def test_fused_conv_matches_the_reference(conv: str, setting) -> None:
    kw, kx, offset, activation = setting
    w_shape, x_shape, attrs = CONVS[conv]
    graph = lq_graph("Conv", x_shape, lq_weights(w_shape, kw), kx=kx, offset=offset, activation=activation, **attrs)
    _, _, steps = run_both(graph, rand(*x_shape))
    assert_fused(steps)


@pytest.mark.parametrize("n", [5, 63, 64, 65, 700])
@pytest.mark.parametrize("m", [1, 3])
def test_fused_gemm_matches_the_reference(n: int, m: int) -> None:
    kw, kx, offset, activation = SETTINGS[n % len(SETTINGS)]
    graph = lq_graph("Gemm", (m, n), lq_weights((11, n), kw), kx=kx, offset=offset, activation=activation)
    _, _, steps = run_both(graph, rand(m, n))
    assert_fused(steps)


@pytest.mark.parametrize("kw", [1, 2, 3, 4])
@pytest.mark.parametrize("kx", [1, 2, 3, 4])
def test_fused_gemm_every_bit_pair(kw: int, kx: int) -> None:
    graph = lq_graph("Gemm", (2, 40), lq_weights((6, 40), kw), kx=kx, offset=0.3 * (kx - 2))
    assert_fused(run_both(graph, rand(2, 40))[2])


def test_fused_gemm_alpha_beta_no_bias() -> None:
    graph = lq_graph("Gemm", (4, 33), lq_weights((9, 33), 2), kx=2, offset=-0.5, alpha=0.5, beta=2.0)
    assert_fused(run_both(graph, rand(4, 33))[2])
    graph = lq_graph("Gemm", (4, 33), lq_weights((9, 33), 2), kx=2, bias=False)
    assert_fused(run_both(graph, rand(4, 33))[2])


@pytest.mark.parametrize("offset", [0.0, -0.8])
def test_nan_and_inf(offset: float) -> None:
    """NaN in any tap an output reads makes that output NaN (relu keeps it); +-inf quantize to the
    extreme levels (finite outputs); taps in the padding never read the input."""
    x = rand(1, 4, 6, 7)
    x[0, 1, 2, 3] = np.nan
    x[0, 0, 0, 0] = np.inf
    x[0, 3, 5, 6] = -np.inf
    x[0, 2, 4, 0] = np.inf
    graph = lq_graph("Conv", x.shape, lq_weights((5, 4, 3, 3), 2), kx=2, offset=offset, activation=RELU,
                     pads=(1, 1, 1, 1))
    got, want, steps = run_both(graph, x)
    assert_fused(steps)
    nan = np.isnan(want["y"])
    assert nan.any() and not nan.all() and np.array_equal(np.isnan(got["y"]), nan)
    assert np.isfinite(got["y"][~nan]).all()
    xg = rand(3, 20)
    xg[1, 7] = np.nan
    xg[0, 3], xg[2, 5] = np.inf, -np.inf
    graph = lq_graph("Gemm", xg.shape, lq_weights((4, 20), 3), kx=3, offset=offset)
    got, want, _ = run_both(graph, xg)
    assert np.isnan(got["y"][1]).all() and np.isfinite(got["y"][[0, 2]]).all()


@pytest.mark.parametrize("how", ["graph-output", "two-readers"])
def test_standalone_quantizer(how: str) -> None:
    """A quantizer whose output something else reads runs lq_quantize; the layer behind it then
    takes the weights-only path (float levels in, clustered kernel)."""
    x = rand(1, 6, 5, 5)
    x[0, 0, 0, :3] = [np.nan, np.inf, -np.inf]
    graph = lq_graph("Conv", x.shape, lq_weights((4, 6, 3, 3), 2), kx=3, offset=-0.5, pads=(1, 1, 1, 1),
                     extra_reader=how == "two-readers", quantizer_output=how == "graph-output")
    _, _, steps = run_both(graph, x)
    assert kernels_of(steps["quantize"]) == ["lq_quantize"]
    assert "weights-only" in steps["layer"].note and kernels_of(steps["layer"]) == ["conv_direct"]


def test_quantizer_before_a_float_layer() -> None:
    g = Graph("lq-float")
    g.add_input("x", (2, 9))
    g.add_tensor("q", (2, 9), np.float32)
    g.add_node("LQQuantize", ["x"], ["q"], name="quantize", basis=(0.25, 0.5, 1.0), offset=-0.9)
    g.add_constant("w", rand(4, 9))
    g.add_node("Gemm", ["q", "w"], ["y"], name="layer", alpha=1.0, beta=1.0, transA=False, transB=True)
    g.outputs = ["y"]
    _, _, steps = run_both(load_model(g), rand(2, 9))
    assert kernels_of(steps["quantize"]) == ["lq_quantize"]


@pytest.mark.parametrize("op", ["Conv", "Gemm"])
def test_weights_only(op: str) -> None:
    if op == "Conv":
        graph = lq_graph("Conv", (1, 5, 6, 6), lq_weights((7, 5, 3, 3), 3), kx=None, activation=RELU,
                         pads=(0, 1, 1, 0), strides=(1, 2))
        x = rand(1, 5, 6, 6)
    else:
        graph = lq_graph("Gemm", (3, 70), lq_weights((9, 70), 2), kx=None)
        x = rand(3, 70)
    _, _, steps = run_both(graph, x)
    assert "weights-only" in steps["layer"].note
    assert kernels_of(steps["layer"]) == ["conv_direct"]


def test_fp16_storage() -> None:
    """fp16 mode: the quantizer reads half inputs (the reference rounds them the same way), so the
    codes agree; the float combination is checked at fp16's rtol."""
    graph = lq_graph("Conv", (1, 8, 5, 6), lq_weights((6, 8, 3, 3), 2), kx=2, offset=-0.6, pads=(1, 1, 1, 1))
    assert_fused(run_both(graph, rand(1, 8, 5, 6), precision="fp16", rtol=1e-2)[2])


def test_digits_package_end_to_end(tmp_path) -> None:
    """The digits model packed 2-bit weights / 2-bit activations (first conv weights-only): every
    LQ layer on the opencl kernels, the same predictions as the reference backend."""
    from edgesdk.compress.recipe import Recipe
    from edgesdk.datasets import digits_split
    from edgesdk.models import default_model_path
    from edgesdk.pack import pack_model
    train, test = digits_split()
    out = tmp_path / "lq.edgepkg"
    recipe = Recipe.from_dict({"default": {"lq_bits": 2, "lq_act_bits": 2},
                               "layers": [{"match": "/0/Conv", "lq_act_bits": None}]})
    pack_model(default_model_path(), out, recipe, calibration=train.x[:64])
    ref = edgesdk.Session(str(out), backend="reference")
    ocl = edgesdk.Session(str(out), backend="opencl")
    assert not ocl._impl.fallback_reasons, ocl._impl.fallback_reasons
    notes = " | ".join(s.note for s in ocl._impl._steps)
    assert "fused LQ layer" in notes, notes
    name = ocl.input_names[0] if hasattr(ocl, "input_names") else next(iter(ocl._impl.plan.graph.inputs))
    x = test.x[:128]
    want = np.concatenate([next(iter(ref.run({name: x[i:i + 1]}).values())) for i in range(len(x))])
    got = np.concatenate([next(iter(ocl.run({name: x[i:i + 1]}).values())) for i in range(len(x))])
    assert_close(got, want, 1e-4)
    y = test.y[:128]
    assert np.mean(got.argmax(1) == y) == np.mean(want.argmax(1) == y)


# -- the new kernels under Oclgrind (as tests/test_opencl_oclgrind.py: this file is the suite) -----

def _oclgrind_cases():
    """Small cases of every lq.cl kernel: fused conv with the mask plane (padding, offset),
    strided / dilated fused convs, fused Gemm across a word boundary with tiles past the end,
    NaN / inf inputs, the standalone quantizer, and fp16 storage."""
    x_nan = rand(1, 3, 5, 6)
    x_nan[0, 1, 2, 2], x_nan[0, 0, 0, 1], x_nan[0, 2, 4, 5] = np.nan, np.inf, -np.inf
    yield "conv3x3-mask", lq_graph("Conv", (1, 3, 5, 6), lq_weights((5, 3, 3, 3), 2), kx=2, offset=-0.6,
                                   activation=RELU, pads=(1, 0, 2, 1)), x_nan, "fp32"
    yield "conv-stride-dilation", lq_graph("Conv", (2, 4, 7, 6), lq_weights((3, 4, 3, 3), 3), kx=1, offset=0.5,
                                           pads=(2, 2, 2, 2), strides=(2, 1), dilations=(2, 2)), \
        rand(2, 4, 7, 6), "fp32"
    yield "gemm-33", lq_graph("Gemm", (3, 33), lq_weights((7, 33), 4), kx=4, offset=0.3), rand(3, 33), "fp32"
    yield "quantize-standalone", lq_graph("Conv", (1, 3, 4, 4), lq_weights((2, 3, 1, 1), 1), kx=3, offset=-0.2,
                                          quantizer_output=True), x_nan[:, :, :4, :4].copy(), "fp32"
    yield "conv-fp16", lq_graph("Conv", (1, 3, 5, 6), lq_weights((4, 3, 3, 3), 2), kx=2, offset=-0.4,
                                pads=(1, 1, 1, 1)), rand(1, 3, 5, 6), "fp16"


@pytest.mark.oclgrind
@pytest.mark.skipif(__import__("shutil").which("oclgrind") is None, reason="oclgrind is not installed")
def test_lq_kernels_are_clean_under_oclgrind(tmp_path) -> None:
    import re

    from test_opencl_oclgrind import assert_clean_under_oclgrind
    log = assert_clean_under_oclgrind(__file__, tmp_path)
    ran = re.search(r"lq suite ok: (\d+) cases", log)
    assert ran and int(ran.group(1)) == 5, log[-2000:]


def _run_oclgrind_suite() -> int:
    from edgesdk.backends.opencl.device import open_device
    print(f"device: {open_device().label}", flush=True)
    count = 0
    for name, graph, x, precision in _oclgrind_cases():
        _, _, steps = run_both(graph, x, precision, 1e-4 if precision == "fp32" else 1e-2)
        ran = [launch.name for step in steps.values() for launch in step.launches]
        assert {"lq_encode", "lq_gemm"} <= set(ran) or "lq_quantize" in ran, (name, ran)
        count += 1
        print(f"  {name} {precision}: ok ({', '.join(ran)})", flush=True)
    print(f"lq suite ok: {count} cases", flush=True)
    return 0


if __name__ == "__main__":
    import sys
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
    sys.exit(_run_oclgrind_suite())
