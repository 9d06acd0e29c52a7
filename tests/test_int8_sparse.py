"""int8 weights stored sparse: CSR over int8 values (edgesdk.quant.encode, SparseCSR with int8 values).

A pruned model quantized to int8 keeps its zeros; `edgesdk pack --prune P --int8` stores each
integer op's weight as int8 CSR where that is smaller than dense. The encoding decodes to the
exact int8 tensor, so the package computes what the in-memory quantized graph computes, and the
reader refuses a package that lies about it (a valid checksum over crafted contents).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_package_crafted import BACKENDS, Crafted, _array_index, _dims_at, _edited, _refused, _tensor_index

import edgesdk
from edgesdk.compress import LayerSettings, Recipe
from edgesdk.compress.encode import encode_sparse
from edgesdk.compress.encodings import EncodingError, SparseCSR, encoding_from_parts
from edgesdk.datasets import digits_split, load_calibration
from edgesdk.evaluation import evaluate
from edgesdk.package import load_package, read_package_info
from edgesdk.package.layout import dtype_code
from edgesdk.pack import compress_model
from edgesdk.quant.encode import encode_int8_weights
from edgesdk.quant.ptq import quantize_graph

ROOT = Path(__file__).resolve().parents[1]
LENET = ROOT / "edgesdk" / "models" / "digits_lenet.onnx"
INTEGER_OPS = ("QLinearConv", "QGemm", "QLinearMatMul")


def _sparse_int8(shape: tuple[int, ...], zeros: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    w = rng.integers(-127, 128, size=shape, dtype=np.int64).astype(np.int8)
    w[rng.random(shape) < zeros] = 0
    return w


# -- the encoding ---------------------------------------------------------------------------------
@pytest.mark.parametrize("shape, zeros", [
    ((16, 8, 3, 3), 0.8),  # a convolution
    ((10, 256), 0.9),  # a Gemm (out, in)
    ((3, 2000), 0.99),  # gaps wider than any delta field: filler entries
    ((5, 7), 0.0),  # nothing to skip
    ((4, 9), 1.0),  # nothing kept
    ((1, 1, 1, 1), 0.5),
])
def test_int8_csr_decodes_to_the_exact_int8_tensor(shape, zeros):
    w = _sparse_int8(shape, zeros, seed=len(shape) + int(100 * zeros))
    w.reshape(-1)[0] = -127  # the extremes of symmetric int8 weights
    w.reshape(-1)[-1] = 127 if w.size > 1 else w.reshape(-1)[-1]
    enc = encode_sparse(w, w != 0)
    assert isinstance(enc, SparseCSR) and enc.values.dtype == np.int8 and enc.dtype == np.int8
    enc.validate()
    decoded = enc.decode()
    assert decoded.dtype == np.int8 and decoded.shape == w.shape and np.array_equal(decoded, w)
    assert enc.nnz == np.count_nonzero(w)
    assert enc.describe().endswith("+int8")
    again = encoding_from_parts(*enc.parts())  # what the package stores and rebuilds
    again.validate()
    assert np.array_equal(again.decode(), w)


def test_int8_csr_is_smaller_than_dense_when_mostly_zero():
    w = _sparse_int8((64, 576), 0.8, seed=1)
    assert encode_sparse(w, w != 0).nbytes < 0.45 * w.nbytes
    dense_ish = _sparse_int8((64, 576), 0.05, seed=2)
    assert encode_sparse(dense_ish, dense_ish != 0).nbytes > dense_ish.nbytes


def test_int8_values_are_stored_raw():
    w = _sparse_int8((8, 16), 0.5, seed=3)
    with pytest.raises(ValueError, match="int8 weights are stored raw"):
        encode_sparse(w, w != 0, bits=4)
    with pytest.raises(ValueError, match="int8 weights are stored raw"):
        encode_sparse(w, w != 0, fp16=True)


def test_float_csr_still_decodes_to_float32():
    w = np.random.default_rng(4).standard_normal((8, 16)).astype(np.float32)
    w[np.abs(w) < 1] = 0
    enc = encode_sparse(w, w != 0)
    assert enc.dtype == np.float32 and enc.decode().dtype == np.float32 and np.array_equal(enc.decode(), w)


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.int32])
def test_other_integer_values_are_refused(dtype):
    w = _sparse_int8((4, 32), 0.7, seed=5)
    enc = encode_sparse(w, w != 0)
    kind, shape, params, arrays = enc.parts()
    arrays["values"] = arrays["values"].astype(dtype)
    with pytest.raises(EncodingError, match=f"values are {np.dtype(dtype).name}, expected float32 or float16 or int8"):
        encoding_from_parts(kind, shape, params, arrays).validate()


# -- pack ------------------------------------------------------------------------------------------
def _pack(tmp: Path, name: str, *flags: str) -> tuple[Path, dict]:
    out = tmp / f"{name}.edgepkg"
    proc = subprocess.run([sys.executable, "-m", "edgesdk", "pack", str(LENET), "-o", str(out), "--json", "-q",
                           "--int8", "--calib", "digits", *flags], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out, json.loads(proc.stdout)


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> dict[str, tuple[Path, dict]]:
    tmp = tmp_path_factory.mktemp("int8_sparse")
    return {"pruned": _pack(tmp, "pruned", "--prune", "0.8", "--eval", "digits"), "dense": _pack(tmp, "dense")}


def test_pack_prune_int8_stores_csr_and_is_smaller(packed):
    (pruned, report), (dense, dense_report) = packed["pruned"], packed["dense"]
    assert pruned.stat().st_size < 0.6 * dense.stat().st_size, (pruned.stat().st_size, dense.stat().st_size)
    assert [r["encoding"] for r in report["layers"]] == ["int8 csr"] * 4  # the table's encoding column
    assert [r["encoding"] for r in dense_report["layers"]] == ["int8"] * 4  # no zeros to skip: dense
    for r, d in zip(report["layers"], dense_report["layers"]):
        assert r["name"] == d["name"] and r["bytes_after"] < 0.6 * d["bytes_after"], (r, d)
    graph = load_package(pruned)
    weights = [graph.tensors[n.inputs[3]] for n in graph.nodes if n.op in INTEGER_OPS]
    assert len(weights) == 4
    for w in weights:
        assert w.dtype == np.int8 and isinstance(w.encoding, SparseCSR) and w.data.dtype == np.int8
    info = {t["name"]: t for t in read_package_info(pruned)["tensors"]}
    assert {info[w.name]["storage"] for w in weights} == {"sparse_csr"}
    assert {info[w.name]["dtype"] for w in weights} == {"int8"}


def test_pack_prune_int8_computes_exactly_what_the_quantized_graph_computes(packed):
    """The package against the same steps in memory (prune, quantize on the same 64 samples), whose
    int8 weights stay dense: the same int8 weights, the same outputs bit for bit, the same accuracy."""
    pruned, report = packed["pruned"]
    float_graph, _ = compress_model(str(LENET), Recipe(LayerSettings(prune=0.8)))
    quantized, _ = quantize_graph(float_graph, load_calibration("digits")[:64], method="minmax")
    stored = load_package(pruned)
    for node in quantized.nodes:
        if node.op in INTEGER_OPS:
            dense = quantized.tensors[node.inputs[3]]
            assert dense.encoding is None
            assert np.array_equal(stored.tensors[node.inputs[3]].data, dense.data), node.name
    test = digits_split()[1]
    for backend in BACKENDS:
        mine, theirs = edgesdk.Session(pruned, backend=backend), edgesdk.Session(quantized, backend=backend)
        name = mine.input_names[0]
        for x in test.x[:64]:
            a, b = mine.run({name: x[None]}), theirs.run({name: x[None]})
            assert all(np.array_equal(a[k], b[k]) for k in a), backend
    accuracy = evaluate(edgesdk.Session(quantized), test).accuracy
    assert report["accuracy"] == accuracy == evaluate(edgesdk.Session(pruned), test).accuracy


def test_encode_int8_weights_leaves_dense_what_csr_would_not_shrink(packed):
    float_graph, _ = compress_model(str(LENET), Recipe(LayerSettings(prune=0.8)))
    quantized, _ = quantize_graph(float_graph, load_calibration("digits")[:64])
    first = next(n for n in quantized.nodes if n.op in INTEGER_OPS)
    quantized.tensors[first.inputs[3]].data = np.full(quantized.tensors[first.inputs[3]].shape, 3, np.int8)
    reports = encode_int8_weights(quantized)
    assert reports == []
    encoded = [n.name for n in quantized.nodes if n.op in INTEGER_OPS and quantized.tensors[n.inputs[3]].encoding]
    assert first.name not in encoded and len(encoded) == 3


# -- lies ------------------------------------------------------------------------------------------
def _int8_weight(crafted: Crafted) -> str:
    """The name of the package's largest int8 CSR weight."""
    names = crafted.strings()[:crafted.column("TensorDtypes").size]
    encoded = crafted.column("EncodingTensors").tolist()
    int8 = dtype_code(np.dtype(np.int8))
    candidates = [names[i] for i in encoded if int(crafted.column("TensorDtypes")[i]) == int8]
    return max(candidates, key=lambda n: crafted.array(_array_index(crafted, n, "values")).size)


