"""Packages that lie: a valid checksum over crafted contents, and files rewritten under a session.

A checksum catches accidents, not intent: anyone can edit a package and seal it again. The fuzz
tests below edit real packages *inside* the structure (numbers in the inflated flatbuffer's
columns, bytes of the encodings' arrays), re-deflate the graph section and re-seal the xxh3
checksum, so that only the reader's semantic checks stand between the edit and the kernels. A
crafted package must then either fail at load or Session creation with one typed line, or run:
exactly as the original when the edit changed nothing the model computes (a list flag, a
duplicate value), else as the reference backend runs the same file (a changed codebook entry or
in-range index is a different, valid model that no check can tell from the original).
"""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import edgesdk
from edgesdk.backends import available_backends
from edgesdk.compress import LayerSettings, Recipe, pack_model
from edgesdk.errors import EdgeSDKError, PackageError
from edgesdk.graph import Graph
from edgesdk.loader import load_model
from edgesdk.models import default_model_path
from edgesdk.datasets import digits_split
from edgesdk.package import load_package, save_package
from edgesdk.package.fb.Graph import Graph as FbGraph
from edgesdk.package.fb.Model import Model
from edgesdk.package.layout import (CHECKSUM_OFFSET, HEADER_SIZE, Header, deflate_graph_section, dtype_from_code,
                                    file_checksum, inflate_graph_section)
from edgesdk.package.validate import FUSABLE, SIGNATURES, check_graph

ROOT = Path(__file__).resolve().parents[1]
BACKENDS = [b for b in ("reference", "cpu") if b in available_backends()]
HAS_OPENCL = "opencl" in available_backends()

# The default model packed so that every encoding and storage appears (names: what each adds).
RECIPES = {
    "dense": None,
    "cluster-layer": Recipe(LayerSettings(cluster_bits=4)),
    "cluster-channel-fp16": Recipe(LayerSettings(cluster_bits=3, per_channel=True, fp16=True)),
    "cluster-pruned": Recipe(LayerSettings(cluster_bits=4, prune=0.3)),  # zero_reserved codebooks
    "csr-raw": Recipe(LayerSettings(prune=0.8)),
    "csr-raw-fp16": Recipe(LayerSettings(prune=0.8, fp16=True)),
    "csr-codebook": Recipe(LayerSettings(prune=0.8, cluster_bits=3, per_channel=True)),
    "nnm-shared": Recipe(LayerSettings(nnm_rate=0.5)),
    "nnm-per-input-channel-fp16": Recipe(LayerSettings(nnm_rate=0.5, nnm_mode="per_input_channel", fp16=True)),
    # Huffman-coded blocks (the fixture keeps every coded layer, however small)
    "huffman-csr-codebook": Recipe(LayerSettings(prune=0.8, cluster_bits=4, huffman=True)),
    "huffman-csr-raw": Recipe(LayerSettings(prune=0.8, huffman=True)),
    "huffman-clustered": Recipe(LayerSettings(cluster_bits=3, per_channel=True, huffman=True)),
    # LQ-Nets binary-coded weights, and with LQQuantize nodes in front (calibrated on digits)
    "lq-weights": Recipe(LayerSettings(lq_bits=3)),
    "lq-activations": Recipe(LayerSettings(lq_bits=2, lq_act_bits=2)),
}
# Every numeric column of the Graph table (edgepkg.fbs), by its generated accessor's name, and the
# blob table (Model.blobs: offset, size per blob).
COLUMNS = sorted(name[:-len("AsNumpy")] for name in dir(FbGraph) if name.endswith("AsNumpy")) + ["Blobs"]


