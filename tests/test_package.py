"""The .edgepkg package: exact round trips, zero-copy aligned blobs, one-line errors, atomic writes."""
from __future__ import annotations

import importlib.util
import json
import mmap
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import edgesdk
from edgesdk.compress.encode import encode_clustered, encode_fp16, encode_nnm, encode_sparse, prune_mask
from edgesdk.errors import ModelLoadError, PackageError
from edgesdk.graph import Graph
from edgesdk.loader import load_model
from edgesdk.models import default_model_path
from edgesdk.package import load_package, read_package_info, save_package, sha256_file
from edgesdk.package import reader as package_reader
from edgesdk.package import writer as package_writer
from edgesdk.package.fb.Model import Model
from edgesdk.package.layout import (ALIGN, ARRAY_ALIGN, CHECKSUM_OFFSET, FORMAT_VERSION, SMALL_ARRAY, Header,
                                    file_checksum, inflate_graph_section)
from edgesdk.passes import optimize
from edgesdk.runtime.activations import Activation

ROOT = Path(__file__).resolve().parents[1]

ENCODERS = {
    "fp16": lambda w, keep: encode_fp16(w),
    "cluster-layer": lambda w, keep: encode_clustered(w, 3),
    "cluster-layer-pruned": lambda w, keep: encode_clustered(w, 3, keep=keep),
    "cluster-channel-fp16": lambda w, keep: encode_clustered(w, 2, per_channel=True, fp16=True),
    "cluster-channel-pruned-fp16": lambda w, keep: encode_clustered(w, 4, per_channel=True, keep=keep, fp16=True),
    "sparse-raw": lambda w, keep: encode_sparse(w, keep),
    "sparse-raw-fp16": lambda w, keep: encode_sparse(w, keep, fp16=True),
    "sparse-clustered": lambda w, keep: encode_sparse(w, keep, bits=3, per_channel=True),
    "nnm-shared": lambda w, keep: encode_nnm(w, 0.5),
    "nnm-per-input-channel-fp16": lambda w, keep: encode_nnm(w, 0.5, mode="per_input_channel", fp16=True),
}

# Attribute values of every kind a node can hold; tuples and lists must come back as such.
EXTRA_ATTRS = {
    "label": "branches", "count": -(1 << 62), "scale": 1e-300, "negative_zero": -0.0, "flag": False,
    "sizes": (3, 1, 2), "order": [3, 1, 2], "weights": (0.5, -0.0, float("inf")), "gains": [1.5],
    "tags": ["a", "βeta"], "names": ("x",), "empty": (), "act": Activation("HardSigmoid", (0.2, 0.5)),
}


def _everything_graph() -> Graph:
    """Conv branches with every encoding and fused activation, every attribute kind, a Gemm head."""
    rng = np.random.default_rng(0)
    g = Graph("everything")
    g.add_input("x", (1, 4, 6, 6))
    acts = [None, Activation("Relu"), Activation("Clip", (0.0, 6.0)), Activation("LeakyRelu", (0.1,))]
    branches = []
    for i, (kind, encode) in enumerate(ENCODERS.items()):
        w = rng.standard_normal((8, 4, 3, 3)).astype(np.float32)
        g.add_encoded(f"w.{kind}", encode(w, prune_mask(w, 0.6)))
        g.add_constant(f"b.{kind}", rng.standard_normal(8).astype(np.float32))
        attrs = dict(kernel_shape=(3, 3), strides=(1, 1), dilations=(1, 1), pads=(1, 1, 1, 1), group=1)
        if acts[i % len(acts)] is not None:
            attrs["fused_activation"] = acts[i % len(acts)]
        g.add_node("Conv", ["x", f"w.{kind}", f"b.{kind}"], [f"y.{kind}"], name=f"conv.{kind}", **attrs)
        branches.append(f"y.{kind}")
    g.add_node("Concat", branches, ["cat"], name="concat", axis=1, **EXTRA_ATTRS)
    g.add_node("HardSigmoid", ["cat"], ["hs"], activation=Activation("HardSigmoid", (0.2, 0.5)))
    g.add_node("GlobalAveragePool", ["hs"], ["gap"])
    g.add_node("Reshape", ["gap"], ["flat"], shape=(1, 8 * len(ENCODERS)))
    g.add_constant("head.w", rng.standard_normal((5, 8 * len(ENCODERS))).astype(np.float32))
    g.add_constant("head.b", rng.standard_normal(5).astype(np.float32))
    g.add_node("Gemm", ["flat", "head.w", "head.b"], ["logits"], alpha=1.0, beta=0.5, transA=False, transB=True)
    g.add_node("Softmax", ["logits"], ["probs"], axis=1, coerce_2d=False)
    g.outputs = ["probs"]
    return load_model(g)  # sorted, shapes inferred: what a pass pipeline would hand to save_package


