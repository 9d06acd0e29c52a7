"""Clustered KxK convolutions on the cpu backend run from an indirection buffer (issue 15:
``ClusteredConvPlan``, cpu_native/src/kernels/operators.cc): no padded copy of the input and no
im2col buffer, one decoded weight panel per thread; 3x3 stride-1 layers with enough tiles run
Winograd F(4x4, 3x3) from the codes, each panel decoded and transformed on the call.

Here: the plan against the reference backend over geometries that reach every branch (padding,
strides, dilation, rectangular kernels, channel counts off the GEMM's tiles, batch > 1, a
pixel count below one tile), per-layer and per-channel codebooks in fp32 and fp16, every x86
level this CPU runs, 1 and 2 threads; the session's step note and that the step takes no arena
scratch; where Winograd is chosen, and that EDGESDK_CPU_WINOGRAD=0 turns it off; NaN and
infinities as the dense model gives them (both paths); the binding's errors.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper as oh

import edgesdk
from conftest import assert_close
from edgesdk.compress.recipe import LayerSettings, Recipe
from edgesdk.pack import compress_model
from onnx_builders import graph_model

_native = pytest.importorskip("edgesdk._native")
KERNELS = _native.kernels
X86_LEVELS = [isa for isa in ("avx2", "avx512") if isa in KERNELS.supported_isas()]


@pytest.fixture
def level(request):
    KERNELS.set_isa(request.param)
    yield request.param
    KERNELS.reset_isa()


def conv_model(c: int, k: int, hw: tuple[int, int], kernel: tuple[int, int], n: int = 1, stride: int = 1,
               dilation: int = 1, pads=(1, 1, 1, 1), act: str | None = "Relu", seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    weight = (rng.standard_normal((k, c) + kernel) / np.sqrt(c * kernel[0] * kernel[1])).astype(np.float32)
    bias = (rng.standard_normal(k) * 0.1).astype(np.float32)
    out = "z" if act else "y"
    nodes = [oh.make_node("Conv", ["x", "w", "b"], [out], kernel_shape=list(kernel), pads=list(pads),
                          strides=[stride, stride], dilations=[dilation, dilation])]
    if act:
        nodes.append(oh.make_node(act, ["z"], ["y"]))
    return graph_model(nodes, {"x": (n, c) + hw}, ["y"], {"w": weight, "b": bias})


def conv_note(sess: edgesdk.Session) -> str:
    (note,) = [s.note for s in sess._impl.steps if s.op == "Conv"]
    return note


def check_against_reference(graph, threads: int, path: str, rtol: float, what: str) -> None:
    """The cpu session's clustered Conv step takes ``path`` and matches the reference backend."""
    x = np.random.default_rng(1).standard_normal(graph.tensors["x"].shape).astype(np.float32)
    want = edgesdk.Session(graph, backend="reference").run({"x": x})["y"]
    sess = edgesdk.Session(graph, backend="cpu", threads=threads, optimize=False)
    note = conv_note(sess)
    assert note.startswith("clustered") and note.endswith(path), note
    assert_close(sess.run({"x": x})["y"], want, rtol=rtol, what=what)


def clustered(model: onnx.ModelProto, bits: int = 4, per_channel: bool = False, fp16: bool = False):
    graph, _ = compress_model(model, Recipe(LayerSettings(cluster_bits=bits, per_channel=per_channel, fp16=fp16)))
    return graph


GEOMETRIES = {
    "3x3-pad1": dict(c=16, k=24, hw=(9, 11), kernel=(3, 3)),
    "3x3-stride2": dict(c=8, k=40, hw=(13, 10), kernel=(3, 3), stride=2),
    "3x3-dilation2": dict(c=5, k=7, hw=(12, 12), kernel=(3, 3), dilation=2, pads=(2, 2, 2, 2)),
    "5x3-asymmetric": dict(c=3, k=33, hw=(8, 9), kernel=(5, 3), pads=(2, 0, 1, 1)),
    "7x7-stem": dict(c=3, k=16, hw=(20, 20), kernel=(7, 7), stride=2, pads=(3, 3, 3, 3)),
    "3x3-batch3": dict(c=12, k=20, hw=(6, 7), kernel=(3, 3), n=3),
    "3x3-two-pixels": dict(c=64, k=70, hw=(1, 2), kernel=(3, 3)),
    "1x1-stride2": dict(c=16, k=32, hw=(8, 8), kernel=(1, 1), stride=2, pads=(0, 0, 0, 0)),
}