# -- editing a package inside its structure ----------------------------------------------------------
class Crafted:
    """A package taken apart for editing: the blob area and the inflated flatbuffer, both as
    writable bytes; the generated accessors give writable numpy views of the columns."""

    def __init__(self, data: bytes) -> None:
        self.header = h = Header.unpack(data)
        self.blob_area = bytearray(data[h.blob_offset:h.fb_offset])
        self.fb = bytearray(inflate_graph_section(data[h.fb_offset:h.fb_offset + h.fb_size], h.fb_inflated_size))
        self.model = Model.GetRootAs(self.fb, 0)
        self.graph = self.model.Graph()

    def column(self, name: str) -> np.ndarray:
        """A writable view of a Graph column inside the flatbuffer (empty when absent), or of the
        blob table's (offset, size) pairs as one column."""
        if name == "Blobs":
            tab = self.model._tab
            field = tab.Offset(8)  # Model.blobs, a vector of 16-byte structs
            return np.frombuffer(self.fb, "<u8", 2 * tab.VectorLen(field), tab.Vector(field))
        vector = getattr(self.graph, f"{name}AsNumpy")()
        return np.zeros(0, np.uint8) if isinstance(vector, int) else vector

    def strings(self) -> list[str]:
        data, at, out = bytes(self.column("Strings")), 0, []
        for length in self.column("StringLengths").tolist():
            out.append(data[at:at + length].decode("utf-8"))
            at += length
        return out

    def array_names(self) -> list[str]:
        strings = self.strings()
        return [strings[i] for i in self.column("ArrayNames").tolist()]

    def array(self, i: int) -> np.ndarray:
        """A writable view of encoding array ``i`` in the blob area, with its stored dtype."""
        blob, offset = (int(x) for x in self.column("ArrayPlaces")[2 * i:2 * i + 2])
        dtype = dtype_from_code(int(self.column("ArrayDtypes")[i]))
        ranks = self.column("ArrayRanks")
        start = int(ranks[:i].sum())
        count = int(np.prod(self.column("ArrayDims")[start:start + int(ranks[i])]))
        return np.frombuffer(self.blob_area, dtype, count, self.model.Blobs(blob).Offset() + offset)

    def seal(self) -> bytes:
        """The package again: graph section re-deflated, header sizes and checksum recomputed."""
        fb, inflated = deflate_graph_section(bytes(self.fb))
        h = dataclasses.replace(self.header, file_size=HEADER_SIZE + len(self.blob_area) + len(fb),
                                fb_size=len(fb), fb_inflated_size=inflated, checksum=bytes(16))
        data = bytearray(h.pack() + bytes(self.blob_area) + fb)
        data[CHECKSUM_OFFSET:CHECKSUM_OFFSET + 16] = file_checksum(memoryview(bytes(data)))
        return bytes(data)


def _edited(data: bytes, edit: Callable[[Crafted], Any]) -> bytes:
    crafted = Crafted(data)
    edit(crafted)
    return crafted.seal()


# -- the oracle -------------------------------------------------------------------------------------
def _run_all(path: Path, backends: list[str]) -> dict[str, dict[str, np.ndarray]] | str:
    """Outputs per backend, or the one-line typed error that refused the file at load or at
    Session creation. Anything else (another exception, a multi-line message, an error at run
    time, after the checks should have spoken) fails the test."""
    try:
        load_package(path)
        sessions = {b: edgesdk.Session(path, backend=b) for b in backends}
    except EdgeSDKError as exc:
        message = str(exc)
        assert message and "\n" not in message, f"not one line: {message!r}"
        return message
    return {b: s.run(_feeds(s)) for b, s in sessions.items()}


def _feeds(session: edgesdk.Session) -> dict[str, np.ndarray]:
    """The same inputs for every run of every package (an edit may rename or reshape them)."""
    rng = np.random.default_rng(0)
    return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in session.input_shapes.items()}


def _semantics(graph: Graph) -> tuple:
    """What a graph computes, comparable with ==: its signature, nodes and every constant's
    decoded bytes (a tuple stored as a list or a bool as 0/1 computes the same)."""
    def canonical(value: Any) -> Any:
        return tuple(canonical(v) for v in value) if isinstance(value, (list, tuple)) else value
    nodes = tuple((n.op, tuple(n.inputs), tuple(n.outputs), tuple(sorted((k, canonical(v)) for k, v in
                                                                          n.attrs.items())))
                  for n in graph.nodes)
    tensors = tuple(sorted((t.name, t.shape, t.dtype.str, t.data.tobytes() if t.is_constant else None)
                           for t in graph.tensors.values()))
    return tuple(graph.inputs), tuple(graph.outputs), nodes, tensors


