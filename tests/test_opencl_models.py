"""Whole models on the opencl backend: the default model, the parity zoo (against ONNX Runtime in
fp32, against the reference fp16 model in fp16) and packed compressed models, whose compressed
weights must reach the device without being densified."""
from __future__ import annotations

import numpy as np
import pytest

import edgesdk
from conftest import assert_close, ort_run
from edgesdk.compress.recipe import Recipe
from edgesdk.models import default_model_path
from edgesdk.pack import pack_model

pytest.importorskip("pyopencl")
from edgesdk.backends.opencl import OpenCLBackend  # noqa: E402

pytestmark = pytest.mark.skipif(OpenCLBackend.unavailable_reason() is not None,
                                reason=str(OpenCLBackend.unavailable_reason()))
DEFAULT = str(default_model_path())


def _no_fallback(sess: edgesdk.Session) -> None:
    assert not sess._impl.fallback_reasons, sess._impl.fallback_reasons


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_default_model(precision: str) -> None:
    from edgesdk.datasets import load_dataset
    data = load_dataset("digits")
    ref = edgesdk.Session(DEFAULT, backend="reference", precision=precision)
    sess = edgesdk.Session(DEFAULT, backend="opencl", precision=precision)
    _no_fallback(sess)
    x = data.x[:1].astype(np.float32)
    rtol = 1e-4 if precision == "fp32" else 1e-2
    assert_close(sess.run({"input": x})["logits"], ref.run({"input": x})["logits"], rtol)


ZOO = ["lenet5", "oddnet", "squeezenet", "mobilenet_v3_style", "mobilenet_v2", "resnet18"]
BIG = {"mobilenet_v3_style", "mobilenet_v2", "resnet18"}


def _zoo_params():
    for name in ZOO:
        for precision in ("fp32", "fp16"):
            marks = [pytest.mark.slow] if name in BIG else []
            yield pytest.param(name, precision, id=f"{name}-{precision}", marks=marks)


@pytest.mark.parametrize("name,precision", list(_zoo_params()))
def test_parity_model(name: str, precision: str) -> None:
    from zoo import export_onnx, get_spec, sample_input
    shape = get_spec(name).correctness_shape
    path = export_onnx(name, input_shape=shape)
    x = sample_input(name, shape)
    sess = edgesdk.Session(path, backend="opencl", precision=precision)
    _no_fallback(sess)
    got = sess.run({sess.input_names[0]: x})
    if precision == "fp32":
        expected = dict(zip(sess.output_names, ort_run(path, {sess.input_names[0]: x})))
    else:
        ref = edgesdk.Session(path, backend="reference", precision="fp16")
        expected = ref.run({ref.input_names[0]: x})
    for out_name in sess.output_names:
        assert_close(got[out_name], expected[out_name], 1e-4 if precision == "fp32" else 1e-2,
                     what=f"{name}/{out_name}/{precision}")


RECIPES = {
    "clustered": {"default": {"cluster_bits": 4}},
    "clustered-per-channel-fp16": {"default": {"cluster_bits": 3, "per_channel": True, "fp16": True}},
    "pruned-csr": {"default": {"prune": 0.8}},
    "pruned-clustered": {"default": {"prune": 0.85, "cluster_bits": 4}},
    "nnm-shared": {"default": {"nnm_rate": 0.5}},
    "nnm-per-input-channel": {"default": {"nnm_rate": 0.5, "nnm_mode": "per_input_channel"}},
    "fp16": {"default": {"fp16": True}},
}
DENSE_KINDS = {"dense-fp32", "dense-fp16"}


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("recipe", RECIPES, ids=str)
def test_packed_compressed_model_runs_compressed(tmp_path, recipe: str, precision: str) -> None:
    from zoo import export_onnx, sample_input
    source = export_onnx("lenet5")
    package = tmp_path / f"{recipe}.edgepkg"
    pack_model(source, package, Recipe.from_dict(RECIPES[recipe]))
    sess = edgesdk.Session(package, backend="opencl", precision=precision)
    _no_fallback(sess)
    backend = sess._impl
    encoded = {name: t.encoding for name, t in sess.graph.tensors.items() if t.encoding is not None}
    assert encoded
    for record in backend.weights:
        enc = encoded.get(record.tensor)
        if enc is not None and enc.kind != "fp16":
            # a compressed tensor is on the device only in its stored parts, never as dense weights
            assert record.kind not in DENSE_KINDS, record
        if enc is not None and enc.kind == "fp16":
            assert record.kind == "dense-fp16"
    compressed = [n for n, e in encoded.items() if e.kind != "fp16"]
    if compressed:
        on_device = sum(r.nbytes for r in backend.weights if r.tensor in compressed)
        assert on_device < 0.6 * sum(sess.graph.tensors[n].nbytes for n in compressed)
    x = sample_input("lenet5")
    expected = edgesdk.Session(package, backend="reference", precision=precision).run({"input": x})
    got = sess.run({"input": x})
    for name in expected:
        assert_close(got[name], expected[name], 1e-4 if precision == "fp32" else 1e-2, what=f"{recipe}/{precision}")


def test_packed_default_model_with_its_recipe(tmp_path) -> None:
    package = tmp_path / "digits.edgepkg"
    pack_model(DEFAULT, package, Recipe.load(default_model_path().with_suffix(".recipe.json")))
    sess = edgesdk.Session(package, backend="opencl")
    _no_fallback(sess)
    x = np.random.default_rng(0).standard_normal((1, 1, 8, 8)).astype(np.float32)
    expected = edgesdk.Session(package, backend="reference").run({"input": x})["logits"]
    assert_close(sess.run({"input": x})["logits"], expected, 1e-4)
