"""Sanity tests of the parity model zoo itself (tests/zoo): the models, the exporter and its cache.

These check the zoo against PyTorch and ONNX Runtime only; the SDK's own parity tests build on it.
"""
from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import onnx
import onnxruntime as ort
import torch

import zoo
from zoo import export as zoo_export

ALL_MODELS = zoo.model_names()

# op types oddnet is meant to exercise (TorchScript exporter, default export)
ODDNET_OPS = {
    "Conv", "Pad", "LeakyRelu", "LRN", "Clip", "AveragePool", "MaxPool", "Sigmoid", "Tanh",
    "Gemm", "MatMul", "Add", "Sub", "Mul", "Div", "Softmax", "Transpose", "Reshape", "Flatten",
    "Concat", "Squeeze", "Unsqueeze", "ReduceMean", "Shape", "Gather",
}


def _ort_run(path: Path, x: np.ndarray) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {"input": x})


def _assert_parity(got: list[np.ndarray], ref: list[np.ndarray]) -> None:
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        assert g.shape == r.shape
        scale = float(np.abs(r).max())
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5 * max(scale, 1e-6))


def _op_counts(path: Path) -> Counter:
    return Counter(n.op_type for n in onnx.load(str(path)).graph.node)


def _nodes(path: Path, op_type: str) -> list[dict]:
    model = onnx.load(str(path))
    return [
        {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        for n in model.graph.node
        if n.op_type == op_type
    ]


# ------------------------------------------------------------------------------------------
# models


@pytest.mark.parametrize("name", ALL_MODELS)
def test_model_is_deterministic_eval_and_has_random_bn(name):
    spec = zoo.get_spec(name)
    m1, m2 = zoo.build(name), zoo.build(name)
    assert not m1.training
    s1, s2 = m1.state_dict(), m2.state_dict()
    assert s1.keys() == s2.keys()
    assert all(torch.equal(s1[k], s2[k]) for k in s1)
    bns = [m for m in m1.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert bns, f"{name} has no BatchNorm to fold"
    for bn in bns:
        assert bn.running_var.min() >= 0.5 and bn.running_var.max() <= 2.0
        assert bn.running_mean.abs().max() > 0 and not torch.allclose(bn.weight, torch.ones_like(bn.weight))
    x = zoo.sample_input(name)
    assert x.dtype == np.float32 and x.shape == spec.correctness_shape
    np.testing.assert_array_equal(x, zoo.sample_input(name))
    assert not np.array_equal(x, zoo.sample_input(name, seed=1))
    outs = zoo.torch_outputs(name, x)
    assert len(outs) == spec.num_outputs
    for o in outs:
        assert np.isfinite(o).all() and o.std() > 1e-3, "degenerate output"


def test_mobilenet_v2_accepts_small_and_odd_inputs():
    m = zoo.build("mobilenet_v2")
    with torch.no_grad():
        for hw in ((32, 32), (33, 47)):
            assert m(torch.zeros(1, 3, *hw)).shape == (1, 1000)


# ------------------------------------------------------------------------------------------
# export parity


@pytest.mark.parametrize("name", ALL_MODELS)
def test_torchscript_export_matches_torch(name):
    path = zoo.export_onnx(name)
    x = zoo.sample_input(name)
    got = _ort_run(path, x)
    _assert_parity(got, zoo.torch_outputs(name, x))
    ops = _op_counts(path)
    assert "BatchNormalization" not in ops  # folded by the exporter by default
    names = [o.name for o in onnx.load(str(path)).graph.output]
    assert names == zoo_export.output_names(name)


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "mobilenet_v3_style", "squeezenet"])
def test_global_pool_exports_as_global_average_pool(name):
    ops = _op_counts(zoo.export_onnx(name))
    assert ops["GlobalAveragePool"] >= 1


@pytest.mark.parametrize("name", ["mobilenet_v3_style", "oddnet"])
def test_keep_batchnorm_torchscript(name):
    path = zoo.export_onnx(name, keep_batchnorm=True)
    n_bn = sum(isinstance(m, torch.nn.BatchNorm2d) for m in zoo.build(name).modules())
    assert _op_counts(path)["BatchNormalization"] == n_bn
    for attrs in _nodes(path, "BatchNormalization"):
        assert attrs.get("training_mode", 0) == 0
    x = zoo.sample_input(name)
    _assert_parity(_ort_run(path, x), zoo.torch_outputs(name, x))


def test_dynamic_batch_torchscript():
    path = zoo.export_onnx("oddnet", dynamic_batch=True)
    x = np.concatenate([zoo.sample_input("oddnet", seed=s) for s in range(3)])
    _assert_parity(_ort_run(path, x), zoo.torch_outputs("oddnet", x))


# ------------------------------------------------------------------------------------------
# oddnet coverage


def test_oddnet_op_types_and_attributes():
    path = zoo.export_onnx("oddnet")
    ops = _op_counts(path)
    missing = ODDNET_OPS - set(ops)
    assert not missing, f"oddnet export lacks {sorted(missing)}"
    convs = _nodes(path, "Conv")
    assert any(c["strides"] == [2, 1] for c in convs)
    assert any(c["dilations"] == [2, 2] for c in convs)
    assert any(c["dilations"] == [2, 3] and c["group"] == 4 and c["pads"] == [1, 2, 1, 2] for c in convs)
    avg = _nodes(path, "AveragePool")
    assert any(a.get("count_include_pad", 0) == 0 and a["pads"] == [1, 1, 1, 1] for a in avg)
    assert any(a.get("ceil_mode", 0) == 1 for a in avg)
    assert any(m["kernel_shape"] != m["strides"] for m in _nodes(path, "MaxPool"))
    model = onnx.load(str(path))
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [1, 3, 37, 53]