def _same_bits(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and a[k].shape == b[k].shape
                                        and a[k].tobytes() == b[k].tobytes() for k in a)


def _assert_agrees_with_reference(got: dict[str, np.ndarray], reference: dict[str, np.ndarray], what: str) -> None:
    """The tolerance the suite allows between a backend and the reference, NaN and infinities
    where the reference has them (a crafted codebook may hold them)."""
    assert got.keys() == reference.keys(), what
    for name, expected in reference.items():
        actual = got[name]
        assert actual.shape == expected.shape and actual.dtype == expected.dtype, (what, name)
        finite = np.isfinite(expected)
        assert np.array_equal(np.isnan(actual), np.isnan(expected)), (what, name, actual, expected)
        assert np.array_equal(actual[np.isinf(expected)], expected[np.isinf(expected)]), (what, name)
        scale = float(np.max(np.abs(expected[finite]), initial=1e-6))
        np.testing.assert_allclose(actual[finite], expected[finite], rtol=1e-4, atol=1e-4 * scale, err_msg=what)


def _check_crafted(data: bytes, original: "Packed", path: Path, backends: list[str]) -> str:
    """The fuzz tests' property; returns what happened (for the statistics hypothesis prints)."""
    path.write_bytes(data)
    result = _run_all(path, backends)
    if isinstance(result, str):
        return "refused"
    if _semantics(load_package(path)) == original.semantics:
        for b in backends:
            assert _same_bits(result[b], original.outputs_on(b)), f"{b}: same model, different outputs"
        return "same model"
    for b in backends:
        if b != "reference":
            _assert_agrees_with_reference(result[b], result["reference"], b)
    return "different valid model"


@dataclasses.dataclass
class Packed:
    """One of the recipes' packages, what it computes and its outputs per backend."""
    name: str
    path: Path
    data: bytes
    semantics: tuple
    outputs: dict[str, dict[str, np.ndarray]]

    def outputs_on(self, backend: str) -> dict[str, np.ndarray]:
        if backend not in self.outputs:  # opencl: only when a test asks (programs compile slowly)
            session = edgesdk.Session(self.path, backend=backend)
            self.outputs[backend] = session.run(_feeds(session))
        return self.outputs[backend]


class Packages(dict):
    """Recipe name -> Packed; a short repr for hypothesis's report of a failing example."""

    def __repr__(self) -> str:
        return f"<packages {', '.join(self)}>"


@pytest.fixture(scope="module")
def packages(tmp_path_factory) -> Packages:
    from unittest import mock

    from edgesdk.compress import apply
    folder = tmp_path_factory.mktemp("packages")
    packed = Packages()
    for name, recipe in RECIPES.items():
        path = folder / f"{name}.edgepkg"
        if recipe is None:
            save_package(load_model(default_model_path()), path)
        else:
            calibration = digits_split()[0].x[:16] if recipe.default.lq_act_bits else None
            with mock.patch.object(apply, "HUFFMAN_PACKAGE_BYTES", -(1 << 30)):
                pack_model(default_model_path(), path, recipe, calibration=calibration)
        outputs = _run_all(path, BACKENDS)
        assert not isinstance(outputs, str), outputs
        packed[name] = Packed(name, path, path.read_bytes(), _semantics(load_package(path)), outputs)
    described = " ".join(t.encoding.describe() for p in packed.values()
                         for t in load_package(p.path).tensors.values() if t.encoding is not None)
    for kind in ("fp16", "cluster4/layer", "cluster3/channel/fp16", "+fp32", "+fp16", "+cluster3/channel",
                 "nnm-shared", "nnm-per-input", "huffman-csr", "huffman[cluster3/channel]", "lq3", "lq2"):
        assert kind in described, f"no {kind} encoding among the recipes: {described}"
    return packed