@pytest.mark.parametrize("level", X86_LEVELS, indirect=True)
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("geometry", list(GEOMETRIES))
def test_clustered_conv_matches_the_reference(level, threads, geometry):
    graph = clustered(conv_model(**GEOMETRIES[geometry]))
    check_against_reference(graph, threads, "indirect conv", 1e-4, f"{geometry} {level}")


@pytest.mark.parametrize("per_channel,fp16,bits", [(True, False, 3), (False, True, 4), (True, True, 8), (False, False, 1)])
def test_codebook_kinds(per_channel, fp16, bits):
    graph = clustered(conv_model(c=32, k=48, hw=(14, 14), kernel=(3, 3), act="Clip"), bits, per_channel, fp16)
    x = np.random.default_rng(2).standard_normal(graph.tensors["x"].shape).astype(np.float32)
    want = edgesdk.Session(graph, backend="reference").run({"x": x})["y"]
    got = edgesdk.Session(graph, backend="cpu", threads=2, optimize=False).run({"x": x})["y"]
    assert_close(got, want, rtol=1e-4, what=f"{bits} bits per_channel={per_channel} fp16={fp16}")


def test_the_step_takes_no_arena_scratch(monkeypatch):
    """Before the plan, a padded 3x3 layer wrote a padded copy and a KH*KW-times im2col buffer into
    the arena; now it needs the arena the dense direct convolution needs."""
    model = conv_model(c=64, k=64, hw=(28, 28), kernel=(3, 3))
    monkeypatch.setenv("EDGESDK_CPU_WINOGRAD", "0")
    dense = edgesdk.Session(model, backend="cpu")
    sess = edgesdk.Session(clustered(model), backend="cpu", optimize=False)
    assert sess._impl.arena_bytes == dense._impl.arena_bytes
    plan = KERNELS.ClusteredConvPlan(
        KERNELS.pack_clustered(np.zeros(64 * 576 // 2, np.uint8), 4, 64, 576, np.zeros((1, 16), np.float32)),
        [1, 28, 28, 64], (3, 3), pads=[1, 1, 1, 1])
    x, y = np.ones((1, 28, 28, 64), np.float32), np.empty((1, 28, 28, 64), np.float32)
    plan.run(x, y)
    np.testing.assert_array_equal(y, 0.0)
    mr = int(KERNELS.kernel_names()["igemm_f32w"].split("_")[2].split("x")[0])
    tiles = -(-28 * 28 // mr)
    assert plan.indirection_bytes == tiles * 9 * mr * 8 + 64 * 4  # pointers + the zero row
    nr = int(KERNELS.kernel_names()["igemm_f32w"].split("x")[1].split("__")[0])
    assert plan.panel_bytes == (576 + 256) * nr * 4  # the panel and one decode chunk of 256 columns


# 3x3 stride-1 layers with at least 16 4x4 tiles run Winograd F(4x4, 3x3) from the codes: C past the
# 64-channel blocks, K off the panel width, batch 2, asymmetric and no padding.
WINOGRAD_GEOMETRIES = {
    "16x18-pad1": dict(c=20, k=40, hw=(16, 18), kernel=(3, 3)),
    "batch2-c70": dict(c=70, k=33, hw=(9, 15), kernel=(3, 3), n=2, pads=(0, 1, 2, 1)),
    "unpadded-c130": dict(c=130, k=17, hw=(18, 18), kernel=(3, 3), pads=(0, 0, 0, 0), act="Clip"),
}


@pytest.mark.parametrize("level", X86_LEVELS, indirect=True)
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("geometry", list(WINOGRAD_GEOMETRIES))
def test_clustered_winograd_matches_the_reference(level, threads, geometry, monkeypatch):
    graph = clustered(conv_model(**WINOGRAD_GEOMETRIES[geometry]), per_channel=threads == 2)
    check_against_reference(graph, threads, "winograd F(4x4,3x3) conv", 2e-4, f"{geometry} {level}")
    monkeypatch.setenv("EDGESDK_CPU_WINOGRAD", "0")  # the switch turns it off
    direct = edgesdk.Session(graph, backend="cpu", threads=threads, optimize=False)
    assert conv_note(direct).endswith("indirect conv"), conv_note(direct)


def test_clustered_winograd_only_where_tiles_share_the_transform():
    """Each call decodes and transforms every panel: at 7x7 (4 tiles) that costs more than it saves."""
    w = KERNELS.pack_clustered(np.zeros(16 * 9 * 16 // 2, np.uint8), 4, 16, 144, np.zeros((1, 16), np.float32))
    assert KERNELS.ClusteredConvPlan(w, [1, 14, 14, 16], (3, 3), pads=[1, 1, 1, 1]).is_winograd
    assert not KERNELS.ClusteredConvPlan(w, [1, 7, 7, 16], (3, 3), pads=[1, 1, 1, 1]).is_winograd
    assert KERNELS.ClusteredConvPlan(w, [4, 7, 7, 16], (3, 3), pads=[1, 1, 1, 1]).is_winograd  # 16 tiles
    assert not KERNELS.ClusteredConvPlan(w, [1, 14, 14, 16], (3, 3), (2, 2), pads=[1, 1, 1, 1]).is_winograd


@pytest.mark.parametrize("special", [np.nan, np.inf])
@pytest.mark.parametrize("hw", [(8, 8), (16, 16)], ids=["indirect", "winograd"])
def test_nan_and_infinities_as_the_dense_model(special, hw, tmp_path):
    graph = clustered(conv_model(c=16, k=16, hw=hw, kernel=(3, 3), act=None))
    x = np.random.default_rng(3).standard_normal(graph.tensors["x"].shape).astype(np.float32)
    x[0, 2, 3, 3] = special
    want = edgesdk.Session(graph, backend="reference").run({"x": x})["y"]
    got = edgesdk.Session(graph, backend="cpu", optimize=False).run({"x": x})["y"]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    finite = np.isfinite(want)
    assert_close(got[finite], want[finite], rtol=1e-4)


def test_plan_refuses_weights_that_do_not_fit_the_geometry():
    w = KERNELS.pack_clustered(np.zeros(8 * 27, np.uint8), 4, 8, 27, np.zeros((1, 16), np.float32))
    with pytest.raises(ValueError, match="KH\\*KW\\*C = 36"):
        KERNELS.ClusteredConvPlan(w, [1, 5, 5, 4], (3, 3))
    plan = KERNELS.ClusteredConvPlan(w, [1, 5, 5, 3], (3, 3))
    with pytest.raises(ValueError, match="x"):
        plan.run(np.zeros((1, 5, 5, 4), np.float32), np.zeros((1, 3, 3, 8), np.float32))


def test_one_winograd_session_from_many_threads():
    """Each call's V lives in the calling thread's scratch and each panel's in the worker's: eight
    threads calling one session at once get what lone calls get."""
    from concurrent.futures import ThreadPoolExecutor
    graph = clustered(conv_model(**WINOGRAD_GEOMETRIES["batch2-c70"]))
    sess = edgesdk.Session(graph, backend="cpu", threads=2, optimize=False)
    assert conv_note(sess).endswith("winograd F(4x4,3x3) conv")
    xs = [np.random.default_rng(seed).standard_normal(graph.tensors["x"].shape).astype(np.float32)
          for seed in range(8)]
    alone = [sess.run({"x": x})["y"] for x in xs]
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda x: sess.run({"x": x})["y"], xs * 4))
    for i, got in enumerate(together):
        np.testing.assert_array_equal(got, alone[i % 8])
