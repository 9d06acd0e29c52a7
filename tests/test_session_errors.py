"""The Session contract and the one-line typed errors for bad input."""
from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper
import pytest

import edgesdk
from edgesdk.errors import (BackendUnavailableError, InputError, ModelLoadError, UnsupportedModelError,
                            UnsupportedOperatorError)
from onnx_builders import single_node_model


def _relu(shape=(1, 3, 4, 4), opset=17):
    return single_node_model("Relu", shape, opset=opset)


def _one_line(exc_info) -> str:
    text = str(exc_info.value)
    assert "\n" not in text and text
    return text


def test_session_properties_and_run():
    sess = edgesdk.Session(_relu())
    assert sess.input_names == ["x"] and sess.output_names == ["y"]
    assert sess.input_shapes == {"x": (1, 3, 4, 4)}
    x = np.linspace(-1, 1, 48, dtype=np.float32).reshape(1, 3, 4, 4)
    np.testing.assert_array_equal(sess.run({"x": x})["y"], np.maximum(x, 0))


@pytest.mark.parametrize("feeds,words", [
    ({"z": np.zeros((1, 3, 4, 4), np.float32)}, ["expected inputs ['x']", "got ['z']"]),
    ({"x": np.zeros((1, 3, 4, 5), np.float32)}, ["expected shape (1, 3, 4, 4)", "got (1, 3, 4, 5)"]),
    ({"x": np.zeros((1, 3, 4, 4), np.float64)}, ["expected dtype float32", "got float64"]),
    ({"x": [[1.0]]}, ["expected a numpy array"]),
])
def test_wrong_feeds_raise_value_errors(feeds, words):
    sess = edgesdk.Session(_relu())
    with pytest.raises(ValueError) as info:
        sess.run(feeds)
    assert isinstance(info.value, InputError)
    assert all(w in _one_line(info) for w in words), str(info.value)


def test_unknown_backend_lists_available():
    with pytest.raises(BackendUnavailableError) as info:
        edgesdk.Session(_relu(), backend="tpu")
    assert "unknown backend 'tpu'" in _one_line(info) and "reference" in str(info.value)


def test_bad_precision_and_threads():
    with pytest.raises(BackendUnavailableError, match="precision 'int4'"):
        edgesdk.Session(_relu(), precision="int4")
    with pytest.raises(InputError, match="threads"):
        edgesdk.Session(_relu(), threads=0)


def test_threads_limit_runs():
    x = np.ones((1, 3, 4, 4), np.float32)
    assert edgesdk.Session(_relu(), threads=1).run({"x": x})["y"].sum() == 48


def test_unsupported_operator_names_op_node_and_list():
    model = single_node_model("Einsum", (2, 3), equation="ij->ji")
    model.graph.node[0].name = "my_einsum"
    with pytest.raises(UnsupportedOperatorError) as info:
        edgesdk.Session(model)
    text = _one_line(info)
    assert "'Einsum'" in text and "'my_einsum'" in text and "Conv" in text and "Softmax" in text
    assert info.value.op_type == "Einsum" and "Gemm" in info.value.supported


def test_custom_domain_is_unsupported():
    model = single_node_model("Relu", (2, 3))
    model.graph.node[0].domain = "com.microsoft"
    model.opset_import.append(oh.make_opsetid("com.microsoft", 1))
    with pytest.raises(UnsupportedOperatorError, match="com.microsoft.Relu"):
        edgesdk.Session(model)


def test_missing_corrupt_and_wrong_type_files(tmp_path):
    with pytest.raises(ModelLoadError, match="not found") as info:
        edgesdk.Session(tmp_path / "nope.onnx")
    _one_line(info)
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\xffthis is not protobuf" * 10)
    with pytest.raises(ModelLoadError) as info:
        edgesdk.Session(bad)
    _one_line(info)
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(_relu().SerializeToString()[:40])
    with pytest.raises(ModelLoadError):
        edgesdk.Session(truncated)
    text = tmp_path / "model.txt"  # files are read by content: not a package, so ONNX, which it is not
    text.write_text("hello")
    with pytest.raises(ModelLoadError, match="not a readable ONNX model"):
        edgesdk.Session(text)
    with pytest.raises(ModelLoadError, match="cannot load a model from a int"):
        edgesdk.Session(42)