# -- structure-aware fuzzing -------------------------------------------------------------------------
def _numbers(dtype: np.dtype, old: Any, column: np.ndarray) -> st.SearchStrategy:
    """New values for an element: the edges of its type, its neighbours, its column's other
    values (an index pointing elsewhere), anything. Floats stay finite and moderate: a weight
    of inf or 1e38 is a valid model whose result depends on summation order (and the cpu
    backend's clustered GEMM turns an inf codebook entry into NaN where the reference gives
    inf), which is no question of what the reader lets through."""
    if dtype.kind == "f":
        return st.one_of(st.sampled_from([0.0, -0.0, 1.0, -1.0, 0.5, 2.0 * old]),
                         st.floats(-1e3, 1e3, width=8 * dtype.itemsize))
    info = np.iinfo(dtype)
    near = [v for v in (0, 1, 2, old - 1, old + 1, 2 * old, old // 2, info.max, info.min, -1, 255, 256, 65535)
            if info.min <= v <= info.max]
    others = sorted(set(column.tolist()))[:64] or [0]
    return st.one_of(st.sampled_from(near), st.sampled_from(others), st.integers(int(info.min), int(info.max)))


@dataclasses.dataclass(frozen=True)
class Edit:
    """Set element ``index`` of a Graph column, or of encoding array ``target``, to ``value``."""
    where: str  # "column" or "array"
    target: str | int  # a column's name, an array's number
    index: int
    value: Any
    was: Any

    def apply(self, crafted: Crafted) -> None:
        view = crafted.column(self.target) if self.where == "column" else crafted.array(self.target)
        with np.errstate(over="ignore"):
            view[self.index] = self.value


@st.composite
def column_edits(draw: st.DrawFn, data: bytes) -> Edit:
    """One element of one Graph column set to a new value: counts, dims, dtype codes, ranks,
    tensor and value indices, value kinds, integer and float values of attributes and encoding
    parameters, string bytes and lengths."""
    crafted = Crafted(data)
    name = draw(st.sampled_from([c for c in COLUMNS if crafted.column(c).size]))
    column = crafted.column(name)
    index = draw(st.integers(0, column.size - 1))
    return Edit("column", name, index, draw(_numbers(column.dtype, column[index].item(), column)),
                column[index].item())


@st.composite
def array_edits(draw: st.DrawFn, data: bytes) -> Edit:
    """One element of one encoding's array (index bytes, CSR deltas and row lengths, NNM maps,
    codebooks, centroids, raw values) set to a new value."""
    crafted = Crafted(data)
    i = draw(st.integers(0, len(crafted.array_names()) - 1))
    array = crafted.array(i)
    index = draw(st.integers(0, array.size - 1))
    return Edit("array", i, index, draw(_numbers(array.dtype, array[index].item(), array)), array[index].item())


@st.composite
def crafted_packages(draw: st.DrawFn, packages: Packages, arrays_only: bool = False
                     ) -> tuple[str, list[Edit]]:
    """One of the recipes' packages and 1-3 edits to make to it."""
    names = [n for n in packages if n != "dense"] if arrays_only else list(packages)
    name = draw(st.sampled_from(names))
    data = packages[name].data
    kinds = [] if arrays_only else [column_edits(data)]
    if name != "dense":  # the dense package has no encoding arrays
        kinds.append(array_edits(data))
    return name, draw(st.lists(st.one_of(kinds), min_size=1, max_size=3))


def _craft(packages: Packages, name: str, edits: list[Edit]) -> tuple[Packed, bytes]:
    """The package with the edits made: arrays first, while the columns still say where they are."""
    original = packages[name]
    crafted = Crafted(original.data)
    for edit in sorted(edits, key=lambda e: e.where != "array"):
        edit.apply(crafted)
    return original, crafted.seal()


FUZZ = settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                        HealthCheck.too_slow])


@FUZZ
@given(data=st.data())
def test_crafted_packages_are_refused_in_one_line_or_run_as_they_say(packages, tmp_path, data):
    original, crafted = _craft(packages, *data.draw(crafted_packages(packages), label="package and edits"))
    event(_check_crafted(crafted, original, tmp_path / "crafted.edgepkg", BACKENDS))


