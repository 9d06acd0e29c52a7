"""The Session API ONNX Runtime users expect (issue 12): backend="auto", get_inputs/get_outputs,
run(output_names, feeds), close() and the context manager, and io bindings on every backend."""
from __future__ import annotations

import logging

import numpy as np
import pytest

import edgesdk
from edgesdk.backends import available_backends, backend_choices, get_backend
from edgesdk.backends.cpu import CPUBackend
from edgesdk.errors import BackendUnavailableError, InputError, SessionClosedError, UnsupportedModelError
from edgesdk.models import default_model_path

LENET = str(default_model_path())
HAS_CPU = "cpu" in available_backends()
BACKENDS = [b for b in ("reference", "cpu", "opencl") if b in available_backends()]


def one_line(info: pytest.ExceptionInfo) -> str:
    text = str(info.value)
    assert text and "\n" not in text
    return text


def two_outputs_model():
    """Two outputs of one input: y = Relu(x), z = Sigmoid(x)."""
    import onnx
    import onnx.helper as oh
    graph = oh.make_graph([oh.make_node("Relu", ["x"], ["y"]), oh.make_node("Sigmoid", ["x"], ["z"])], "two",
                          [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 4, 4])],
                          [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 3, 4, 4]),
                           oh.make_tensor_value_info("z", onnx.TensorProto.FLOAT, [1, 3, 4, 4])])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def x_for(sess: edgesdk.Session, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(sess.get_inputs()[0].shape).astype(np.float32)


# -- backend="auto" ----------------------------------------------------------------------------------
@pytest.mark.skipif(not HAS_CPU, reason="edgesdk._native not built")
def test_auto_is_the_default_and_picks_cpu() -> None:
    sess = edgesdk.Session(LENET)
    assert sess.backend == "cpu"
    assert "backend='cpu'" in repr(sess)


def test_auto_falls_back_to_reference_when_cpu_is_unavailable(monkeypatch) -> None:
    monkeypatch.setattr(CPUBackend, "unavailable_reason", classmethod(lambda cls: "native module not built"))
    sess = edgesdk.Session(LENET, backend="auto")
    assert sess.backend == "reference" and "backend='reference'" in repr(sess)


@pytest.mark.skipif(not HAS_CPU, reason="edgesdk._native not built")
def test_auto_falls_back_to_reference_when_cpu_cannot_build_the_model(monkeypatch, caplog) -> None:
    def refuse(self, plan, **options):
        raise UnsupportedModelError("cpu backend: no kernel for this variant")

    monkeypatch.setattr(CPUBackend, "__init__", refuse)
    with caplog.at_level(logging.INFO, logger="edgesdk.backends"):
        sess = edgesdk.Session(LENET)
    assert sess.backend == "reference"
    assert "no kernel for this variant" in caplog.text


def test_auto_is_a_choice_but_not_a_class() -> None:
    assert backend_choices()[0] == "auto" and "reference" in backend_choices()
    with pytest.raises(BackendUnavailableError) as info:
        get_backend("auto")
    assert "Session()" in one_line(info)
    with pytest.raises(BackendUnavailableError) as info:
        edgesdk.Session(LENET, backend="tpu")
    assert "choose auto or one of" in one_line(info)


# -- get_inputs / get_outputs and the run call styles -------------------------------------------------
def test_get_inputs_and_outputs_match_onnxruntime() -> None:
    ort = pytest.importorskip("onnxruntime")
    model = two_outputs_model()
    sess = edgesdk.Session(model)
    ort_sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for ours, theirs in [(sess.get_inputs(), ort_sess.get_inputs()), (sess.get_outputs(), ort_sess.get_outputs())]:
        assert [(a.name, a.shape, a.type) for a in ours] == [(a.name, a.shape, a.type) for a in theirs]
    assert sess.get_inputs()[0].type == "tensor(float)"


def test_run_call_styles() -> None:
    sess = edgesdk.Session(two_outputs_model(), backend="reference")
    x = x_for(sess)
    y, z = sess.run({"x": x})["y"], sess.run({"x": x})["z"]
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    assert list(sess.run({"x": x})) == ["y", "z"]
    assert list(sess.run({"x": x}, ["z"])) == ["z"]
    assert list(sess.run({"x": x}, output_names=["z"])) == ["z"]
    assert list(sess.run(feeds={"x": x})) == ["y", "z"]
    listed = sess.run(None, {"x": x})  # ONNX Runtime's order
    assert isinstance(listed, list) and np.array_equal(listed[0], y) and np.array_equal(listed[1], z)
    only_z = sess.run(["z"], {"x": x})
    assert len(only_z) == 1 and np.array_equal(only_z[0], z)
    assert np.array_equal(sess.run(output_names=["z", "y"], input_feed={"x": x})[1], y)
    assert len(sess.run(None, {"x": x}, None)) == 2  # run_options=None as ORT code passes it
    assert len(sess.run([], {"x": x})) == 2  # [] is every output, as in ONNX Runtime


def test_run_matches_onnxruntime_call_for_call() -> None:
    ort = pytest.importorskip("onnxruntime")
    model = two_outputs_model()
    sess = edgesdk.Session(model)
    ort_sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = x_for(sess, 1)
    for names in (None, [], ["z"], ["z", "y"]):
        ours, theirs = sess.run(names, {"x": x}), ort_sess.run(names, {"x": x})
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            np.testing.assert_allclose(a, b, rtol=1e-6)


@pytest.mark.parametrize("call,words", [
    (lambda s, x: s.run("y", {"x": x}), "output_names must be None or a list"),
    (lambda s, x: s.run(["w"], {"x": x}), "unknown output names ['w']"),
    (lambda s, x: s.run({"x": x}, ["w"]), "unknown output names ['w']"),
    (lambda s, x: s.run(None), "needs the feeds"),
    (lambda s, x: s.run(None, {"x": x}, {"tag": 1}), "run_options is not supported"),
    (lambda s, x: s.run({"x": x}, ["y"], output_names=["y"]), "output_names given twice"),
    (lambda s, x: s.run(None, {"x": x}, None, None), "Session.run takes"),
    (lambda s, x: s.run(None, [x]), "feeds must be a dict"),
])
def test_bad_run_calls_are_typed_one_line_errors(call, words) -> None:
    sess = edgesdk.Session(two_outputs_model(), backend="reference")
    with pytest.raises(InputError) as info:
        call(sess, x_for(sess))
    assert words in one_line(info)


# -- close ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_closed_session_raises_a_typed_error(backend: str) -> None:
    sess = edgesdk.Session(LENET, backend=backend)
    x = x_for(sess)
    expected = sess.run({"input": x})["logits"]
    binding = sess.io_binding()
    sess.close()
    sess.close()  # idempotent
    assert sess.closed and "closed" in repr(sess)
    for call in (lambda: sess.run({"input": x}), lambda: sess.profile({"input": x}), sess.io_binding,
                 binding.run, lambda: binding.input("input")):
        with pytest.raises(SessionClosedError) as info:
            call()
        assert "closed" in one_line(info)
    with edgesdk.Session(LENET, backend=backend) as again:
        assert np.array_equal(again.run({"input": x})["logits"], expected)
    assert again.closed


# -- io bindings ------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_io_binding_on_every_backend(backend: str) -> None:
    sess = edgesdk.Session(LENET, backend=backend)
    with sess.io_binding() as binding:
        assert binding.input_names == ["input"] and binding.output_names == ["logits"]
        with pytest.raises(InputError, match="call binding.run"):
            binding.output("logits")
        for seed in range(3):
            x = x_for(sess, seed)
            binding.input("input")[...] = x
            binding.run()
            out = binding.output("logits")
            assert not out.flags.writeable
            assert np.array_equal(out, sess.run({"input": x})["logits"])
        with pytest.raises(InputError) as info:
            binding.input("logits")
        assert "unknown input 'logits'" in one_line(info)
    with pytest.raises(SessionClosedError):
        binding.run()


@pytest.mark.parametrize("backend", ["auto", "reference"])
def test_bad_precision_fails_before_the_model_is_loaded(backend: str, tmp_path) -> None:
    with pytest.raises(BackendUnavailableError) as info:
        edgesdk.Session(tmp_path / "not_there.onnx", backend=backend, precision="int4")
    assert "precision 'int4'" in one_line(info)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_constant_and_passthrough_outputs_on_every_backend(backend: str, precision: str) -> None:
    """Outputs that are a constant (folded at import) or a graph input itself: what "auto" now
    hands to the cpu backend, which could not produce them before (KeyError)."""
    rng = np.random.default_rng(4)
    graph = edgesdk.Graph("consts")
    graph.add_input("x", (2, 3))
    graph.add_constant("c", rng.standard_normal((3,)).astype(np.float32))
    graph.add_node("Add", ["x", "c"], ["y"])
    graph.outputs += ["y", "c", "x"]
    x = rng.standard_normal((2, 3)).astype(np.float32)
    expected = edgesdk.Session(graph, backend="reference", precision=precision).run({"x": x})
    try:
        sess = edgesdk.Session(graph, backend=backend, precision=precision)
    except UnsupportedModelError as exc:  # the opencl backend refuses constant outputs in one line
        assert backend == "opencl" and "constant" in str(exc)
        return
    got = sess.run({"x": x})
    assert list(got) == ["y", "c", "x"]
    np.testing.assert_array_equal(got["c"], expected["c"])
    for name in ("x", "y"):  # fp16: the backends round inputs to storage differently
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-6 if precision == "fp32" else 1e-2)
