"""Huffman-coded weight blocks (issue 15): the codes, the format, the encoder against the
reference decoder, crafted streams, packages, sessions and the CLI."""
from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import pytest

import edgesdk
from edgesdk.backends import available_backends
from edgesdk.compress import LayerSettings, Recipe
from edgesdk.compress import huffman as H
from edgesdk.compress.encode import encode_clustered, encode_huffman, encode_sparse, prune_mask
from edgesdk.compress.encodings import EncodingError, HuffmanBlocks
from edgesdk.compress.recipe import RecipeError
from edgesdk.graph import Graph
from edgesdk.package import load_package, save_package

from onnx_builders import graph_model

EDGESDK = str(Path(sys.executable).with_name("edgesdk"))
RNG = np.random.default_rng(15)


def _weights(shape, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


ENCODERS = {
    "csr-codebook": lambda w: encode_sparse(w, prune_mask(w, 0.85), bits=4),
    "csr-codebook-channel-fp16": lambda w: encode_sparse(w, prune_mask(w, 0.6), bits=3, per_channel=True, fp16=True),
    "csr-fp32": lambda w: encode_sparse(w, prune_mask(w, 0.9)),
    "csr-fp16": lambda w: encode_sparse(w, prune_mask(w, 0.5), fp16=True),
    "clustered": lambda w: encode_clustered(w, 4),
    "clustered-pruned": lambda w: encode_clustered(w, 3, keep=prune_mask(w, 0.7)),
}
SHAPES = [(1, 1), (7, 5), (40, 130), (130, 257), (16, 8, 3, 3)]
BLOCKS = [(128, 128), (3, 5), (1, 1), (64, 256)]


# -- codes ---------------------------------------------------------------------------------------
def test_code_lengths_are_a_complete_prefix_code_within_the_limit():
    fib = [1, 1]
    while len(fib) < 30:
        fib.append(fib[-1] + fib[-2])  # the frequencies that make the deepest Huffman tree
    for freqs in (np.array(fib), RNG.integers(0, 1000, 200), np.array([5, 0, 0, 3]), np.array([0, 9, 0])):
        lengths = H.code_lengths(freqs)
        used = np.flatnonzero(freqs)
        assert np.all(lengths[freqs == 0] == 0) and np.all(lengths[used] >= 1)
        assert lengths.max() <= H.MAX_CODE_BITS and H.kraft_ok(lengths)
        codes = H.canonical_codes(lengths)
        words = {format(int(codes[s]), f"0{lengths[s]}b") for s in used}
        assert len(words) == used.size
        assert not any(a != b and b.startswith(a) for a in words for b in words), "not a prefix code"
    assert H.code_lengths(np.array([0, 7]))[1] == 1  # a lone symbol still takes one bit


def test_huffman_lengths_beat_fixed_width_and_approach_the_entropy():
    freqs = np.bincount(np.minimum(RNG.geometric(0.15, 20000) - 1, 128), minlength=129)
    lengths = H.code_lengths(freqs)
    coded = int((lengths.astype(np.int64) * freqs).sum())
    assert coded < freqs.sum() * 8 * 0.75
    assert coded <= H.entropy_bits(freqs) * 1.03 + freqs.sum() * 0.05


# -- format ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", list(ENCODERS))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_huffman_decodes_to_exactly_what_it_codes(kind, shape):
    w = _weights(shape, seed=len(kind))
    base = ENCODERS[kind](w)
    for block in BLOCKS:
        coded = encode_huffman(base, block)
        coded.validate()
        assert coded.layout == ("dense" if kind.startswith("clustered") else "sparse")
        np.testing.assert_array_equal(coded.decode(), base.decode())
        # the pure-Python reference decoder agrees with whichever decoder decode() used
        rows, cols, idx, per_block = H.decode_reference(coded.grid, coded.layout, coded.stream, coded.block_offsets,
                                                        coded.gap_lengths, coded.index_lengths)
        np.testing.assert_array_equal(per_block, coded.block_entries)
        got_rows, got_cols, got_idx = coded.entry_arrays()
        np.testing.assert_array_equal(got_rows, rows)
        np.testing.assert_array_equal(got_cols, cols)
        np.testing.assert_array_equal(got_idx, idx)


def test_blocks_start_on_their_offsets_and_decode_alone():
    w = _weights((300, 300), seed=3)
    coded = encode_huffman(encode_sparse(w, prune_mask(w, 0.9), bits=4), (128, 128))
    assert coded.grid.blocks == 9 and coded.block_offsets[0] == 0
    rows, cols, _, _ = H.decode_reference(coded.grid, "sparse", coded.stream, coded.block_offsets,
                                          coded.gap_lengths, coded.index_lengths)
    start = np.concatenate([[0], np.cumsum(coded.block_entries.astype(np.int64))])
    for b in range(coded.grid.blocks):
        r0, c0, h, wd = coded.grid.block_shape(b)
        mine = slice(start[b], start[b + 1])
        assert np.all((rows[mine] >= r0) & (rows[mine] < r0 + h) & (cols[mine] >= c0) & (cols[mine] < c0 + wd))
        # block b alone: give the decoder a grid of one block and only its bytes
        one = H.BlockGrid(h, wd, 128, 128)
        alone = np.concatenate([coded.stream[coded.block_offsets[b]:coded.block_offsets[b + 1]], np.zeros(8, np.uint8)])
        r, c, _, n = H.decode_reference(one, "sparse", alone, np.array([0, alone.size - 8]), coded.gap_lengths,
                                        coded.index_lengths)
        assert n[0] == start[b + 1] - start[b]
        np.testing.assert_array_equal(r + r0, rows[mine])
        np.testing.assert_array_equal(c + c0, cols[mine])


def test_huffman_shrinks_pruned_and_clustered_weights():
    """Gaussian weights (torchvision's init), 90% pruned, 4-bit codebook: the index code and the
    gap code both take fewer bits than the CSR's fixed fields."""
    w = _weights((256, 1152), seed=4)
    base = encode_sparse(w, prune_mask(w, 0.9), bits=4)
    coded = encode_huffman(base)
    assert coded.nbytes < 0.9 * base.nbytes, (coded.nbytes, base.nbytes)
    clustered = encode_clustered(w, 4)
    assert encode_huffman(clustered).nbytes < 0.92 * clustered.nbytes


def test_int8_csr_is_not_coded():
    w = RNG.integers(-127, 128, (8, 16)).astype(np.int8)
    with pytest.raises(ValueError, match="clustered or float CSR"):
        encode_huffman(encode_sparse(w, w != 0))


# -- crafted streams ---------------------------------------------------------------------------------
def _coded(shape=(40, 130), block=(16, 32)) -> HuffmanBlocks:
    w = _weights(shape, seed=9)
    return encode_huffman(encode_sparse(w, prune_mask(w, 0.8), bits=4), block)


def _bad(coded: HuffmanBlocks, **changes) -> str:
    with pytest.raises(EncodingError) as info:
        dataclasses.replace(coded, **changes).validate()
    return str(info.value)


def test_crafted_streams_are_refused():
    coded = _coded()
    entries = coded.block_entries.copy()
    entries[2] += 1
    assert "entr" in _bad(coded, block_entries=entries)
    offsets = coded.block_offsets.copy()
    offsets[3] = offsets[2]  # block 2 has no bytes left
    assert "stream" in _bad(coded, block_offsets=offsets)
    assert "rise" in _bad(coded, block_offsets=coded.block_offsets[::-1].copy())
    assert "padding" in _bad(coded, stream=np.concatenate([coded.stream[:-1], [1]]).astype(np.uint8))
    assert "stream" in _bad(coded, stream=coded.stream[:-1].copy())
    lengths = coded.gap_lengths.copy()
    lengths[lengths > 0] = 1  # every used symbol one bit long: no prefix code
    assert "prefix code" in _bad(coded, gap_lengths=lengths)
    long = coded.index_lengths.copy()
    long[long.argmax()] = 13
    assert "prefix code" in _bad(coded, index_lengths=long)
    assert "layout" in _bad(coded, layout="csr")
    assert "raw values" in _bad(coded, codebook=None, values=None)


def test_every_flipped_bit_is_refused_or_decodes_inside_the_tensor():
    """A flipped bit changes a code: the decoder either refuses the stream (a code it does not
    know, a column past the block, a wrong entry count, bits past the block) or, when the change
    happens to keep every invariant, decodes to entries inside the tensor: never a crash."""
    coded = _coded((20, 40), (8, 16))
    refused = 0
    for bit in range(0, int(coded.block_offsets[-1]) * 8):
        stream = coded.stream.copy()
        stream[bit >> 3] ^= np.uint8(1 << (bit & 7))
        crafted = dataclasses.replace(coded, stream=stream)
        try:
            crafted.validate()
        except EncodingError:
            refused += 1
            continue
        rows, cols, idx = crafted.entry_arrays()
        assert rows.max(initial=0) < 20 and cols.max(initial=0) < 40 and idx.max(initial=0) < 16
    assert refused > 0.5 * int(coded.block_offsets[-1]) * 8


# -- packages, sessions, CLI ------------------------------------------------------------------------
def _mlp_model(tmp_path: Path) -> Path:
    """Two Gemms large enough for Huffman coding to pay for itself in a package."""
    w1, w2 = _weights((512, 256), 1), _weights((64, 512), 2)
    nodes = [oh.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1), oh.make_node("Relu", ["h"], ["r"]),
             oh.make_node("Gemm", ["r", "w2", "b2"], ["y"], transB=1)]
    model = graph_model(nodes, {"x": (2, 256)}, ["y"], {"w1": w1, "b1": np.zeros(512, np.float32),
                                                       "w2": w2, "b2": np.zeros(64, np.float32)})
    path = tmp_path / "mlp.onnx"
    onnx.save(model, path)
    return path