@pytest.mark.skipif(not HAS_OPENCL, reason="no OpenCL device")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(data=st.data())
def test_crafted_encoding_arrays_on_opencl(packages, tmp_path, data):
    """Edits of array contents only: they change no kernel's compile-time constants, so the
    OpenCL programs come from the cache and a few dozen examples take seconds."""
    original, crafted = _craft(packages, *data.draw(crafted_packages(packages, arrays_only=True),
                                                     label="package and edits"))
    event(_check_crafted(crafted, original, tmp_path / "crafted.edgepkg", ["reference", "opencl"]))


# -- the bugs crafted files found, one by one -------------------------------------------------------
def _tensor_index(crafted: Crafted, name: str) -> int:
    return crafted.strings()[:crafted.column("TensorDtypes").size].index(name)


def _array_index(crafted: Crafted, tensor: str, array: str) -> int:
    """The number of ``tensor``'s encoding array ``array`` among all encodings' arrays."""
    encoded = crafted.column("EncodingTensors").tolist()
    counts = crafted.column("EncodingCounts")[1::2].tolist()
    first = sum(counts[:encoded.index(_tensor_index(crafted, tensor))])
    names = crafted.array_names()
    return next(i for i in range(first, len(names)) if names[i] == array)


def _dims_at(crafted: Crafted, i: int) -> np.ndarray:
    """A writable view of encoding array ``i``'s dims."""
    ranks = crafted.column("ArrayRanks")
    start = int(ranks[:i].sum())
    return crafted.column("ArrayDims")[start:start + int(ranks[i])]


def _refused(path: Path, data: bytes, *backends: str) -> str:
    """The one PackageError line load_package and Session(..., backend) give for ``data``."""
    path.write_bytes(data)
    messages = set()
    for load in [load_package] + [lambda p, b=b: edgesdk.Session(p, backend=b) for b in backends]:
        with pytest.raises(PackageError) as info:
            load(path)
        messages.add(str(info.value))
    assert len(messages) == 1 and "\n" not in next(iter(messages)), messages
    return messages.pop()


def test_a_truncated_index_stream_is_refused(packages, tmp_path):
    """The cpu backend ran a conv whose 4-bit index stream was cut short, unpacking the missing
    indices as zeros: logit -7.2 became -0.09, silently."""
    def truncate(c: Crafted) -> None:
        _dims_at(c, _array_index(c, "/4/Conv.weight_bn", "indices"))[0] = 2000  # of 2304 bytes
    message = _refused(tmp_path / "m.edgepkg", _edited(packages["cluster-layer"].data, truncate), *BACKENDS)
    assert message == (f"{tmp_path / 'm.edgepkg'}: corrupt package: tensor '/4/Conv.weight_bn' (clustered): "
                       f"indices have shape [2000], expected [2304] (4608 indices of 4 bits); re-pack the model "
                       f"with `edgesdk pack`")


def test_an_nnm_assignment_out_of_range_is_refused(packages, tmp_path):
    """Was ValueError: nnm_gather: assignment out of range (cpu, at Session creation) and an
    EncodingError on the first run (reference)."""
    def reassign(c: Crafted) -> None:
        c.array(_array_index(c, "9.weight", "assignment"))[5] = 200  # 32 centroids
    message = _refused(tmp_path / "m.edgepkg", _edited(packages["nnm-shared"].data, reassign), *BACKENDS)
    assert message.endswith(": corrupt package: tensor '9.weight' (nnm): assignment 200 is out of range: there "
                            "are 32 centroids; re-pack the model with `edgesdk pack`")


def test_a_codebook_of_another_dtype_is_refused(packages, tmp_path):
    """A float32 codebook relabelled int32 (same size, so every bound holds): the reference
    backend decoded the integers as weights, the cpu backend's kernel raised a pybind TypeError
    (CLI: "internal error", exit 1)."""
    def relabel(c: Crafted) -> None:
        c.column("ArrayDtypes")[_array_index(c, "/4/Conv.weight_bn", "codebook")] = 2  # DType.INT32
    message = _refused(tmp_path / "m.edgepkg", _edited(packages["cluster-layer"].data, relabel), *BACKENDS)
    assert "tensor '/4/Conv.weight_bn' (clustered): codebook are int32, expected float32 or float16" in message


