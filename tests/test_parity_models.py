"""Whole models written in plain PyTorch, exported to ONNX at test time (cached), run by the
reference backend and compared with ONNX Runtime on the same file (rtol 1e-4)."""
from __future__ import annotations

import pytest

import edgesdk
from conftest import assert_close, ort_run
from zoo import export_onnx, get_spec, sample_input

MODELS = ["mobilenet_v2", "resnet18", "mobilenet_v3_style", "squeezenet", "lenet5", "oddnet"]
BIG = {"mobilenet_v2", "resnet18"}

# (exporter, keep BatchNormalization nodes and unfolded constant chains for our passes to handle)
VARIANTS = [("torchscript", False), ("torchscript", True), ("dynamo", False)]


def _params():
    for name in MODELS:
        for exporter, raw in VARIANTS:
            marks = [pytest.mark.slow] if name in BIG and (exporter == "dynamo" or raw) else []
            yield pytest.param(name, exporter, raw, id=f"{name}-{exporter}{'-raw' if raw else ''}", marks=marks)


@pytest.mark.parametrize("name,exporter,raw", list(_params()))
def test_matches_onnxruntime(name: str, exporter: str, raw: bool) -> None:
    shape = get_spec(name).correctness_shape
    path = export_onnx(name, input_shape=shape, exporter=exporter, keep_batchnorm=raw,
                       constant_folding=not raw)
    x = sample_input(name, shape)
    sess = edgesdk.Session(path, backend="reference")
    got = sess.run({sess.input_names[0]: x})
    expected = ort_run(path, {sess.input_names[0]: x})
    for out_name, exp in zip(sess.output_names, expected):
        assert_close(got[out_name], exp, rtol=1e-4, what=f"{name}/{out_name}")
    if raw:  # BatchNorm was in the file: the passes must have folded every one of them
        assert sess.optimization_stats["fold_batchnorm"] > 0
        assert "BatchNormalization" not in {n.op for n in sess.graph.nodes}


SWEEP = ([("torchscript", opset, True) for opset in range(11, 21)]
         + [("dynamo", opset, False) for opset in (18, 19, 20, 21)])


@pytest.mark.parametrize("name", ["oddnet", "mobilenet_v3_style"])
@pytest.mark.parametrize("exporter,opset,raw", SWEEP, ids=lambda v: str(v))
def test_opset_sweep(name: str, exporter: str, opset: int, raw: bool) -> None:
    """Every opset from 11 to 21 that an exporter emits imports and matches ONNX Runtime."""
    path = export_onnx(name, exporter=exporter, opset=opset, keep_batchnorm=raw, constant_folding=not raw)
    x = sample_input(name)
    sess = edgesdk.Session(path, backend="reference")
    assert sess.graph.metadata["opset"] == opset
    got = sess.run({sess.input_names[0]: x})
    for out_name, exp in zip(sess.output_names, ort_run(path, {sess.input_names[0]: x})):
        assert_close(got[out_name], exp, rtol=1e-4, what=f"{name}@{opset}/{out_name}")
