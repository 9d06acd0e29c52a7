"""Cutting a graph at chosen outputs (detectors without their data-dependent post-processing)
and float16 ONNX models (float16 initializers, inputs and outputs), on every backend."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as nh
import pytest

import edgesdk
from edgesdk.loader import load_model
from edgesdk.pack import pack_model
from conftest import assert_close, ort_run
from ops.op_tester import Target

EDGESDK = str(Path(sys.executable).parent / "edgesdk")
R = np.random.default_rng(5)
BACKENDS = [Target("reference", "fp32"), Target("cpu", "fp32"), Target("opencl", "fp32"),
            Target("cpu", "fp16"), Target("opencl", "fp16")]


def detector(dtype=np.float32) -> onnx.ModelProto:
    """conv -> sigmoid "scores", then TopK and NonZero (data-dependent shapes) as exported NMS
    pre-steps do; float16 when ``dtype`` is: initializers, input and outputs."""
    elem = oh.np_dtype_to_tensor_dtype(np.dtype(dtype))
    w = nh.from_array(R.standard_normal((4, 3, 3, 3)).astype(dtype), "W")
    b = nh.from_array(R.standard_normal(4).astype(dtype), "B")
    k = nh.from_array(np.array([5], np.int64), "K")
    nodes = [oh.make_node("Conv", ["x", "W", "B"], ["feat"], pads=[1, 1, 1, 1]),
             oh.make_node("Sigmoid", ["feat"], ["scores"]),
             oh.make_node("Reshape", ["scores", "flat_shape"], ["flat"]),
             oh.make_node("TopK", ["flat", "K"], ["top_values", "top_indices"]),
             oh.make_node("NonZero", ["top_values"], ["kept"])]
    shape = nh.from_array(np.array([1, -1], np.int64), "flat_shape")
    graph = oh.make_graph(nodes, "detector", [oh.make_tensor_value_info("x", elem, [1, 3, 8, 8])],
                          [oh.make_tensor_value_info("kept", onnx.TensorProto.INT64, None)], [w, b, k, shape])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def cut_reference(model: onnx.ModelProto, outputs: list[str]) -> onnx.ModelProto:
    """The same model with ``outputs`` as its graph outputs, for ONNX Runtime."""
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {vi.name: vi for vi in inferred.graph.value_info}
    cut = onnx.ModelProto()
    cut.CopyFrom(model)
    del cut.graph.output[:]
    cut.graph.output.extend([types[name] for name in outputs])
    return cut


def test_data_dependent_ops_are_refused_with_the_cut_to_make():
    with pytest.raises(edgesdk.UnsupportedModelError) as err:
        edgesdk.Session(detector())
    message = str(err.value)
    assert "TopK has data-dependent output shapes" in message and "--outputs flat" in message
    assert "\n" not in message


@pytest.mark.parametrize("target", BACKENDS, ids=lambda t: t.name)
def test_a_cut_graph_runs_up_to_its_heads(target):
    model = detector()
    x = R.standard_normal((1, 3, 8, 8)).astype(np.float32)
    sess = target.session(model, outputs=["scores", "feat"])
    assert sess.output_names == ["scores", "feat"]
    assert [n.op for n in sess.graph.nodes] == ["Conv", "Sigmoid"] or len(sess.graph.nodes) <= 2
    got = sess.run({"x": x})
    expected = ort_run(cut_reference(model, ["scores", "feat"]), {"x": x})
    for name, want in zip(["scores", "feat"], expected):
        assert_close(got[name], want, 1e-4 if target.precision == "fp32" else 1e-2, what=name)


def test_cut_names_are_checked_in_one_line(tmp_path):
    for outputs in (["nope"], [], ["scores", "scores"]):
        with pytest.raises(edgesdk.UnsupportedModelError, match="outputs .*(not tensors|at least one)"):
            edgesdk.Session(detector(), outputs=outputs)
    with pytest.raises(edgesdk.UnsupportedModelError, match="list of tensor names"):
        edgesdk.Session(detector(), outputs="scores")


def test_a_package_and_a_graph_can_be_cut_too(tmp_path):
    model = detector()
    path = tmp_path / "heads.edgepkg"
    pack_model(model, path, outputs=["scores", "feat"])
    whole = edgesdk.Session(path)
    assert whole.output_names == ["scores", "feat"]
    cut = edgesdk.Session(path, outputs=["feat"])
    assert cut.output_names == ["feat"] and [n.op for n in cut.graph.nodes] == ["Conv"]
    x = R.standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.testing.assert_array_equal(cut.run({"x": x})["feat"], whole.run({"x": x})["feat"])


def test_cli_outputs_for_run_inspect_and_pack(tmp_path):
    onnx_path = tmp_path / "det.onnx"
    onnx_path.write_bytes(detector().SerializeToString())

    def cli(*args):
        return subprocess.run([EDGESDK, *args], capture_output=True, text=True, timeout=300)

    refused = cli("run", str(onnx_path), "--random")
    assert refused.returncode == 2 and "--outputs" in refused.stderr and "Traceback" not in refused.stderr
    ran = cli("run", str(onnx_path), "--random", "--outputs", "scores", "--json")
    assert ran.returncode == 0, ran.stderr
    assert list(json.loads(ran.stdout)["outputs"]) == ["scores"]
    inspected = cli("inspect", str(onnx_path), "--outputs", "feat,scores", "--json")
    assert inspected.returncode == 0, inspected.stderr
    packed = cli("pack", str(onnx_path), "--outputs", "scores", "-o", str(tmp_path / "d.edgepkg"))
    assert packed.returncode == 0, packed.stderr
    assert edgesdk.Session(str(tmp_path / "d.edgepkg")).output_names == ["scores"]
    bad = cli("run", str(onnx_path), "--random", "--outputs", "scores,")
    assert bad.returncode == 2 and "--outputs" in bad.stderr


@pytest.mark.parametrize("target", BACKENDS, ids=lambda t: t.name)
def test_float16_models_take_and_give_float16(target):
    model = detector(np.float16)
    x = R.standard_normal((1, 3, 8, 8)).astype(np.float16)
    sess = target.session(model, outputs=["scores"])
    assert sess.get_inputs()[0].type == "tensor(float16)" and sess.get_outputs()[0].type == "tensor(float16)"
    got = sess.run({"x": x})["scores"]
    expected, = ort_run(cut_reference(model, ["scores"]), {"x": x})
    assert got.dtype == expected.dtype == np.float16
    assert_close(got.astype(np.float32), expected.astype(np.float32), 1e-2, what="scores")
    with pytest.raises(edgesdk.InputError, match="expected dtype float16"):
        sess.run({"x": x.astype(np.float32)})


def test_a_package_that_lies_about_its_interface_dtypes_is_refused(tmp_path):
    graph = load_model(detector(np.float16), outputs=["scores"])
    assert graph.metadata["interface_dtypes"] == {"x": "float16", "scores": "float16"}
    from edgesdk.package import save_package
    for lie in ({"x": "int8"}, {"not_an_input": "float16"}, ["x"]):
        graph.metadata["interface_dtypes"] = lie
        save_package(graph, tmp_path / "lies.edgepkg")
        with pytest.raises(edgesdk.ModelLoadError, match="interface_dtypes"):
            edgesdk.Session(tmp_path / "lies.edgepkg")