def _value_index(crafted: Crafted, name: str) -> int:
    strings = crafted.strings()
    return [strings[i] for i in crafted.column("ValueNames").tolist()].index(name)


def test_a_parameter_of_the_wrong_kind_is_refused(packages, tmp_path):
    """``bits`` stored as a string (kind STRING, its int read as a string index): the cpu
    backend's pybind call failed with a multi-line TypeError listing its overloads."""
    def as_string(c: Crafted) -> None:
        c.column("ValueKinds")[_value_index(c, "bits")] = 3  # ValueKind.STRING
    message = _refused(tmp_path / "m.edgepkg", _edited(packages["cluster-layer"].data, as_string), *BACKENDS)
    assert "(clustered): bits is '" in message and "expected an int in 1..8" in message


def test_an_attribute_of_the_wrong_kind_is_refused(packages, tmp_path):
    """Conv's group stored as a bool: the cpu backend ran it (True == 1), the reference backend
    raised TypeError "an integer is required" on the first run."""
    def as_bool(c: Crafted) -> None:
        c.column("ValueKinds")[_value_index(c, "group")] = 2  # ValueKind.BOOL, value 1
    message = _refused(tmp_path / "m.edgepkg", _edited(packages["cluster-layer"].data, as_bool), *BACKENDS)
    assert message.endswith(": corrupt package: node '/0/Conv' (Conv) attribute 'group' is True, expected an int; "
                            "re-pack the model with `edgesdk pack`")


def _node_tensor_position(crafted: Crafted, node: str, slot: int) -> int:
    """Where input ``slot`` of ``node`` sits in the NodeTensors column (inputs, then outputs)."""
    strings, tensors = crafted.strings(), crafted.column("TensorDtypes").size
    names = strings[tensors:tensors + crafted.column("NodeOps").size]
    counts = crafted.column("NodeCounts").tolist()
    at = sum(counts[3 * i] + counts[3 * i + 1] for i in range(names.index(node)))
    return at + slot


def test_a_gemm_bias_that_does_not_broadcast_to_the_output_is_refused(packages, tmp_path):
    """Found by the fuzz test: C of shape (10, 64) for a (1, 64) output passed shape inference
    (the shapes broadcast, the wrong way round) and the reference backend failed at run time."""
    def rewire(c: Crafted) -> None:
        c.column("NodeTensors")[_node_tensor_position(c, "/9/Gemm", 2)] = _tensor_index(c, "12.weight")
    message = _refused(tmp_path / "m.edgepkg", _edited(packages["cluster-layer"].data, rewire), *BACKENDS)
    assert message.endswith(": corrupt package: node '/9/Gemm' (Gemm) C '12.weight' has shape [10, 64], which "
                            "does not broadcast to the output's [1, 64]; re-pack the model with `edgesdk pack`")


def test_names_with_line_breaks_keep_the_error_on_one_line(packages, tmp_path):
    """Found by the fuzz test: an op type of "\\neshape" (a string byte edited) put a line break
    in the message."""
    def garble(c: Crafted) -> None:
        strings, lengths = c.column("Strings"), c.column("StringLengths").tolist()
        index = c.strings().index("Reshape")
        strings[sum(lengths[:index])] = ord("\n")
    message = _refused(tmp_path / "m.edgepkg", _edited(packages["cluster-layer"].data, garble), *BACKENDS)
    assert message.endswith(": corrupt package: node '/8/Flatten' ('\\neshape'): no runtime kernel for op "
                            "'\\neshape'; re-pack the model with `edgesdk pack`")


def test_a_graph_output_naming_a_constant_gives_its_value(packages, tmp_path):
    """Was KeyError '9.bias' (fixed in the backends): a graph output may be a constant, here
    an fp16-encoded one, and every backend returns its decoded value."""
    def output_bias(c: Crafted) -> None:
        c.column("Outputs")[0] = _tensor_index(c, "9.bias")
    path = tmp_path / "m.edgepkg"
    path.write_bytes(_edited(packages["cluster-channel-fp16"].data, output_bias))
    expected = load_package(path).tensors["9.bias"].encoding.decode()
    for backend in BACKENDS:
        got = edgesdk.Session(path, backend=backend).run({"input": np.zeros((1, 1, 8, 8), np.float32)})
        assert list(got) == ["9.bias"] and got["9.bias"].tobytes() == expected.tobytes(), backend