def test_dynamic_dims_need_input_shapes():
    model = _relu(("N", 3, "H", "W"))
    with pytest.raises(UnsupportedModelError, match="input_shapes") as info:
        edgesdk.Session(model)
    _one_line(info)
    sess = edgesdk.Session(model, input_shapes={"x": (2, 3, 5, 6)})
    assert sess.output_shapes == {"y": (2, 3, 5, 6)}
    with pytest.raises(UnsupportedModelError, match="does not fit"):
        edgesdk.Session(model, input_shapes={"x": (2, 4, 5, 6)})
    with pytest.raises(UnsupportedModelError, match="not model inputs"):
        edgesdk.Session(model, input_shapes={"bogus": (1,)})


def test_dynamic_batch_defaults_to_one():
    assert edgesdk.Session(_relu(("batch", 3, 4, 4))).input_shapes == {"x": (1, 3, 4, 4)}


def test_opset_out_of_range():
    with pytest.raises(UnsupportedModelError, match="opset 99"):
        edgesdk.Session(_relu(opset=99))


def test_non_float_input_refused():
    model = _relu()
    model.graph.input[0].type.tensor_type.elem_type = onnx.TensorProto.INT32
    with pytest.raises(UnsupportedModelError, match="float32"):
        edgesdk.Session(model)


def test_runtime_shape_input_refused_clearly():
    x = oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 6])
    s = oh.make_tensor_value_info("s", onnx.TensorProto.INT64, [2])
    graph = oh.make_graph([oh.make_node("Reshape", ["x", "s"], ["y"])], "g", [x, s],
                          [oh.make_empty_tensor_value_info("y")])
    with pytest.raises(UnsupportedModelError):
        edgesdk.Session(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]))


def test_fp16_reference_rounds_storage():
    model = single_node_model("Mul", (1, 4), {"c": np.array([1.0001, 3.0, 1 / 3, 7.0], np.float32)})
    x = np.array([[1.0, 1.0, 1.0, 1e-3]], np.float32)
    got = edgesdk.Session(model, backend="reference", precision="fp16").run({"x": x})["y"]
    expected = (x.astype(np.float16).astype(np.float32) *
                np.array([1.0001, 3.0, 1 / 3, 7.0], np.float32).astype(np.float16).astype(np.float32))
    np.testing.assert_array_equal(got, expected.astype(np.float16).astype(np.float32))


def test_redefined_tensor_is_refused():
    model = single_node_model("Add", (1, 4), {"c": np.ones(4, np.float32)})
    model.graph.node.append(oh.make_node("Relu", ["x"], ["c"]))  # "c" is already an initializer
    with pytest.raises(ModelLoadError, match="redefines tensor 'c'") as info:
        edgesdk.Session(model)
    _one_line(info)


@pytest.mark.parametrize("to,ok", [(onnx.TensorProto.FLOAT, True), (onnx.TensorProto.INT32, False)])
def test_runtime_cast(to, ok):
    model = single_node_model("Cast", (2, 3), to=to)
    if ok:
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        np.testing.assert_array_equal(edgesdk.Session(model).run({"x": x})["y"], x)
    else:
        with pytest.raises(UnsupportedModelError, match="casting a run-time tensor"):
            edgesdk.Session(model)


def test_conv_kernel_shape_must_match_the_weights():
    # found by the byte-flip fuzz of the default model: a flipped kernel_shape made shape inference
    # and the kernels disagree
    w = np.ones((4, 3, 3, 3), np.float32)
    model = single_node_model("Conv", (1, 3, 8, 8), {"W": w}, kernel_shape=[2, 3], pads=[1, 1, 1, 1])
    with pytest.raises(UnsupportedModelError, match=r"kernel_shape \[2, 3\] does not match the weights' \[3, 3\]"):
        edgesdk.Session(model)