def test_oddnet_unfolded_keeps_shape_chain():
    """x.view(x.size(0), -1) -> Shape -> Gather -> Unsqueeze -> Concat -> Reshape."""
    path = zoo.export_onnx("oddnet", constant_folding=False)
    model = onnx.load(str(path))
    producer = {o: n for n in model.graph.node for o in n.output}

    def chain(node):
        seq = [node.op_type]
        while node.input and node.input[0] in producer and len(seq) < 6:
            node = producer[node.input[0]]
            seq.append(node.op_type)
        return seq

    reshape_shapes = [producer.get(n.input[1]) for n in model.graph.node if n.op_type == "Reshape"]
    chains = [chain(p) for p in reshape_shapes if p is not None]
    assert ["Concat", "Unsqueeze", "Gather", "Shape"] in [c[:4] for c in chains], chains
    x = zoo.sample_input("oddnet")
    _assert_parity(_ort_run(path, x), zoo.torch_outputs("oddnet", x))


# ------------------------------------------------------------------------------------------
# dynamo exporter (optional)


@pytest.mark.parametrize("keep_bn", [False, True])
def test_dynamo_export_matches_torch(keep_bn):
    name = "oddnet"
    path = zoo.export_onnx(name, exporter="dynamo", keep_batchnorm=keep_bn)
    ops = _op_counts(path)
    assert ("BatchNormalization" in ops) == keep_bn
    assert {"LRN", "MatMul", "Gemm", "Softmax"} <= set(ops)
    x = zoo.sample_input(name)
    _assert_parity(_ort_run(path, x), zoo.torch_outputs(name, x))


def test_dynamo_dynamic_batch():
    path = zoo.export_onnx("lenet5", exporter="dynamo", dynamic_batch=True, keep_batchnorm=True)
    x = np.concatenate([zoo.sample_input("lenet5", seed=s) for s in range(3)])
    _assert_parity(_ort_run(path, x), zoo.torch_outputs("lenet5", x))


# ------------------------------------------------------------------------------------------
# cache


def test_cache_is_reused_and_keyed(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESDK_TEST_CACHE", str(tmp_path))
    p1 = zoo.export_onnx("lenet5")
    assert p1.parent == tmp_path / "onnx" and p1.exists()
    mtime = p1.stat().st_mtime_ns

    def _fail(*a, **k):
        raise AssertionError("re-exported despite a cached file")

    with monkeypatch.context() as mp:
        mp.setattr(zoo_export, "_export_torchscript", _fail)
        p2 = zoo.export_onnx("lenet5")
    assert p2 == p1 and p2.stat().st_mtime_ns == mtime

    p3 = zoo.export_onnx("lenet5", opset=13)
    assert p3 != p1 and p3.exists()
    assert zoo_export._onnx_opset(p3) == 13 and zoo_export._onnx_opset(p1) == 17
    for kwargs in ({"keep_batchnorm": True}, {"dynamic_batch": True}, {"input_shape": (2, 1, 32, 32)}):
        assert zoo.export_onnx("lenet5", **kwargs) not in (p1, p3)
    # no temp files left behind
    assert not [p for p in (tmp_path / "onnx").iterdir() if p.name.startswith(".")]


def test_cache_dir_default_and_override(monkeypatch, tmp_path):
    monkeypatch.delenv("EDGESDK_TEST_CACHE", raising=False)
    assert zoo.cache_dir() == Path(zoo_export.__file__).resolve().parent.parent / ".cache" / "onnx"
    monkeypatch.setenv("EDGESDK_TEST_CACHE", os.fspath(tmp_path))
    assert zoo.cache_dir() == tmp_path / "onnx"


def test_bad_arguments():
    with pytest.raises(KeyError):
        zoo.export_onnx("no_such_model")
    with pytest.raises(ValueError):
        zoo.export_onnx("lenet5", exporter="tflite")
    with pytest.raises(ValueError):
        zoo.sample_input("lenet5", (1, 32, 32))


# ------------------------------------------------------------------------------------------
# the embedded default model (tools/train_default_model.py output)


def test_default_model_files_are_consistent():
    import hashlib
    import json

    models_dir = Path(__file__).resolve().parent.parent / "edgesdk" / "models"
    onnx_path, meta_path = models_dir / "digits_lenet.onnx", models_dir / "digits_lenet.json"
    meta = json.loads(meta_path.read_text())
    assert meta["sha256"] == hashlib.sha256(onnx_path.read_bytes()).hexdigest()
    model = onnx.load(str(onnx_path))
    assert "BatchNormalization" in {n.op_type for n in model.graph.node}
    assert [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] == [meta["onnx_opset"]]
    assert [i.name for i in model.graph.input] == [meta["input"]["name"]]
    assert [o.name for o in model.graph.output] == [meta["output"]["name"]]

    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    split = meta["split"]
    x = (bunch.images.astype(np.float32) / 16.0)[:, None]
    _, x_te, _, y_te = train_test_split(
        x, bunch.target, test_size=split["test_fraction"], random_state=split["seed"], stratify=bunch.target
    )
    logits = _ort_run(onnx_path, x_te)[0]
    acc = float((logits.argmax(1) == y_te).mean())
    assert acc == pytest.approx(meta["test_accuracy"], abs=1e-6)
    assert acc >= 0.97