def test_the_cli_refuses_a_crafted_package_in_one_line(packages, tmp_path):
    def truncate(c: Crafted) -> None:
        _dims_at(c, _array_index(c, "/0/Conv.weight_bn", "indices"))[0] = 40
    path = tmp_path / "m.edgepkg"
    path.write_bytes(_edited(packages["cluster-layer"].data, truncate))
    proc = subprocess.run([sys.executable, "-m", "edgesdk", "run", str(path), "--random", "--backend", BACKENDS[-1]],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == "", (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stderr.strip().splitlines() == [
        f"edgesdk: error: {path}: corrupt package: tensor '/0/Conv.weight_bn' (clustered): indices have shape "
        f"[40], expected [72] (144 indices of 4 bits); re-pack the model with `edgesdk pack`"]


# -- what the checks accept -----------------------------------------------------------------------------
def test_every_graph_the_importer_builds_passes_the_checks_and_round_trips(tmp_path):
    """The checks follow the importer's canonical form (onnx_import): every ONNX node test case
    it imports, as imported and optimised (fused activations, folded BatchNorm), packs, loads
    and still passes check_graph; every op with a kernel has a signature."""
    from onnx_node_cases import case_names, load_case

    from edgesdk.passes import FUSABLE_PRODUCERS, optimize
    from edgesdk.ops import runtime_ops
    assert set(SIGNATURES) == runtime_ops() and FUSABLE == FUSABLE_PRODUCERS
    imported = 0
    for name in case_names():
        try:
            graph = load_model(load_case(name).model)
        except EdgeSDKError:
            continue  # a case edgesdk does not import
        imported += 1
        optimize(graph)
        check_graph(graph)
        save_package(graph, tmp_path / "case.edgepkg")
        check_graph(load_package(tmp_path / "case.edgepkg"))
    assert imported > 200


# -- a package overwritten while a session runs it ------------------------------------------------------
_SESSIONS_CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import edgesdk
    path, backends = sys.argv[1], sys.argv[2].split(",")
    sessions = {b: edgesdk.Session(path, backend=b) for b in backends}
    feeds = {"input": np.random.default_rng(0).standard_normal((1, 1, 8, 8)).astype(np.float32)}
    print("ready", flush=True)
    for _ in sys.stdin:  # one line per run asked for
        print(json.dumps({b: s.run(feeds)["logits"].tolist() for b, s in sessions.items()}), flush=True)
""")


def _overwrite_in_place(path: Path, data: bytes) -> None:
    """What ``cp new.edgepkg path`` does: the same inode truncated, then written."""
    with open(path, "r+b") as f:
        f.truncate(0)
        f.write(data)


def test_a_package_overwritten_in_place_does_not_disturb_open_sessions(packages, tmp_path):
    """The reader used to map the file and hand out views of the mapping: a package rewritten in
    place (cp over it) changed the weights under a running session or, truncated, killed the
    process with SIGBUS. The file is now read once into private memory."""
    path = tmp_path / "model.edgepkg"
    path.write_bytes(packages["csr-raw"].data)
    child = subprocess.Popen([sys.executable, "-c", _SESSIONS_CHILD, str(path), ",".join(BACKENDS)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready", child.stderr.read()

        def run() -> dict[str, Any]:
            child.stdin.write("run\n")
            child.stdin.flush()
            line = child.stdout.readline()
            assert line, f"the session process died (exit {child.wait()}): {child.stderr.read()}"
            return json.loads(line)
        before = run()
        _overwrite_in_place(path, packages["dense"].data)  # another valid package: larger, other weights
        assert run() == before
        _overwrite_in_place(path, b"")  # truncated to nothing
        assert run() == before
    finally:
        child.stdin.close()
        assert child.wait(timeout=60) == 0, child.stderr.read()
