"""Compression primitives and passes: exact decodes, the CSR filler convention, k-means, recipes."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import edgesdk
from edgesdk.compress.apply import compress
from edgesdk.compress.bitpack import pack_bits, unpack_bits
from edgesdk.compress.encode import (encode_clustered, encode_fp16, encode_nnm, encode_sparse, magnitude_threshold,
                                     prune_mask)
from edgesdk.compress.encodings import EncodingError, encoding_from_parts
from edgesdk.compress.kmeans import kmeans_1d, kmeans_vectors
from edgesdk.compress.recipe import Recipe, RecipeError
from edgesdk.datasets import digits_split
from edgesdk.evaluation import evaluate
from edgesdk.loader import load_model
from edgesdk.models import default_model_path
from edgesdk.passes import optimize

R = np.random.default_rng(0)


@given(bits=st.integers(1, 16), values=st.lists(st.integers(0, 2 ** 16 - 1), max_size=300))
def test_bitpack_round_trip(bits, values):
    v = np.array(values, dtype=np.int64) % (1 << bits)
    packed = pack_bits(v, bits)
    assert packed.size == (len(v) * bits + 7) // 8
    np.testing.assert_array_equal(unpack_bits(packed, bits, len(v)), v)


def test_kmeans_1d_matches_brute_force_assignment_and_is_exact_on_few_levels():
    x = R.standard_normal((7, 300)).astype(np.float32)
    book, idx = kmeans_1d(x, 8, init="kmeans++")
    assert np.all(np.diff(book, axis=1) >= 0)
    brute = np.abs(x[:, :, None] - book[:, None, :]).argmin(axis=2)
    np.testing.assert_array_equal(np.take_along_axis(book, idx, 1), np.take_along_axis(book, brute, 1))
    few = np.clip(np.round(x * 1.5) / 1.5, -2, 2)  # at most 7 distinct values per row
    assert max(len(np.unique(r)) for r in few) <= 8
    book, idx = kmeans_1d(few, 8)
    np.testing.assert_array_equal(np.take_along_axis(book, idx, 1), few)


def test_kmeans_vectors_recovers_planted_clusters():
    centers = R.standard_normal((1, 4, 6)) * 10
    pts = np.repeat(centers, 5, axis=1) + R.standard_normal((1, 20, 6)) * 0.01
    cents, assign = kmeans_vectors(pts, 4)
    assert len(np.unique(assign)) == 4
    np.testing.assert_allclose(cents[0][assign[0]], pts[0], atol=0.05)


@pytest.mark.parametrize("bits", [None, 2, 5])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("sparsity", [0.3, 0.9, 0.99])
def test_sparse_csr_keeps_exact_zeros_and_values(bits, per_channel, sparsity):
    w = R.standard_normal((12, 5, 3, 3)).astype(np.float32)
    keep = prune_mask(w, sparsity)
    enc = encode_sparse(w, keep, bits=bits, per_channel=per_channel)
    dense = enc.decode()
    np.testing.assert_array_equal(dense == 0, ~keep)
    if bits is None:
        np.testing.assert_array_equal(dense, np.where(keep, w, 0))
    assert enc.nnz == keep.sum() and enc.entries >= enc.nnz


def test_csr_fillers_bridge_long_gaps():
    w = np.zeros((4, 1000), np.float32)
    w[0, 999], w[1, 0], w[1, 700], w[3, 17], w[3, 18] = 1, 2, 3, 4, 5
    for k in range(1, 9):  # force every field width through the layout
        from edgesdk.compress.encode import _csr_layout
        rows, cols = np.nonzero(w)
        row_ptr, deltas, entries, filler = _csr_layout(rows, cols, 4, k)
        assert deltas.max() <= (1 << k) - 1 and (~filler).sum() == 5
        if k == 2:  # column 999 with deltas <= 3: 332 fillers of 3, then the entry (delta 3)
            assert row_ptr[1] - row_ptr[0] == 333
    enc = encode_sparse(w, w != 0)
    np.testing.assert_array_equal(enc.decode(), w)


def test_clustered_zero_entry_and_granularities():
    w = R.standard_normal((6, 40)).astype(np.float32)
    keep = prune_mask(w, 0.5)
    enc = encode_clustered(w, 3, per_channel=True, keep=keep, fp16=True)
    assert enc.codebook.shape == (6, 8) and enc.codebook.dtype == np.float16
    assert np.all(enc.codebook[:, 0] == 0)
    np.testing.assert_array_equal(enc.decode() == 0, ~keep)
    assert enc.indices.size == (240 * 3 + 7) // 8  # bit-packed, not a byte per index
    with pytest.raises(ValueError, match="1-bit"):
        encode_clustered(w, 1, keep=keep)


def test_nnm_modes_decode_to_centroid_copies():
    w = R.standard_normal((16, 4, 3, 3)).astype(np.float32)
    shared = encode_nnm(w, 0.75)
    assert shared.clusters == 4 and len(np.unique(shared.decode().reshape(16, -1), axis=0)) <= 4
    per_input = encode_nnm(w, 0.5, mode="per_input_channel")
    d = per_input.decode()
    assert per_input.centroids.shape == (4, 8, 3, 3) and per_input.assignment.shape == (4, 16)
    assert all(len(np.unique(d[:, c].reshape(16, -1), axis=0)) <= 8 for c in range(4))
    np.testing.assert_array_equal(encode_nnm(d, 0.5, mode="per_input_channel").decode(), d)


def test_encoding_parts_round_trip_and_corruption_is_typed():
    w = R.standard_normal((8, 9)).astype(np.float32)
    for enc in (encode_fp16(w), encode_clustered(w, 4), encode_sparse(w, prune_mask(w, 0.5), bits=3),
                encode_nnm(w, 0.5)):
        kind, shape, params, arrays = enc.parts()
        again = encoding_from_parts(kind, shape, params, arrays)
        np.testing.assert_array_equal(again.decode(), enc.decode())
    kind, shape, params, arrays = encode_sparse(w, prune_mask(w, 0.5)).parts()
    short = dict(arrays, row_lengths=arrays["row_lengths"][:1].copy())
    with pytest.raises(EncodingError, match="row lengths too short"):
        encoding_from_parts(kind, shape, params, short).decode()
    long = dict(arrays, row_lengths=np.full_like(arrays["row_lengths"], 255))  # more entries than stored
    with pytest.raises(EncodingError, match="delta stream too short"):
        encoding_from_parts(kind, shape, params, long).decode()
    with pytest.raises(EncodingError, match="unknown tensor encoding"):
        encoding_from_parts("zip", shape, {}, {})


def test_recipe_matching_and_errors(tmp_path):
    r = Recipe.from_dict({"default": {"cluster_bits": 4}, "layers": [{"match": "*fc*", "prune": 0.5},
                                                                      {"match": "conv1", "skip": True}]})
    assert r.settings_for("net/fc2", "w").prune == 0.5 and r.settings_for("net/fc2", "w").cluster_bits == 4
    assert r.settings_for("conv1", "w").skip and r.settings_for("conv2", "w").prune == 0
    assert Recipe.from_dict(json.loads(r.to_json())) == r
    for bad, words in [({"default": {"bits": 4}}, "unknown setting 'bits'"), ({"default": {"prune": 1.5}}, "prune"),
                       ({"layers": [{"prune": 0.1}]}, "match"), ({"global_prune": 2}, "global_prune"),
                       ({"default": {"nnm_rate": 0.5, "cluster_bits": 4}}, "cannot be combined"), ([], "mapping")]:
        with pytest.raises(RecipeError, match=words):
            Recipe.from_dict(bad)
    path = tmp_path / "r.yaml"
    path.write_text("default:\n  cluster_bits: 3\nglobal_prune: 0.5\n")
    assert Recipe.load(path).global_prune == 0.5
    path.write_text("{not json")
    with pytest.raises(RecipeError, match="not valid"):
        Recipe.load(tmp_path / "r.yaml")


def _default_graph():
    graph = load_model(default_model_path())
    optimize(graph)
    return graph


@pytest.mark.parametrize("recipe", [
    {"default": {"fp16": True}},
    {"default": {"cluster_bits": 4, "per_channel": True}},
    {"default": {"cluster_bits": 4, "fp16": True}, "layers": [{"match": "/9/Gemm", "cluster_bits": 2, "prune": 0.7}]},
    {"default": {"cluster_bits": 5}, "global_prune": 0.5},
])
def test_compressed_default_model_keeps_accuracy(recipe):
    graph = _default_graph()
    reports = compress(graph, Recipe.from_dict(recipe))
    assert len(reports) == 4 and all(r.bytes_after <= r.bytes_before for r in reports)
    assert any(r.bytes_after < r.bytes_before for r in reports)
    result = evaluate(edgesdk.Session(graph), digits_split()[1])
    assert result.accuracy >= 0.99  # baseline 99.72%: these recipes lose at most 0.7 pp
    assert graph.metadata["compression"]["recipe"] == Recipe.from_dict(recipe).to_dict()


def test_reference_runs_compressed_graph_as_its_decoded_equivalent():
    graph = _default_graph()
    compress(graph, Recipe.from_dict({"default": {"cluster_bits": 3}, "global_prune": 0.6}))
    dense = graph.copy()
    for t in dense.tensors.values():
        if t.encoding is not None:
            t.data = t.encoding.decode()
    x = digits_split()[1].x[:1]
    a = edgesdk.Session(graph, backend="reference").run({"input": x})["logits"]
    b = edgesdk.Session(dense, backend="reference").run({"input": x})["logits"]
    np.testing.assert_array_equal(a, b)


def test_global_prune_hits_the_requested_sparsity():
    graph = _default_graph()
    compress(graph, Recipe.from_dict({"default": {"cluster_bits": 4}, "global_prune": 0.8}))
    weights = [graph.tensors[r["weight"]].data for r in graph.metadata["compression"]["layers"]]
    zeros = sum((w == 0).sum() for w in weights) / sum(w.size for w in weights)
    assert abs(zeros - 0.8) < 0.01
    assert magnitude_threshold(np.arange(10.0), 0.3) == 2.0


def test_nnm_skips_depthwise_and_min_params_keeps_small_layers_dense():
    from zoo import export_onnx
    graph = load_model(export_onnx("mobilenet_v2", input_shape=(1, 3, 32, 32)))
    optimize(graph)
    reports = compress(graph, Recipe.from_dict({"default": {"nnm_rate": 0.5}, "min_params": 2000}))
    by_name = {r.name: r for r in reports}
    for node in graph.nodes:
        if node.op == "Conv" and node.name in by_name:
            report = by_name[node.name]
            if node.attrs["group"] > 1 or report.params < 2000:
                assert not report.encoding.startswith("nnm"), report
            else:
                assert report.encoding.startswith("nnm-shared"), report
