"""The CHW (planar) kernel bindings (cpu_native/src/bindings_chw.cc): depthwise_conv_chw,
depthwise_chw_kernel, global_avgpool_chw and transpose_2d, against numpy and the NHWC depthwise
binding on transposed data, at every ISA level this CPU runs (in process through isa=, and through
EDGESDK_CPU_ISA in a subprocess), 1 and 2 threads, their ValueErrors, and concurrent calls."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

ext = pytest.importorskip("edgesdk._native")
kernels = ext.kernels
ISAS = kernels.supported_isas()
SIMD = [isa for isa in ISAS if isa != "scalar"]

# (C, H, W, multiplier, (KH, KW), stride, dilation, pads [top, left, bottom, right])
GEOMETRIES = [
    (3, 7, 9, 1, (3, 3), (1, 1), (1, 1), [1, 1, 1, 1]),
    (4, 17, 33, 1, (3, 3), (1, 1), (1, 1), [1, 1, 1, 1]),
    (2, 1, 1, 1, (3, 3), (1, 1), (1, 1), [1, 1, 1, 1]),
    (5, 12, 40, 1, (3, 3), (2, 2), (1, 1), [1, 1, 1, 1]),
    (3, 9, 7, 1, (3, 3), (2, 2), (1, 1), [0, 0, 1, 1]),  # TF "SAME" on an even input
    (4, 11, 19, 1, (5, 5), (1, 1), (1, 1), [2, 2, 2, 2]),
    (3, 14, 30, 1, (5, 5), (2, 2), (1, 1), [2, 2, 2, 2]),
    (2, 8, 70, 2, (3, 3), (1, 1), (1, 1), [1, 1, 1, 1]),  # multiplier 2, several vectors a row
    (2, 9, 10, 1, (3, 3), (1, 1), (2, 2), [2, 2, 2, 2]),  # generic: dilation
    (3, 8, 9, 2, (2, 3), (1, 2), (1, 1), [0, 1, 1, 0]),  # generic: 2x3, unequal strides, asymmetric
    (2, 11, 12, 1, (7, 7), (1, 1), (1, 1), [3, 3, 3, 3]),  # generic: 7x7
]
SPECIALISED = {((3, 3), (1, 1)): "3x3s1", ((3, 3), (2, 2)): "3x3s2", ((5, 5), (1, 1)): "5x5s1",
               ((5, 5), (2, 2)): "5x5s2"}


def out_size(n: int, k: int, s: int, d: int, p0: int, p1: int) -> int:
    return (n + p0 + p1 - d * (k - 1) - 1) // s + 1


def case(geometry, batch: int = 2, seed: int = 0):
    c, h, w, m, (kh, kw), stride, dilation, pads = geometry
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, c, h, w), dtype=np.float32)
    wt = rng.standard_normal((c * m, kh, kw), dtype=np.float32)
    bias = rng.standard_normal(c * m, dtype=np.float32)
    oh = out_size(h, kh, stride[0], dilation[0], pads[0], pads[2])
    ow = out_size(w, kw, stride[1], dilation[1], pads[1], pads[3])
    return x, wt, bias, np.empty((batch, c * m, oh, ow), np.float32)


def nhwc_oracle(x, wt, bias, y_shape, stride, dilation, pads, act="none", alpha=None, beta=None):
    """The NHWC depthwise binding on transposed data, back to NCHW."""
    xn = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    wn = np.ascontiguousarray(wt.transpose(1, 2, 0))
    n, oc, oh, ow = y_shape
    out = np.empty((n, oh, ow, oc), np.float32)
    kernels.depthwise_conv(xn, wn, bias, out, stride, dilation, pads, act, alpha, beta, 1)
    return out.transpose(0, 3, 1, 2)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: f"{g[4][0]}x{g[4][1]}s{g[5][0]}{g[5][1]}d{g[6][0]}m{g[3]}")
def test_depthwise_conv_chw_matches_nhwc(geometry, threads, isa):
    _, _, _, m, kernel, stride, dilation, pads = geometry
    x, wt, bias, y = case(geometry)
    name = kernels.depthwise_conv_chw(x, wt, bias, y, stride, dilation, pads, "relu6", None, None, threads, isa=isa)
    want = nhwc_oracle(x, wt, bias, y.shape, stride, dilation, pads, "relu6")
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    assert name == kernels.depthwise_chw_kernel(*kernel, stride, dilation, pads, m, isa=isa)
    special = SPECIALISED.get((kernel, stride)) if dilation == (1, 1) else None
    if isa == "scalar" or special is None:
        assert name == "f32_dwconv2d_chw__scalar"
    else:
        assert name.startswith(f"f32_dwconv2d_chw_{special}__"), name


@pytest.mark.parametrize("geometry", GEOMETRIES[:8], ids=lambda g: f"{g[4][0]}x{g[4][1]}s{g[5][0]}")
def test_every_level_gives_the_scalar_bits(geometry):
    """One FMA chain per output in (ky, kx) order on every level (ukernels.h): equal bits."""
    _, _, _, _, _, stride, dilation, pads = geometry
    x, wt, bias, y = case(geometry, seed=3)
    results = {}
    for isa in ISAS:
        out = np.empty_like(y)
        kernels.depthwise_conv_chw(x, wt, bias, out, stride, dilation, pads, "none", None, None, 2, isa=isa)
        results[isa] = out
    for isa, out in results.items():
        assert np.array_equal(out, results["scalar"]), isa


def test_depthwise_conv_chw_no_bias_activations_and_reshaped_output():
    geometry = GEOMETRIES[1]
    _, _, _, _, _, stride, dilation, pads = geometry
    x, wt, _, y = case(geometry, batch=1)
    for act, alpha, beta in [("none", None, None), ("relu", None, None), ("clip", -0.5, 0.5), ("hardswish", None, None),
                             ("sigmoid", None, None), ("leaky_relu", 0.1, None)]:
        kernels.depthwise_conv_chw(x, wt, None, y, stride, dilation, pads, act, alpha, beta, 1)
        want = nhwc_oracle(x, wt, None, y.shape, stride, dilation, pads, act, alpha, beta)
        np.testing.assert_allclose(y, want, rtol=2e-5, atol=2e-6, err_msg=act)
    # keywords as the session code spells them, and the top-level alias
    assert ext.depthwise_conv_chw is kernels.depthwise_conv_chw
    name = ext.depthwise_conv_chw(x=x, w=wt, bias=None, y=y, stride=stride, dilation=dilation, pads=pads,
                                  act_name="relu", act_alpha=None, act_beta=None, threads=1)
    assert name == ext.depthwise_chw_kernel(3, 3, (1, 1), (1, 1), [1, 1, 1, 1], 1)


def test_nan_and_inf_propagate_like_nhwc():
    geometry = GEOMETRIES[1]
    _, _, _, _, _, stride, dilation, pads = geometry
    x, wt, bias, y = case(geometry)
    x.reshape(-1)[::37] = np.nan
    x.reshape(-1)[5::41] = np.inf
    x.reshape(-1)[9::43] = -np.inf
    for isa in ISAS:
        kernels.depthwise_conv_chw(x, wt, bias, y, stride, dilation, pads, "relu", None, None, 2, isa=isa)
        want = nhwc_oracle(x, wt, bias, y.shape, stride, dilation, pads, "relu")
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5, err_msg=isa)  # NaN where NaN


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (2, 3, 7, 7), (1, 70, 14, 14), (2, 5, 13), (1, 4, 112, 112)])
def test_global_avgpool_chw(shape, isa):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape, dtype=np.float32)
    want = x.reshape(shape[0], shape[1], -1).astype(np.float64).mean(axis=2)
    for threads, y_shape in [(1, shape[:2]), (2, (*shape[:2], 1, 1))]:
        y = np.empty(y_shape, np.float32)
        kernels.global_avgpool_chw(x, y, "none", None, None, threads, isa=isa)
        np.testing.assert_allclose(y.reshape(want.shape), want, rtol=1e-5, atol=1e-6)
    y = np.empty(shape[:2], np.float32)
    kernels.global_avgpool_chw(x, y, "relu", None, None, 1, isa=isa)
    np.testing.assert_allclose(y, np.maximum(want, 0), rtol=1e-5, atol=1e-6)


TRANSPOSE_SHAPES = [(1, 1, 1), (1, 3, 50176), (1, 50176, 3), (2, 32, 12544), (1, 96, 3136), (1, 1280, 49),
                    (1, 16, 1), (3, 17, 15), (1, 65, 130), (1, 1, 9),
                    (2, 2, 1001), (1, 4, 777), (1, 999, 2), (2, 555, 4)]  # 2-4 planes to pixels and back


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint8, np.int8, np.bool_, np.int64, np.float64])
def test_transpose_2d(dtype, isa):
    rng = np.random.default_rng(2)
    for shape in TRANSPOSE_SHAPES:
        src = rng.integers(0, 200, size=shape).astype(dtype)
        for threads in (1, 2):
            dst = np.zeros((shape[0], shape[2], shape[1]), dtype)
            kernels.transpose_2d(src, dst, threads, isa=isa)
            assert np.array_equal(dst, src.transpose(0, 2, 1)), (shape, threads)


def test_transpose_2d_moves_nan_payloads_as_bits():
    src = np.arange(3 * 40 * 21, dtype=np.uint32).reshape(3, 40, 21) | np.uint32(0x7FC00000)
    dst = np.empty((3, 21, 40), np.float32)
    kernels.transpose_2d(src.view(np.float32), dst, 2)
    assert np.array_equal(dst.view(np.uint32), src.transpose(0, 2, 1))
    for shape in [(2, 3, 100), (2, 100, 3)]:  # the short-side loops, signalling NaNs
        src = np.arange(600, dtype=np.uint32).reshape(shape) | np.uint32(0x7F800001)
        for isa in ISAS:
            dst = np.empty((2, shape[2], shape[1]), np.float32)
            kernels.transpose_2d(src.view(np.float32), dst, 1, isa=isa)
            assert np.array_equal(dst.view(np.uint32), src.transpose(0, 2, 1)), (shape, isa)


def test_bad_arguments_raise_value_error():
    x, wt, bias, y = case(GEOMETRIES[0])
    geo = ((1, 1), (1, 1), [1, 1, 1, 1])
    bad = [
        lambda: kernels.depthwise_conv_chw(x.astype(np.float64), wt, bias, y, *geo),
        lambda: kernels.depthwise_conv_chw(x[:, :, :, ::2], wt, bias, y, *geo),
        lambda: kernels.depthwise_conv_chw(x[0], wt, bias, y, *geo),
        lambda: kernels.depthwise_conv_chw(x, wt[:2], bias, y, *geo),
        lambda: kernels.depthwise_conv_chw(x, wt, bias[:2], y, *geo),
        lambda: kernels.depthwise_conv_chw(x, wt, bias, y[:, :, :-1], *geo),
        lambda: kernels.depthwise_conv_chw(x, wt, bias, y, (1, 1), (1, 1), [1, 1, 1]),
        lambda: kernels.depthwise_conv_chw(x, wt, bias, y, (0, 1), (1, 1), [1, 1, 1, 1]),
        lambda: kernels.depthwise_conv_chw(x, wt, bias, y, (1, 1), (9, 9), [0, 0, 0, 0]),
        lambda: kernels.depthwise_conv_chw(x, wt, bias, y, *geo, "nope"),
        lambda: kernels.depthwise_conv_chw(x, wt, bias, y, *geo, isa="neon"),
        lambda: kernels.depthwise_chw_kernel(3, 3, (1, 1), (1, 1), [1, 1], 1),
        lambda: kernels.depthwise_chw_kernel(3, 3, (1, 1), (1, 1), [1, 1, 1, 1], 0),
        lambda: kernels.global_avgpool_chw(x, np.empty((2, 4), np.float32)),
        lambda: kernels.global_avgpool_chw(x.astype(np.float16), np.empty((2, 3), np.float32)),
        lambda: kernels.transpose_2d(x[0, 0], np.empty((9, 7), np.float32)),
        lambda: kernels.transpose_2d(x.reshape(2, 3, 63), np.empty((2, 63, 3), np.float64)),
        lambda: kernels.transpose_2d(x.reshape(2, 3, 63), np.empty((2, 3, 63), np.float32)),
        lambda: kernels.transpose_2d(x.reshape(2, 3, 63).astype(np.float16), np.empty((2, 63, 3), np.float16)),
        lambda: kernels.transpose_2d(x.reshape(2, 3, 63), np.empty((2, 63, 3), np.float32)[:, ::-1]),
    ]
    y_ro = np.empty_like(y)
    y_ro.flags.writeable = False
    bad.append(lambda: kernels.depthwise_conv_chw(x, wt, bias, y_ro, *geo))
    for i, call in enumerate(bad):
        with pytest.raises(ValueError) as info:
            call()
        assert "\n" not in str(info.value), (i, str(info.value))


def test_concurrent_calls_agree_with_serial_ones():
    cases = [case(GEOMETRIES[i % 8], seed=i) for i in range(16)]
    geos = [GEOMETRIES[i % 8] for i in range(16)]

    def run(i: int, threads: int) -> np.ndarray:
        x, wt, bias, y = cases[i]
        out = np.empty_like(y)
        _, _, _, _, _, stride, dilation, pads = geos[i]
        kernels.depthwise_conv_chw(x, wt, bias, out, stride, dilation, pads, "relu", None, None, threads)
        t = np.empty((x.shape[0], x.shape[2] * x.shape[3], x.shape[1]), np.float32)
        kernels.transpose_2d(x.reshape(x.shape[0], x.shape[1], -1), t, threads)
        return out, t

    serial = [run(i, 1) for i in range(16)]
    with ThreadPoolExecutor(4) as pool:
        for _ in range(3):
            got = list(pool.map(run, range(16), [1 + i % 2 for i in range(16)]))
            for (a, ta), (b, tb) in zip(got, serial):
                assert np.array_equal(a, b) and np.array_equal(ta, tb)


SCRIPT = """
import json, numpy as np, edgesdk._native as ext
rng = np.random.default_rng(5)
x = rng.standard_normal((1, 4, 15, 37), dtype=np.float32); w = rng.standard_normal((4, 3, 3), dtype=np.float32)
y = np.empty((1, 4, 8, 19), np.float32)
name = ext.depthwise_conv_chw(x, w, None, y, (2, 2), (1, 1), [1, 1, 1, 1], "none", None, None, 2)
t = np.empty((1, 555, 4), np.float32); ext.transpose_2d(x.reshape(1, 4, -1), t, 2)
g = np.empty((1, 4), np.float32); ext.global_avgpool_chw(x, g, "none", None, None, 1)
print(json.dumps({"isa": ext.kernels.active_isa(), "name": name, "y": y.tobytes().hex(),
                  "t": bool(np.array_equal(t[0], x.reshape(4, -1).T)), "g": g.tolist()}))
"""


@pytest.mark.parametrize("isa", ISAS)
def test_forced_level_through_the_environment(isa):
    env = {**os.environ, "EDGESDK_CPU_ISA": isa}
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["isa"] == isa and got["t"]
    assert got["name"] == ("f32_dwconv2d_chw__scalar" if isa == "scalar" else got["name"])
    assert isa == "scalar" or got["name"].startswith("f32_dwconv2d_chw_3x3s2__"), got["name"]
    # the same bits as the scalar level's generic kernel
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 4, 15, 37), dtype=np.float32)
    w = rng.standard_normal((4, 3, 3), dtype=np.float32)
    y = np.empty((1, 4, 8, 19), np.float32)
    kernels.depthwise_conv_chw(x, w, None, y, (2, 2), (1, 1), [1, 1, 1, 1], "none", None, None, 1, isa="scalar")
    assert got["y"] == y.tobytes().hex()
    np.testing.assert_allclose(got["g"][0], x.reshape(4, -1).mean(axis=1), rtol=1e-5, atol=1e-6)
