"""edgesdk.onnx_read: .onnx files whose large initializers stay in one buffer, read like onnx.load."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto
from onnx import helper as oh
from onnx import numpy_helper as nh

import edgesdk
from edgesdk.errors import ModelLoadError
from edgesdk.onnx_import import import_model, load_onnx
from edgesdk.onnx_read import _DTYPES, _tag, _varint_bytes, read_onnx

ROUNDTRIP_TYPES = sorted(_DTYPES) + [TensorProto.BFLOAT16]  # bfloat16: numpy_helper's unpacking


def _values(data_type: int, count: int, rng: np.random.Generator) -> TensorProto:
    raw = rng.integers(0, 256, count * onnx.helper.tensor_dtype_to_np_dtype(data_type).itemsize, dtype=np.uint8)
    if data_type == TensorProto.BOOL:
        raw = raw & 1
    return oh.make_tensor(f"t{data_type}", data_type, [count // 4, 4], raw.tobytes(), raw=True)


def _conv_gemm_model(name_pad: int = 0) -> onnx.ModelProto:
    """x (1, 8, 6, 6) -> Conv 16 3x3 (4.5 KB of weights) -> Relu -> Flatten -> Gemm 10 (23 KB)."""
    rng = np.random.default_rng(0)
    w = nh.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32), "w" + "_" * name_pad)
    fc = nh.from_array(rng.standard_normal((10, 576)).astype(np.float32), "fc")
    bias = nh.from_array(rng.standard_normal(10).astype(np.float32), "fc_b")  # small: stays in the message
    nodes = [oh.make_node("Conv", ["x", w.name], ["c"], pads=[1, 1, 1, 1]), oh.make_node("Relu", ["c"], ["r"]),
             oh.make_node("Flatten", ["r"], ["f"]), oh.make_node("Gemm", ["f", "fc", "fc_b"], ["y"], transB=1)]
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], [w, fc, bias])
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])


@pytest.mark.parametrize("data_type", ROUNDTRIP_TYPES, ids=lambda t: TensorProto.DataType.Name(t))
def test_every_type_reads_as_onnx_load_does(tmp_path, data_type):
    rng = np.random.default_rng(data_type)
    model = _conv_gemm_model()
    model.graph.initializer.extend([_values(data_type, 4096, rng), _values(data_type, 8, rng)])  # large, small
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    read = read_onnx(path)
    assert read is not None and set(read.payloads) == {0, 1, 3}  # w, fc, the large t (same name as the small one)
    originals = onnx.load(path).graph.initializer
    for index, (proto, original) in enumerate(zip(read.model.graph.initializer, originals, strict=True)):
        value = read.array(index)
        expected = nh.to_array(original)
        if value is None:
            assert index not in read.payloads
            value = nh.to_array(proto)
        assert value.dtype == expected.dtype and value.shape == expected.shape
        assert value.tobytes() == expected.tobytes()
        assert value.ctypes.data % value.dtype.itemsize == 0


def test_the_graph_is_the_one_onnx_load_gives(tmp_path):
    """Same constants, and a Constant whose tensor is named like an initializer keeps its own value;
    an initializer given twice is the importer's error either way."""
    model = _conv_gemm_model()
    shadow = nh.from_array(np.full((10,), 7.0, np.float32), "fc")
    model.graph.node.append(oh.make_node("Constant", [], ["seven"], value=shadow))
    model.graph.node.append(oh.make_node("Add", ["y", "seven"], ["z"]))
    model.graph.output[0].name = "z"
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    fast, slow = load_onnx(path), import_model(onnx.load(path), source=str(path))
    names = sorted(t.name for t in fast.constants())
    assert names == sorted(t.name for t in slow.constants()) and "fc" in names
    for name in names:
        a, b = fast.const(name), slow.const(name)
        assert a.dtype == b.dtype and np.array_equal(a, b)
    x = np.random.default_rng(1).standard_normal((1, 8, 6, 6)).astype(np.float32)
    with edgesdk.Session(path, backend="reference") as sess:
        got = sess.run({"x": x})["z"]
    import onnxruntime as ort
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    model.graph.initializer.append(model.graph.initializer[1])  # "fc" twice
    onnx.save(model, path)
    assert set(read_onnx(path).payloads) == {0, 1, 3}
    errors = []
    for load in (lambda: load_onnx(path), lambda: import_model(onnx.load(path), source=str(path))):
        with pytest.raises(edgesdk.EdgeSDKError) as info:
            load()
        errors.append(str(info.value))
    assert errors[0] == errors[1] and "initializer 'fc' is defined twice" in errors[0]