def _lie(packed, tmp_path: Path, edit) -> str:
    data = packed["pruned"][0].read_bytes()
    return _refused(tmp_path / "m.edgepkg", _edited(data, edit), *BACKENDS)


def test_a_column_out_of_range_is_refused(packed, tmp_path):
    def widen(c: Crafted) -> None:
        c.array(_array_index(c, _int8_weight(c), "deltas"))[:] = 0xFF  # every delta the field's largest
    message = _lie(packed, tmp_path, widen)
    assert "corrupt package: tensor" in message and "(sparse_csr): row 0 has column" in message
    assert "columns; re-pack the model with `edgesdk pack`" in message


@pytest.mark.parametrize("code, said", [(np.uint8, "uint8"), (np.float32, None)])
def test_values_of_another_dtype_are_refused(packed, tmp_path, code, said):
    """int8 values relabelled uint8 (same bytes): the encoding would decode to uint8, not the int8
    its tensor declares. Relabelled float32 (4x the bytes): the array no longer fits its blob."""
    def relabel(c: Crafted) -> None:
        c.column("ArrayDtypes")[_array_index(c, _int8_weight(c), "values")] = dtype_code(np.dtype(code))
    message = _lie(packed, tmp_path, relabel)
    assert "corrupt package: tensor" in message
    if said:
        assert f"is declared int8 but its sparse_csr encoding decodes to {said}" in message