def test_package_round_trip_and_sessions_match_the_uncoded_package(tmp_path):
    from edgesdk.compress import pack_model
    source = _mlp_model(tmp_path)
    settings = LayerSettings(prune=0.9, cluster_bits=4)
    plain, coded = tmp_path / "plain.edgepkg", tmp_path / "coded.edgepkg"
    pack_model(source, plain, Recipe(settings))
    pack_model(source, coded, Recipe(dataclasses.replace(settings, huffman=True)))
    assert coded.stat().st_size < 0.9 * plain.stat().st_size
    graph = load_package(coded)
    kinds = [t.encoding.kind for t in graph.tensors.values() if t.encoding is not None]
    assert kinds.count("huffman") == 2
    again = tmp_path / "again.edgepkg"
    save_package(graph, again)
    for name, tensor in load_package(again).tensors.items():  # the arrays survive a second save
        if tensor.encoding is not None:
            for key, array in tensor.encoding.arrays().items():
                np.testing.assert_array_equal(array, graph.tensors[name].encoding.arrays()[key])
    x = {"x": RNG.standard_normal((2, 256)).astype(np.float32)}
    for backend in [b for b in ("reference", "cpu", "opencl") if b in available_backends()]:
        want = edgesdk.Session(plain, backend=backend).run(x)["y"]
        got = edgesdk.Session(coded, backend=backend).run(x)["y"]
        # opencl runs the CSR package on its sparse kernel and the coded one decoded: other sums
        tolerance = 1e-6 if backend != "opencl" else 1e-5 * float(np.abs(want).max())
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=tolerance, err_msg=backend)


