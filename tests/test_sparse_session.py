"""Sparse inference on the cpu backend (issue 15): pruned 1x1 convolutions run from their CSR
weights on the sparse CHW kernels, and the depthwise / global-pooling / elementwise steps between
them stay in CHW, instead of the layer being decoded to dense at session creation.

Here, through whole sessions: the zoo's MobileNets and SqueezeNet pruned (fp32, fp16 and
codebook values) against the same graph decoded to dense (EDGESDK_CPU_SPARSE=0) within 1e-5 of
the output's scale and against ONNX Runtime on the exported dense model, at every x86 level this
CPU runs; the step notes (placements) naming the sparse and CHW kernels; the crossover rule
(a layer below the level's crossover sparsity stays dense, EDGESDK_CPU_SPARSE=1 forces sparse);
NaN and infinities as ONNX Runtime gives them on the dense model; several threads on one session.
The kernels themselves are checked per ISA, NEON under qemu, by the kernel driver
(tests/test_native_kernels.py) and their bindings by tests/test_native_sparse.py /
tests/test_native_chw.py.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import edgesdk
from conftest import assert_close, ort_run
from edgesdk.backends.cpu.lower.conv import SPARSE_CROSSOVER, sparse_crossover
from edgesdk.compress.encodings import SparseCSR
from edgesdk.compress.recipe import LayerSettings, Recipe
from edgesdk.export import export_onnx
from edgesdk.pack import compress_model
from zoo import export_onnx as zoo_export, get_spec, sample_input

_native = pytest.importorskip("edgesdk._native")
KERNELS = _native.kernels
X86_LEVELS = [isa for isa in ("avx2", "avx512") if isa in KERNELS.supported_isas()]
# Sparse and dense sum the same products in different orders: fp32 rounding, relative to the
# output's scale (the bound).
SAME_AS_DENSE = 1e-5


@pytest.fixture
def level(request):
    """Forces one kernel level for the test (process-wide), then restores the default."""
    KERNELS.set_isa(request.param)
    yield request.param
    KERNELS.reset_isa()


def pruned(name: str, settings: LayerSettings) -> tuple[edgesdk.Graph, np.ndarray]:
    shape = get_spec(name).correctness_shape
    graph, _ = compress_model(zoo_export(name, input_shape=shape), Recipe(settings))
    return graph, sample_input(name, shape)


def session(graph, monkeypatch, mode: str = "auto", **options) -> edgesdk.Session:
    monkeypatch.setenv("EDGESDK_CPU_SPARSE", mode)
    return edgesdk.Session(graph, backend="cpu", optimize=False, **options)


def notes(sess: edgesdk.Session, prefix: str) -> list[str]:
    return [s.note for s in sess._impl.steps if s.op == "Conv" and s.note.startswith(prefix)]


def first_output(sess: edgesdk.Session, x: np.ndarray) -> np.ndarray:
    return next(iter(sess.run({sess.input_names[0]: x}).values()))


def sparse_1x1_layers(graph) -> int:
    count = 0
    for node in graph.nodes:
        if node.op == "Conv" and isinstance(graph.tensors[node.inputs[1]].encoding, SparseCSR):
            w = graph.tensors[node.inputs[1]]
            a = node.attrs
            count += (tuple(w.shape[2:]) == (1, 1) and tuple(a["strides"]) == (1, 1) and not any(a["pads"])
                      and a["group"] == 1)
    return count


def max_rel_diff(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.max(np.abs(got - want)) / max(1.0, float(np.max(np.abs(want)))))


VALUES = {"fp32": LayerSettings(prune=0.9), "fp16": LayerSettings(prune=0.9, fp16=True),
          "codebook": LayerSettings(prune=0.9, cluster_bits=4)}


@pytest.mark.parametrize("level", X86_LEVELS, indirect=True)
@pytest.mark.parametrize("values", list(VALUES))
@pytest.mark.parametrize("name", ["mobilenet_v2", "mobilenet_v3_style", "squeezenet"])
def test_pruned_models_run_sparse_and_match_the_dense_decode(level, values, name, monkeypatch, tmp_path):
    graph, x = pruned(name, VALUES[values])
    sparse = session(graph, monkeypatch)
    dense = session(graph, monkeypatch, "0")
    ran_sparse = notes(sparse, "sparse 1x1 (CHW)")
    assert len(ran_sparse) == sparse_1x1_layers(graph) > 0
    kind = {"fp32": "f32", "fp16": "f16", "codebook": "codebook"}[values]
    assert all(n.split(", ")[2] == f"{kind} values" for n in ran_sparse), ran_sparse
    assert all(level in n for n in ran_sparse), ran_sparse
    assert not notes(dense, "sparse")
    got, want = first_output(sparse, x), first_output(dense, x)
    assert max_rel_diff(got, want) <= SAME_AS_DENSE
    dense_onnx = export_onnx(graph, tmp_path / "pruned.onnx")
    assert_close(got, ort_run(str(dense_onnx), {sparse.input_names[0]: x})[0], rtol=1e-4, what=f"{name} {values}")


def test_mobilenet_v2_depthwise_layers_stay_in_chw_between_sparse_layers(monkeypatch):
    graph, x = pruned("mobilenet_v2", VALUES["fp32"])
    sess = session(graph, monkeypatch)
    depthwise = [n for n in graph.nodes if n.op == "Conv" and n.attrs["group"] > 1]
    chw = notes(sess, "depthwise (CHW)")
    # Every depthwise conv but the first (its input comes from the dense stem, NHWC) reads the
    # output of a sparse 1x1 layer.
    assert len(chw) == len(depthwise) - 1, [s.note for s in sess._impl.steps]
    conversions = [s for s in sess._impl.steps if s.op in ("nchw->nhwc", "nhwc->nchw")]
    # The input image, the first depthwise output into the first sparse layer, and the pooled
    # features: no conversion inside the network.
    assert len(conversions) <= 3, [(s.op, s.note) for s in conversions]
    assert any(s.note == "global average (CHW)" for s in sess._impl.steps if s.op == "GlobalAveragePool")


def test_a_layer_below_the_crossover_stays_dense_unless_forced(monkeypatch):
    graph, x = pruned("mobilenet_v2", LayerSettings(prune=0.3))
    assert 0.3 < min(SPARSE_CROSSOVER.values())
    auto = session(graph, monkeypatch)
    assert not notes(auto, "sparse")
    assert any("decoded to dense" in s.note for s in auto._impl.steps if s.op == "Conv")
    forced = session(graph, monkeypatch, "1")
    assert len(notes(forced, "sparse 1x1")) == sparse_1x1_layers(graph)
    assert max_rel_diff(first_output(forced, x), first_output(auto, x)) <= SAME_AS_DENSE


def test_crossover_follows_the_level_and_the_environment(monkeypatch):
    monkeypatch.setenv("EDGESDK_CPU_SPARSE", "auto")
    assert sparse_crossover("avx512amx") == SPARSE_CROSSOVER["avx512"]
    assert sparse_crossover("avxvnni") == SPARSE_CROSSOVER["avx2"]
    assert sparse_crossover("neondot") == SPARSE_CROSSOVER["neon"]
    monkeypatch.setenv("EDGESDK_CPU_SPARSE", "0")
    assert sparse_crossover("avx2") == float("inf")
    monkeypatch.setenv("EDGESDK_CPU_SPARSE", "1")
    assert sparse_crossover("avx2") == 0.0


@pytest.mark.parametrize("special", [np.nan, np.inf, -np.inf])
def test_nan_and_infinities_propagate_as_on_the_dense_model(special, monkeypatch, tmp_path):
    """A pruned weight is a zero in ONNX Runtime's dense model, and 0 x inf is NaN: the sparse
    kernel must give the same non-finite pattern, though it never multiplies by those zeros."""
    graph, x = pruned("mobilenet_v2", VALUES["fp32"])
    x = x.copy()
    x[0, 1, 3, 4] = special
    sparse = session(graph, monkeypatch)
    got = first_output(sparse, x)
    want = ort_run(str(export_onnx(graph, tmp_path / "pruned.onnx")), {sparse.input_names[0]: x})[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))


def test_one_sparse_session_serves_many_threads(monkeypatch):
    graph, x = pruned("mobilenet_v2", VALUES["fp32"])
    sess = session(graph, monkeypatch, threads=2)
    inputs = [x * np.float32(0.5 + i / 8) for i in range(8)]
    want = [first_output(sess, xi) for xi in inputs]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda xi: first_output(sess, xi), inputs * 3))
    for i, g in enumerate(got):
        np.testing.assert_array_equal(g, want[i % len(inputs)])