def test_a_tensor_declared_float32_over_int8_values_is_refused(packed, tmp_path):
    def redeclare(c: Crafted) -> None:
        c.column("TensorDtypes")[_tensor_index(c, _int8_weight(c))] = dtype_code(np.dtype(np.float32))
    message = _lie(packed, tmp_path, redeclare)
    assert "is declared float32 but its sparse_csr encoding decodes to int8" in message


def test_a_value_count_mismatch_is_refused(packed, tmp_path):
    def shorten(c: Crafted) -> None:
        _dims_at(c, _array_index(c, _int8_weight(c), "values"))[0] -= 1
    message = _lie(packed, tmp_path, shorten)
    assert "(sparse_csr): values have shape" in message and "(one value per entry" in message


def test_a_row_length_mismatch_is_refused(packed, tmp_path):
    def lengthen(c: Crafted) -> None:
        c.array(_array_index(c, _int8_weight(c), "row_lengths"))[0] ^= 1  # one entry more or less
    message = _lie(packed, tmp_path, lengthen)
    assert "(sparse_csr): deltas have shape" in message


def test_uint8_values_under_a_uint8_tensor_are_refused(packed, tmp_path):
    """Both relabelled (tensor and values uint8, consistent with each other): the values are still
    not what an int8 CSR holds, refused before any check reads the weights."""
    def relabel(c: Crafted) -> None:
        name = _int8_weight(c)
        c.column("ArrayDtypes")[_array_index(c, name, "values")] = dtype_code(np.dtype(np.uint8))
        c.column("TensorDtypes")[_tensor_index(c, name)] = dtype_code(np.dtype(np.uint8))
    message = _lie(packed, tmp_path, relabel)
    assert "(sparse_csr): values are uint8, expected float32 or float16 or int8" in message


def test_a_large_dense_int8_package_loads_every_time(tmp_path):
    """Blob areas from 1 MiB are read on a second thread: the integer ops' checks must wait for it
    (they read scales and zero points), or a sound package is refused now and then."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from edgesdk.loader import load_model
    from edgesdk.package import load_package, save_package
    from edgesdk.passes import optimize
    from edgesdk.quant.ptq import quantize_graph
    rng = np.random.default_rng(0)
    w = rng.standard_normal((1200, 1024)).astype(np.float32)
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)], "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1024])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1200])], [numpy_helper.from_array(w, "w")]),
        opset_imports=[helper.make_opsetid("", 17)])
    graph = load_model(model)
    optimize(graph)
    qgraph, _ = quantize_graph(graph, rng.standard_normal((8, 1024)).astype(np.float32))
    path = tmp_path / "big.edgepkg"
    save_package(qgraph, path)
    assert path.stat().st_size > (1 << 20)
    for _ in range(20):
        assert any(node.op == "QGemm" for node in load_package(path).nodes)


def test_inspect_names_the_int8_weights_encoding(packed):
    """``inspect``'s per-node table fills the weights column of integer ops (input 3, not 1)."""
    for key, expect in (("pruned", "csr"), ("dense", "int8")):
        proc = subprocess.run([sys.executable, "-m", "edgesdk", "inspect", str(packed[key][0]), "--json"],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        rows = [r for r in json.loads(proc.stdout)["layers"] if r["op"] in INTEGER_OPS]
        assert len(rows) == 4 and all(expect in r["weights"] for r in rows), rows