def test_recipe_refuses_huffman_with_int8():
    with pytest.raises(RecipeError, match="huffman"):
        LayerSettings(prune=0.5, huffman=True, int8=True)
    with pytest.raises(RecipeError, match="huffman must be true or false"):
        LayerSettings(huffman="yes")


def test_cli_pack_huffman_and_inspect_bits_per_weight(tmp_path):
    source = _mlp_model(tmp_path)
    out = tmp_path / "m.edgepkg"
    proc = subprocess.run([EDGESDK, "pack", str(source), "-o", str(out), "--prune", "0.9", "--cluster-bits", "4",
                           "--huffman"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "huffman: 2 layers" in proc.stdout and "bits per weight" in proc.stdout
    proc = subprocess.run([EDGESDK, "inspect", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "bits/w" in proc.stdout and "huffman-csr(90% zero)+cluster4/layer" in proc.stdout
    line = next(row for row in proc.stdout.splitlines() if "huffman-csr" in row)
    before, after = (float(v) for v in line.split("->")[0].split()[-1:] + line.split("->")[1].split()[:1])
    assert after < before


def test_tiny_layers_stay_uncoded():
    """The digits model's layers are too small for the codes to pay for their tables."""
    from edgesdk.compress.apply import compress
    from edgesdk.loader import load_model
    from edgesdk.models import default_model_path
    graph: Graph = load_model(default_model_path())
    reports = compress(graph, Recipe(LayerSettings(prune=0.9, cluster_bits=4, huffman=True)))
    assert all(r.bytes_before_huffman is None for r in reports if r.params < 4096)


@pytest.mark.parametrize("kind", list(ENCODERS))
def test_huffman_source_is_the_encoding_it_codes(kind):
    from edgesdk.compress.encode import huffman_source
    w = _weights((70, 300), seed=11)
    base = ENCODERS[kind](w)
    source = huffman_source(encode_huffman(base, (32, 64)))
    assert type(source) is type(base) and source.describe() == base.describe()
    source.validate()
    np.testing.assert_array_equal(source.decode(), base.decode())
    for key, array in base.arrays().items():
        np.testing.assert_array_equal(source.arrays()[key], array, err_msg=key)


def test_a_code_that_ends_before_its_blocks_last_byte_is_refused():
    """Zero padding must not stand in for codes: a block with a spare zero byte is refused."""
    coded = _coded()
    end = int(coded.block_offsets[1])
    stream = np.concatenate([coded.stream[:end], [0], coded.stream[end:]]).astype(np.uint8)
    offsets = coded.block_offsets.copy()
    offsets[1:] += 1
    assert "last byte" in _bad(coded, stream=stream, block_offsets=offsets)
    with pytest.raises(ValueError, match="last byte"):
        H.decode_reference(coded.grid, "sparse", stream, offsets, coded.gap_lengths, coded.index_lengths)


# -- the cpu session streams pruned 1x1 layers from the blocks ---------------------------------------
def _pointwise_model(tmp_path: Path, size: int) -> Path:
    """Two pruned-friendly 1x1 convolutions (64 -> 192 -> 64) with a ReLU, on size x size images."""
    nodes = [oh.make_node("Conv", ["x", "w1", "b1"], ["h"]), oh.make_node("Relu", ["h"], ["r"]),
             oh.make_node("Conv", ["r", "w2"], ["y"])]
    model = graph_model(nodes, {"x": (1, 64, size, size)}, ["y"],
                        {"w1": _weights((192, 64, 1, 1), 5), "b1": _weights((192,), 6), "w2": _weights((64, 192, 1, 1), 7)})
    path = tmp_path / f"pointwise{size}.onnx"
    onnx.save(model, path)
    return path


def _packed(tmp_path: Path, source: Path, huffman: bool) -> Path:
    from unittest import mock

    from edgesdk.compress import apply, pack_model
    out = tmp_path / f"{source.stem}-{huffman}.edgepkg"
    with mock.patch.object(apply, "HUFFMAN_PACKAGE_BYTES", -(1 << 30)):
        pack_model(source, out, Recipe(LayerSettings(prune=0.9, cluster_bits=4, huffman=huffman)))
    return out


def _conv_notes(sess) -> list[str]:
    return [s.note for s in sess._impl.steps if s.op == "Conv"]


@pytest.mark.skipif("cpu" not in available_backends(), reason="no cpu backend")
@pytest.mark.parametrize("threads", [1, 3])
def test_cpu_streams_large_pointwise_layers_and_equals_the_sparse_path(tmp_path, monkeypatch, threads):
    source = _pointwise_model(tmp_path, 28)
    plain, coded = _packed(tmp_path, source, False), _packed(tmp_path, source, True)
    x = {"x": RNG.standard_normal((1, 64, 28, 28)).astype(np.float32)}
    x["x"][0, 3, 5, 7], x["x"][0, 9, 0, 0], x["x"][0, 9, 27, 27] = np.inf, np.nan, -np.inf
    want_sess = edgesdk.Session(plain, backend="cpu", threads=threads)
    assert all(n.startswith("sparse 1x1") for n in _conv_notes(want_sess))
    want = want_sess.run(x)["y"]
    sess = edgesdk.Session(coded, backend="cpu", threads=threads)
    assert all("Huffman blocks decoded per block row" in n for n in _conv_notes(sess)), _conv_notes(sess)
    np.testing.assert_array_equal(sess.run(x)["y"], want)  # same sums in the same order
    import onnxruntime as ort
    from edgesdk.export import export_onnx
    export_onnx(load_package(plain), tmp_path / "dense.onnx")
    oracle = ort.InferenceSession(str(tmp_path / "dense.onnx"), providers=["CPUExecutionProvider"]).run(None, x)[0]
    np.testing.assert_array_equal(np.isnan(want), np.isnan(oracle))
    finite = np.isfinite(oracle)
    np.testing.assert_allclose(want[finite], oracle[finite], rtol=1e-4, atol=1e-4 * float(np.abs(oracle[finite]).max()))
    monkeypatch.setenv("EDGESDK_CPU_HUFFMAN", "load")
    loaded = edgesdk.Session(coded, backend="cpu", threads=threads)
    assert all("Huffman blocks decoded at session creation" in n for n in _conv_notes(loaded)), _conv_notes(loaded)
    np.testing.assert_array_equal(loaded.run(x)["y"], want)


@pytest.mark.skipif("cpu" not in available_backends(), reason="no cpu backend")
def test_cpu_decodes_small_layers_at_creation_unless_told_to_stream(tmp_path, monkeypatch):
    source = _pointwise_model(tmp_path, 7)
    coded = _packed(tmp_path, source, True)
    x = {"x": RNG.standard_normal((1, 64, 7, 7)).astype(np.float32)}
    sess = edgesdk.Session(coded, backend="cpu")
    assert all("decoded at session creation" in n for n in _conv_notes(sess)), _conv_notes(sess)
    monkeypatch.setenv("EDGESDK_CPU_HUFFMAN", "stream")
    streamed = edgesdk.Session(coded, backend="cpu")
    assert all("decoded per block row" in n for n in _conv_notes(streamed)), _conv_notes(streamed)
    np.testing.assert_array_equal(streamed.run(x)["y"], sess.run(x)["y"])
    # one session from several threads
    from concurrent.futures import ThreadPoolExecutor
    feeds = [{"x": RNG.standard_normal((1, 64, 7, 7)).astype(np.float32)} for _ in range(8)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda f: streamed.run(f)["y"], feeds))
    for f, got in zip(feeds, results):
        np.testing.assert_array_equal(got, sess.run(f)["y"])