def test_payloads_too_close_to_move_are_copied(tmp_path):
    """Two payloads 6 bytes apart (the first tensor's raw_data last, the second's first, which
    protobuf allows): when the first is 4097 bytes, for one of 8 offsets the second cannot move
    down to an 8-byte boundary without overwriting the first, and is copied instead."""
    values = [(np.arange(4097) % 251).astype(np.uint8), np.arange(1100, dtype=np.float32)]

    def tensor(name: str, value: np.ndarray, raw_first: bool) -> bytes:
        raw = value.tobytes()
        raw = _tag(9, 2) + _varint_bytes(len(raw)) + raw
        data_type = TensorProto.UINT8 if value.dtype == np.uint8 else TensorProto.FLOAT
        rest = b"".join((_tag(8, 2), _varint_bytes(len(name)), name.encode(), _tag(1, 0), _varint_bytes(value.size),
                         _tag(2, 0), _varint_bytes(data_type)))
        return raw + rest if raw_first else rest + raw

    copied = 0
    for pad in range(8):
        model = _conv_gemm_model()
        model.graph.doc_string = "d" * pad
        graph = model.graph.SerializeToString() + b"".join(
            _tag(5, 2) + _varint_bytes(len(t)) + t for t in (tensor(f"a{i}", v, i == 1) for i, v in enumerate(values)))
        model.ClearField("graph")
        path = tmp_path / f"m{pad}.onnx"
        path.write_bytes(model.SerializeToString() + _tag(7, 2) + _varint_bytes(len(graph)) + graph)
        read = read_onnx(path)
        assert read is not None and [p.name for p in read.model.graph.initializer][3:] == ["a0", "a1"]
        for i, index in enumerate((3, 4)):  # after w, fc, fc_b
            value = read.array(index)
            assert value.dtype == values[i].dtype
            np.testing.assert_array_equal(value, values[i])
            assert value.ctypes.data % value.dtype.itemsize == 0
            copied += not np.shares_memory(value, read.buffer)
        with edgesdk.Session(path, backend="reference") as sess:  # the unused initializers do not matter
            assert sess.run({"x": np.zeros((1, 8, 6, 6), np.float32)})["y"].shape == (1, 10)
    assert copied == 1  # the padding that put the second payload out of reach


def test_a_payload_that_does_not_match_its_dims_is_a_load_error(tmp_path):
    model = _conv_gemm_model()
    model.graph.initializer[0].dims[0] = 17  # 16 filters' bytes, 17 declared
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    assert read_onnx(path) is not None
    with pytest.raises(ModelLoadError, match=r"cannot read initializer 'w' \(raw_data holds 4608 bytes, dims "
                                             r"\[17, 8, 3, 3\] of FLOAT need 4896\)"):
        edgesdk.Session(path, backend="reference")


def test_external_data_and_old_opsets_go_through_onnx_load(tmp_path):
    x = np.random.default_rng(2).standard_normal((1, 8, 6, 6)).astype(np.float32)
    model = _conv_gemm_model()
    path = tmp_path / "ext.onnx"
    onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True, location="ext.data",
              size_threshold=1024)
    assert read_onnx(path) is None
    with edgesdk.Session(path, backend="reference") as sess, \
            edgesdk.Session(_write(tmp_path / "inline.onnx", model), backend="reference") as inline:
        np.testing.assert_array_equal(sess.run({"x": x})["y"], inline.run({"x": x})["y"])
    old = _conv_gemm_model()
    old.opset_import[0].version = 9
    with edgesdk.Session(_write(tmp_path / "old.onnx", old), backend="reference") as sess:
        assert sess.run({"x": x})["y"].shape == (1, 10)


def _write(path, model: onnx.ModelProto):
    onnx.save(model, path)
    return path


VALID = _conv_gemm_model().SerializeToString()


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flips=st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.integers(1, 255)), min_size=1, max_size=4),
       cut=st.one_of(st.none(), st.integers(0, len(VALID) - 1)))
def test_damaged_files_with_payloads_are_typed_errors(tmp_path, flips, cut):
    """Flipped bytes (headers and lengths of the payloads included) and truncation: a session that
    runs or a one-line EdgeSDKError, never another exception."""
    data = bytearray(VALID)
    for pos, mask in flips:
        data[pos] ^= mask
    path = tmp_path / "m.onnx"
    path.write_bytes(bytes(data[:cut]))
    try:
        sess = edgesdk.Session(path, backend="reference")
    except edgesdk.EdgeSDKError as exc:
        assert "\n" not in str(exc)
        return
    with sess:
        sess.run({sess.input_names[0]: np.zeros(sess.input_shapes[sess.input_names[0]], np.float32)})