def _run(model, seed: int = 0) -> dict[str, np.ndarray]:
    sess = edgesdk.Session(model)
    rng = np.random.default_rng(seed)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in sess.input_shapes.items()}
    return sess.run(feeds)


def _assert_identical_outputs(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].dtype == b[name].dtype and np.array_equal(a[name], b[name]), name


def _same_value(a, b) -> bool:
    """Equal and of the same Python types all the way down (1 vs 1.0 vs True, tuple vs list, -0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return np.array_equal(np.float64(a), np.float64(b)) and np.signbit(a) == np.signbit(b)
    return a == b


def _owner(array: np.ndarray) -> np.ndarray | mmap.mmap | None:
    """What the array's memory belongs to: the end of its base chain (views -> the array that owns
    the data), through memoryviews; an mmap when the array is a view of a mapped file."""
    base = array
    while True:
        parent = base.obj if isinstance(base, memoryview) else getattr(base, "base", None)
        if parent is None or isinstance(base, mmap.mmap):
            return base
        base = parent


def _stored_arrays(graph: Graph) -> list[np.ndarray]:
    arrays = []
    for t in graph.tensors.values():
        if t.encoding is not None:
            arrays.extend(t.encoding.arrays().values())
        elif t.is_constant:
            arrays.append(t.data)
    return arrays


@pytest.fixture(scope="module")
def everything() -> Graph:
    return _everything_graph()


# -- round trips ---------------------------------------------------------------------------------
def test_every_attribute_and_encoding_round_trips_exactly(everything, tmp_path):
    path = tmp_path / "everything.edgepkg"
    save_package(everything, path)
    loaded = load_package(path)
    assert loaded.name == everything.name
    assert (loaded.inputs, loaded.outputs) == (everything.inputs, everything.outputs)
    assert [(n.op, n.name, n.inputs, n.outputs) for n in loaded.nodes] == \
        [(n.op, n.name, n.inputs, n.outputs) for n in everything.nodes]
    for before, after in zip(everything.nodes, loaded.nodes, strict=True):
        assert list(before.attrs) == list(after.attrs), before.name
        for key in before.attrs:
            assert _same_value(before.attrs[key], after.attrs[key]), (before.name, key, after.attrs[key])
    assert list(loaded.tensors) == list(everything.tensors)
    for name, t in everything.tensors.items():
        u = loaded.tensors[name]
        assert (u.shape, u.dtype, u.is_constant) == (t.shape, t.dtype, t.is_constant), name
        if t.encoding is not None:
            kind, shape, params, arrays = t.encoding.parts()
            kind2, shape2, params2, arrays2 = u.encoding.parts()
            assert (kind2, shape2) == (kind, shape) and params2.keys() == params.keys()
            assert all(_same_value(params[k], params2[k]) for k in params), (name, params2)
            assert arrays2.keys() == arrays.keys()
            for k in arrays:
                assert arrays2[k].dtype == arrays[k].dtype and np.array_equal(arrays2[k], arrays[k]), (name, k)
        elif t.is_constant:
            assert u.data.dtype == t.data.dtype and np.array_equal(u.data, t.data), name
    _assert_identical_outputs(_run(everything), _run(loaded))


def test_encodings_are_stored_not_decoded(everything, tmp_path):
    path = tmp_path / "everything.edgepkg"
    info = save_package(everything, path)
    loaded = load_package(path)
    encoded = [t for t in loaded.tensors.values() if t.encoding is not None]
    assert {t.encoding.kind for t in encoded} == {"fp16", "clustered", "sparse_csr", "nnm"}
    assert all(t._data is None for t in encoded)  # nothing decoded until a tensor is used
    constants = [t for t in everything.tensors.values() if t.is_constant]
    stored = sum(t["stored_bytes"] for t in read_package_info(path)["tensors"])
    assert stored == sum(t.stored_nbytes for t in constants) < sum(t.nbytes for t in constants)
    # the blob area is the arrays plus alignment padding, nothing else
    arrays = _stored_arrays(everything)
    assert stored <= info.blob_area_size < stored + ALIGN * info.blobs + ARRAY_ALIGN * len(arrays)


def test_loaded_constants_are_aligned_views_of_one_private_buffer(everything, tmp_path):
    """The file is read once into memory the process owns (not mapped: a package overwritten in
    place would kill the process with SIGBUS), and every stored array is a view of that buffer."""
    path = tmp_path / "everything.edgepkg"
    save_package(everything, path)
    arrays = _stored_arrays(load_package(path))
    owners = {id(_owner(a)) for a in arrays}
    buffer = _owner(arrays[0])
    assert len(owners) == 1 and isinstance(buffer, np.ndarray) and buffer.flags.owndata  # no copy, no mmap
    assert buffer.nbytes <= path.stat().st_size + ALIGN  # the file once, no more
    assert any(a.nbytes < SMALL_ARRAY for a in arrays) and any(a.nbytes >= SMALL_ARRAY for a in arrays)
    data = path.read_bytes()
    for a in arrays:
        assert not a.flags.writeable
        assert np.shares_memory(a, buffer)
        # file offsets of blobs are multiples of 64 and so are the addresses: the buffer is aligned
        assert a.ctypes.data % (ALIGN if a.nbytes >= SMALL_ARRAY else ARRAY_ALIGN) == 0
        assert a.tobytes() in data


def test_blob_offsets_in_the_file_are_64_byte_aligned(everything, tmp_path):
    path = tmp_path / "everything.edgepkg"
    info = save_package(everything, path)
    data = path.read_bytes()
    header = Header.unpack(data)
    model = Model.GetRootAs(_graph_section(data, header), 0)
    blobs = [model.Blobs(i) for i in range(model.BlobsLength())]
    large = [a for a in _stored_arrays(everything) if a.nbytes >= SMALL_ARRAY]
    # one blob per large array, the small ones share one (plus the sentinel)
    assert info.blobs == len(blobs) - 1 == len(large) + 1
    assert header.blob_offset % ALIGN == 0 and (blobs[0].Offset(), blobs[0].Size()) == (0, 0)
    for blob in blobs[1:]:
        assert (header.blob_offset + blob.Offset()) % ALIGN == 0
        assert blob.Offset() + blob.Size() <= header.blob_size
    assert header.file_size == len(data) == info.file_size


def test_small_arrays_share_blobs_up_to_a_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(package_writer, "SMALL_BLOB_LIMIT", 40)
    g = Graph("small")
    g.add_input("x", (1, 4))
    for i in range(6):  # 6 x 16 bytes: three shared blobs of two arrays under a 40-byte limit
        g.add_constant(f"c{i}", np.full((1, 4), i, np.float32))
    for i in range(6):
        g.add_node("Add", [f"y{i - 1}" if i else "x", f"c{i}"], [f"y{i}"])
    g.outputs = ["y5"]
    path = tmp_path / "small.edgepkg"
    info = save_package(load_model(g), path)
    assert info.blobs == 3 and info.blob_area_size == 64 + 64 + 32
    loaded = load_package(path)
    for i in range(6):
        assert np.array_equal(loaded.tensors[f"c{i}"].data, np.full((1, 4), i, np.float32))


def test_default_model_round_trips_and_session_opens_packages(tmp_path):
    graph = load_model(default_model_path())
    path = tmp_path / "digits.edgepkg"
    save_package(graph, path, metadata={"source_sha256": sha256_file(default_model_path())})
    expected = _run(default_model_path())
    _assert_identical_outputs(expected, _run(path))  # Session(path) goes through the loader
    _assert_identical_outputs(expected, _run(load_package(path)))
    with pytest.raises(ModelLoadError, match="a package already has fixed shapes"):
        edgesdk.Session(path, input_shapes={"input": (2, 1, 8, 8)})


def test_mobilenet_v2_round_trips(tmp_path):
    from zoo import export_onnx
    graph = load_model(export_onnx("mobilenet_v2", input_shape=(1, 3, 96, 96)))
    optimize(graph)
    path = tmp_path / "mobilenet_v2.edgepkg"
    save_package(graph, path)
    _assert_identical_outputs(_run(graph), _run(path))


def test_a_loaded_package_packs_again_to_the_same_bytes(everything, tmp_path):
    first, second = tmp_path / "a.edgepkg", tmp_path / "b.edgepkg"
    save_package(everything, first)
    save_package(load_package(first), second)
    assert first.read_bytes() == second.read_bytes()  # deterministic: no timestamps, stable layout
    again = load_package(second)
    assert again.metadata["package"]["path"] == str(second) and "package" not in again.metadata["package"]
    _assert_identical_outputs(_run(everything), _run(again))


# -- metadata and info -----------------------------------------------------------------------------
def test_metadata_round_trips(everything, tmp_path):
    graph = everything.copy()
    recipe = {"default": {"cluster_bits": 4}}
    layers = [{"name": "conv.fp16", "ratio": 2.0, "error_rms": np.float32(0.5)}]
    graph.metadata["compression"] = {"recipe": recipe, "layers": layers}
    graph.metadata["note"] = {"nested": [1, 2.5, None, "text"]}
    path = tmp_path / "m.edgepkg"
    info = save_package(graph, path, metadata={"source_sha256": "ab" * 32, "accuracy": 0.975,
                                               "accuracy_dataset": "digits"})
    meta = load_package(path).metadata
    package = meta.pop("package")
    assert meta == {**graph.metadata, "compression": {"recipe": recipe, "layers": [{**layers[0], "error_rms": 0.5}]}}
    assert package["producer"] == f"edgesdk {edgesdk.__version__}" and "created" not in package
    assert (package["source_sha256"], package["accuracy"], package["accuracy_dataset"]) == ("ab" * 32, 0.975, "digits")
    assert package["recipe"] == recipe and package["layers"][0]["name"] == "conv.fp16"
    assert (package["format_version"], package["file_size"], package["checksum"]) == (FORMAT_VERSION, info.file_size,
                                                                                      info.checksum)


def test_recipe_given_as_json_text_loads_as_json(everything, tmp_path):
    save_package(everything, tmp_path / "m.edgepkg", metadata={"recipe": '{"default": {"fp16": true}}'})
    assert load_package(tmp_path / "m.edgepkg").metadata["package"]["recipe"] == {"default": {"fp16": True}}
    with pytest.raises(PackageError, match="recipe is a string but not JSON text"):
        save_package(everything, tmp_path / "n.edgepkg", metadata={"recipe": "cluster 4 bits"})


def test_unevaluated_package_has_no_accuracy(everything, tmp_path):
    save_package(everything, tmp_path / "m.edgepkg")
    package = load_package(tmp_path / "m.edgepkg").metadata["package"]
    assert package["accuracy"] is None and package["source_sha256"] is None and package["recipe"] is None


def test_read_package_info_lists_storage_without_building_arrays(everything, tmp_path, monkeypatch):
    path = tmp_path / "m.edgepkg"
    save_package(everything, path, metadata={"accuracy": 0.5})
    monkeypatch.setattr(package_reader._Package, "array", lambda *a: pytest.fail("read_package_info built an array"))
    info = read_package_info(path)
    assert info["accuracy"] == 0.5 and info["graph"]["inputs"] == [{"name": "x", "shape": [1, 4, 6, 6],
                                                                    "dtype": "float32"}]
    assert info["graph"]["nodes"] == len(everything.nodes) and info["graph"]["ops"]["Conv"] == len(ENCODERS)
    tensors = {t["name"]: t for t in info["tensors"]}
    assert tensors["w.fp16"]["storage"] == "fp16" and tensors["w.fp16"]["stored_bytes"] == 8 * 4 * 9 * 2
    assert tensors["w.cluster-layer"]["params"] == {"bits": 3, "zero_reserved": False}
    assert tensors["head.b"] == {"name": "head.b", "shape": [5], "dtype": "float32", "storage": "dense",
                                 "stored_bytes": 20, "dense_bytes": 20}
    for name, t in everything.tensors.items():
        if t.is_constant:
            assert tensors[name]["stored_bytes"] == t.stored_nbytes and tensors[name]["dense_bytes"] == t.nbytes


def test_progress_reports_every_array(everything, tmp_path):
    calls = []
    info = save_package(everything, tmp_path / "m.edgepkg", progress=lambda done, total: calls.append((done, total)))
    assert len(calls) == len(_stored_arrays(everything)) + 1  # the flatbuffer, then each array
    assert [d for d, _ in calls] == sorted(d for d, _ in calls) and calls[-1] == (info.file_size, info.file_size)


# -- refusals on save ------------------------------------------------------------------------------
@pytest.mark.parametrize("value, message", [
    ({"a": 1}, "cannot store a dict"),
    ((1, 2.0), "lists must hold only ints, only floats or only strings"),
    (1 << 64, "does not fit a 64-bit integer"),
])
def test_unstorable_attributes_are_refused(everything, tmp_path, value, message):
    graph = everything.copy()
    graph.nodes[0].attrs["odd"] = value
    with pytest.raises(PackageError, match=message):
        save_package(graph, tmp_path / "m.edgepkg")
    assert list(tmp_path.iterdir()) == []


def test_unknown_metadata_is_refused(everything, tmp_path):
    with pytest.raises(PackageError, match=r"unknown package metadata \['acuracy'\]"):
        save_package(everything, tmp_path / "m.edgepkg", metadata={"acuracy": 0.9})


# -- atomic writes ---------------------------------------------------------------------------------
def _fail_on_third_blob(monkeypatch, error: BaseException) -> None:
    real, calls = package_writer._emit, []

    def emit(f, checksum, data):
        calls.append(1)
        if len(calls) == 6:  # flatbuffer, then pad + blob pairs: the 3rd blob's padding
            raise error
        real(f, checksum, data)
    monkeypatch.setattr(package_writer, "_emit", emit)


@pytest.mark.parametrize("error, raised", [(KeyboardInterrupt(), KeyboardInterrupt),
                                            (OSError(28, "No space left on device"), PackageError)])
def test_a_failed_write_keeps_the_previous_file(everything, tmp_path, monkeypatch, error, raised):
    path = tmp_path / "m.edgepkg"
    save_package(load_model(default_model_path()), path)
    before = path.read_bytes()
    _fail_on_third_blob(monkeypatch, error)
    with pytest.raises(raised) as exc_info:
        save_package(everything, path)
    if raised is PackageError:
        assert str(exc_info.value) == f"cannot write {str(path)!r}: No space left on device"
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["m.edgepkg"]  # no temp file left behind
    load_package(path)


# -- damaged files ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def digits_package(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("pkg") / "digits.edgepkg"
    save_package(load_model(default_model_path()), path)
    return path.read_bytes()


@pytest.fixture(scope="module")
def raw_digits_package(tmp_path_factory) -> bytes:
    """The digits package with its graph section stored raw, for tests that edit flatbuffer bytes."""
    path = tmp_path_factory.mktemp("pkg") / "digits-raw.edgepkg"
    package_writer.DEFLATE_GRAPH_SECTION = False
    try:
        save_package(load_model(default_model_path()), path)
    finally:
        package_writer.DEFLATE_GRAPH_SECTION = True
    return path.read_bytes()


def _graph_section(data: bytes, header: Header) -> bytes:
    return inflate_graph_section(data[header.fb_offset:header.fb_offset + header.fb_size], header.fb_inflated_size)


def test_graph_section_is_deflated_and_a_bad_inflated_size_is_refused(digits_package, tmp_path):
    header = Header.unpack(digits_package)
    assert 0 < header.fb_size < header.fb_inflated_size
    data = bytearray(digits_package)
    for size in (header.fb_inflated_size + 1, 10 ** 12):  # wrong, and a would-be decompression bomb
        data[40:48] = size.to_bytes(8, "little")
        assert "does not inflate" in _error(_write(tmp_path / "m.edgepkg", data, fix_checksum=True))


def _write(path: Path, data: bytes, fix_checksum: bool = False) -> Path:
    if fix_checksum:
        data = bytearray(data)
        data[CHECKSUM_OFFSET:CHECKSUM_OFFSET + 16] = file_checksum(memoryview(bytes(data)))
    path.write_bytes(bytes(data))
    return path


def _error(path: Path) -> str:
    with pytest.raises(PackageError) as exc_info:
        load_package(path)
    return str(exc_info.value)


def test_wrong_identifier(digits_package, raw_digits_package, tmp_path):
    assert _error(_write(tmp_path / "a.edgepkg", b"PK\x03\x04" + digits_package[4:])) == \
        f"{tmp_path / 'a.edgepkg'}: not an edgesdk package (no EDGEPKG header)"
    data = bytearray(raw_digits_package)
    fb_offset = Header.unpack(data).fb_offset
    data[fb_offset + 4:fb_offset + 8] = b"TFL3"
    assert _error(_write(tmp_path / "b.edgepkg", data, fix_checksum=True)) == \
        f"{tmp_path / 'b.edgepkg'}: not an edgesdk package (flatbuffer identifier b'TFL3', expected b'EPKG')"


def test_wrong_version(digits_package, tmp_path):
    data = bytearray(digits_package)
    data[8:12] = (7).to_bytes(4, "little")
    assert _error(_write(tmp_path / "m.edgepkg", data)) == (
        f"{tmp_path / 'm.edgepkg'}: package format version 7 is not supported; edgesdk "
        f"{edgesdk.__version__} reads version {FORMAT_VERSION}: re-pack the model")


def test_checksum_mismatch(digits_package, tmp_path):
    data = bytearray(digits_package)
    data[Header.unpack(data).blob_offset + 10] ^= 1
    assert _error(_write(tmp_path / "m.edgepkg", data)) == \
        f"{tmp_path / 'm.edgepkg'}: checksum mismatch: the package is corrupt; copy or pack it again"
    load_package(tmp_path / "m.edgepkg", verify=False)  # a blob byte: structure is still sound


def test_truncated(digits_package, tmp_path):
    assert _error(_write(tmp_path / "a.edgepkg", digits_package[:-10])) == (
        f"{tmp_path / 'a.edgepkg'}: truncated package: {len(digits_package) - 10} bytes, the header says "
        f"{len(digits_package)}")
    assert _error(_write(tmp_path / "b.edgepkg", digits_package[:50])) == \
        f"{tmp_path / 'b.edgepkg'}: truncated package: 50 bytes, less than the 64-byte header"
    assert _error(_write(tmp_path / "c.edgepkg", b"")) == \
        f"{tmp_path / 'c.edgepkg'}: not an edgesdk package (no EDGEPKG header)"


def test_missing_file(tmp_path):
    assert _error(tmp_path / "none.edgepkg") == f"{tmp_path / 'none.edgepkg'}: no such file"


def test_blob_out_of_bounds(raw_digits_package, tmp_path):
    digits_package = raw_digits_package
    header = Header.unpack(digits_package)
    fb = bytearray(digits_package[header.fb_offset:header.fb_offset + header.fb_size])
    model = Model.GetRootAs(bytes(fb), 0)
    blob = model.Blobs(1)
    position = blob._tab.Pos + 8  # the size field of blob 1
    fb[position:position + 8] = (header.blob_size + 64).to_bytes(8, "little")
    data = digits_package[:header.fb_offset] + bytes(fb) + digits_package[header.fb_offset + header.fb_size:]
    assert _error(_write(tmp_path / "m.edgepkg", data, fix_checksum=True)) == (
        f"{tmp_path / 'm.edgepkg'}: corrupt package: blob 1 ({header.blob_size + 64} bytes at 0) lies outside "
        f"the {header.blob_size}-byte blob area; re-pack the model with `edgesdk pack`")
    fb[position - 8:position] = (32).to_bytes(8, "little")  # its offset, then: inside but unaligned
    fb[position:position + 8] = (8).to_bytes(8, "little")
    data = digits_package[:header.fb_offset] + bytes(fb) + digits_package[header.fb_offset + header.fb_size:]
    assert _error(_write(tmp_path / "m.edgepkg", data, fix_checksum=True)) == (
        f"{tmp_path / 'm.edgepkg'}: corrupt package: blob 1 at offset 32 is not 64-byte aligned; re-pack the model "
        f"with `edgesdk pack`")


def _check_damaged(path: Path, data: bytes) -> None:
    """A damaged package loads cleanly and runs, or fails with one line: nothing else."""
    _write(path, data)
    try:
        graph = load_package(path)
    except PackageError as exc:
        assert "\n" not in str(exc)
        return
    _run(graph)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_flipped_bytes_anywhere(digits_package, tmp_path, data):
    flips = data.draw(st.lists(st.tuples(st.integers(0, len(digits_package) - 1), st.integers(1, 255)),
                               min_size=1, max_size=4))
    damaged = bytearray(digits_package)
    for position, mask in flips:
        damaged[position] ^= mask
    _check_damaged(tmp_path / "m.edgepkg", bytes(damaged))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_truncated_anywhere(digits_package, tmp_path, data):
    _check_damaged(tmp_path / "m.edgepkg", digits_package[:data.draw(st.integers(0, len(digits_package) - 1))])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_crafted_flatbuffers_never_crash_the_reader(digits_package, tmp_path, data):
    """Bytes changed inside the flatbuffer with a valid checksum (what a buggy writer or a crafted
    file gives): the reader, which has no flatbuffers verifier to lean on, still answers a Graph
    or one PackageError line, never another exception, a hang or a huge allocation."""
    header = Header.unpack(digits_package)
    flips = data.draw(st.lists(st.tuples(st.integers(header.fb_offset, header.fb_offset + header.fb_size - 1),
                                         st.integers(1, 255)), min_size=1, max_size=3))
    damaged = bytearray(digits_package)
    for position, mask in flips:
        damaged[position] ^= mask
    path = _write(tmp_path / "m.edgepkg", bytes(damaged), fix_checksum=True)
    try:
        assert isinstance(load_package(path), Graph)
    except PackageError as exc:
        assert "\n" not in str(exc)


# -- tools ---------------------------------------------------------------------------------------------
def test_generated_code_is_up_to_date(tmp_path):
    spec = importlib.util.spec_from_file_location("gen_flatbuffers", ROOT / "tools" / "gen_flatbuffers.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    stale = gen.differences(gen.generate(tmp_path))
    assert not stale, f"edgesdk/package/fb is stale ({', '.join(stale)}): run python tools/gen_flatbuffers.py"


def test_open_benchmark_reports_both_times_and_the_ratio():
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "bench_package_open.py"), "--model",
                           str(default_model_path()), "--runs", "1", "--first-open", "1", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    baseline = min(report["seconds"]["onnx_load_ort_session_proto"], report["seconds"]["onnx_load_ort_session_path"])
    assert report["ratio"] == pytest.approx(report["seconds"]["load_package"] / baseline)
    first = report["first_open_seconds"]  # the same, each the first open in a new process
    assert report["first_open_ratio"] == pytest.approx(first["load_package"] / first["onnx_load_ort_session_proto"])
