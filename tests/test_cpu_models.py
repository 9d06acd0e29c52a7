"""The cpu backend on whole models: the parity zoo against ONNX Runtime, every ISA this CPU runs,
thread counts, packed compressed models against the reference backend, and its errors."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import edgesdk
from conftest import assert_close, ort_run
from edgesdk import _native
from edgesdk.backends import get_backend
from edgesdk.compress.encodings import Clustered
from edgesdk.compress.recipe import Recipe
from edgesdk.errors import BackendUnavailableError, InputError
from edgesdk.models import default_model_path
from edgesdk.pack import pack_model
from zoo import export_onnx, get_spec, sample_input

ROOT = Path(__file__).resolve().parents[1]
MODELS = ["mobilenet_v2", "resnet18", "mobilenet_v3_style", "squeezenet", "lenet5", "oddnet"]
DIGITS_RECIPE = ROOT / "edgesdk" / "models" / "digits_lenet.recipe.json"


def zoo_model(name: str, exporter: str = "torchscript", raw: bool = False) -> tuple[str, np.ndarray]:
    shape = get_spec(name).correctness_shape
    path = export_onnx(name, input_shape=shape, exporter=exporter, keep_batchnorm=raw, constant_folding=not raw)
    return path, sample_input(name, shape)


def run_cpu(model, x: np.ndarray, **options) -> dict[str, np.ndarray]:
    sess = edgesdk.Session(model, backend="cpu", **options)
    return sess.run({sess.input_names[0]: x})


@pytest.mark.parametrize("exporter,raw", [("torchscript", False), ("torchscript", True), ("dynamo", False)],
                         ids=["torchscript", "torchscript-raw", "dynamo"])
@pytest.mark.parametrize("name", MODELS)
def test_parity_models_match_onnxruntime(name: str, exporter: str, raw: bool) -> None:
    path, x = zoo_model(name, exporter, raw)
    sess = edgesdk.Session(path, backend="cpu")
    got = sess.run({sess.input_names[0]: x})
    for out_name, expected in zip(sess.output_names, ort_run(path, {sess.input_names[0]: x})):
        assert_close(got[out_name], expected, rtol=1e-4, what=f"{name}/{out_name}")
    # Only LRN (oddnet) has no native kernel; everything else must not fall back.
    assert set(sess._impl.fallback_reasons) <= {n.name for n in sess.graph.nodes if n.op == "LRN"}


@pytest.mark.parametrize("name", ["mobilenet_v3_style", "squeezenet", "oddnet"])
def test_fp16_precision_follows_the_reference_policy(name: str) -> None:
    path, x = zoo_model(name)
    ref = edgesdk.Session(path, backend="reference", precision="fp16")
    expected = ref.run({ref.input_names[0]: x})
    got = run_cpu(path, x, precision="fp16")
    for out_name in ref.output_names:
        assert_close(got[out_name], expected[out_name], rtol=1e-2, what=out_name)


@pytest.fixture
def forced_isa():
    """Force a kernel level process-wide for one test, then restore the default."""
    def force(isa: str) -> None:
        if isa not in _native.kernels.supported_isas():
            pytest.skip(f"this CPU cannot run the {isa} kernels")
        _native.kernels.set_isa(isa)
    yield force
    _native.kernels.reset_isa()


@pytest.mark.parametrize("isa", ["scalar", "avx2", "avx512"])
@pytest.mark.parametrize("name", ["mobilenet_v3_style", "oddnet"])
def test_every_isa_this_cpu_runs(name: str, isa: str, forced_isa) -> None:
    forced_isa(isa)
    path, x = zoo_model(name)
    sess = edgesdk.Session(path, backend="cpu")
    assert sess._impl.isa == isa
    got = sess.run({sess.input_names[0]: x})
    for out_name, expected in zip(sess.output_names, ort_run(path, {sess.input_names[0]: x})):
        assert_close(got[out_name], expected, rtol=1e-4, what=f"{name}/{out_name} on {isa}")


def test_isa_override_from_the_environment() -> None:
    """EDGESDK_CPU_ISA picks the kernels for the whole process (read once, at first use)."""
    code = ("import edgesdk, numpy as np; from edgesdk.models import default_model_path as d; "
            "s = edgesdk.Session(str(d()), backend='cpu'); x = np.ones(s.input_shapes[s.input_names[0]], np.float32); "
            "print(s._impl.isa, float(s.run({s.input_names[0]: x})[s.output_names[0]].sum()))")
    results = {}
    for isa in _native.kernels.supported_isas():
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                             env={**os.environ, "EDGESDK_CPU_ISA": isa}, check=True).stdout.split()
        assert out[0] == isa
        results[isa] = float(out[1])
    assert np.allclose(list(results.values()), results["scalar"], rtol=1e-4)


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_style", "squeezenet"])
def test_one_and_two_threads_agree(name: str) -> None:
    path, x = zoo_model(name)
    one, two = run_cpu(path, x, threads=1), run_cpu(path, x, threads=2)
    for out_name in one:  # threads split output tiles, never a sum: identical bits
        np.testing.assert_array_equal(one[out_name], two[out_name])


def test_default_threads_are_the_physical_cores() -> None:
    sess = edgesdk.Session(str(default_model_path()), backend="cpu")
    assert sess._impl.thread_count == edgesdk.backends.cpu.physical_cores() >= 1


def test_runs_reuse_the_arena_and_return_fresh_outputs() -> None:
    path, x = zoo_model("squeezenet")
    sess = edgesdk.Session(path, backend="cpu")
    first = sess.run({sess.input_names[0]: x})
    second = sess.run({sess.input_names[0]: x * 2})
    third = sess.run({sess.input_names[0]: x})
    name = sess.output_names[0]
    np.testing.assert_array_equal(first[name], third[name])
    assert not np.array_equal(first[name], second[name])
    impl = sess._impl
    total = sum(sess.graph.tensors[n].nbytes for step in sess.plan.steps for n in step.node.outputs if n)
    assert impl.arena_bytes < total / 2  # buffers are shared along the plan's lifetimes


# -- compressed models ----------------------------------------------------------------------------
RECIPES = {
    "digits-default": json.loads(DIGITS_RECIPE.read_text()),
    "nnm-shared": {"default": {"nnm_rate": 0.5}},
    "nnm-per-input-fp16": {"default": {"nnm_rate": 0.5, "nnm_mode": "per_input_channel", "fp16": True}},
    "cluster4-channel": {"default": {"cluster_bits": 4, "per_channel": True}},
    "cluster3-pruned-fp16": {"default": {"cluster_bits": 3, "prune": 0.5, "fp16": True}},
}


def _packed(tmp_path: Path, source: str, recipe: dict) -> str:
    out = tmp_path / "model.edgepkg"
    pack_model(source, out, Recipe.from_dict(recipe))
    return str(out)


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("model", ["digits", "oddnet"])
def test_packed_compressed_models_match_the_reference(tmp_path, model: str, recipe: str) -> None:
    source = str(default_model_path()) if model == "digits" else zoo_model("oddnet")[0]
    path = _packed(tmp_path, source, RECIPES[recipe])
    ref = edgesdk.Session(path, backend="reference")
    x = np.random.default_rng(3).standard_normal(ref.input_shapes[ref.input_names[0]]).astype(np.float32)
    expected = ref.run({ref.input_names[0]: x})
    got = run_cpu(path, x)
    for name in ref.output_names:
        assert_close(got[name], expected[name], rtol=1e-4, what=f"{model}/{recipe}/{name}")


def test_clustered_layers_never_materialise_dense_weights(tmp_path, monkeypatch) -> None:
    path = _packed(tmp_path, str(default_model_path()), {"default": {"cluster_bits": 4, "fp16": True}})
    ref = edgesdk.Session(path, backend="reference")
    x = np.random.default_rng(4).standard_normal(ref.input_shapes[ref.input_names[0]]).astype(np.float32)
    expected = ref.run({ref.input_names[0]: x})

    def refuse(self):
        raise AssertionError(f"clustered weights {self.shape} decoded to dense")
    monkeypatch.setattr(Clustered, "decode", refuse)
    # optimize=False: a package is optimised when packed, and the shared fold_constants pass reads
    # (so decodes) every constant input, weights included, before any backend sees the graph.
    sess = edgesdk.Session(path, backend="cpu", optimize=False)
    clustered = [t for t in sess.graph.tensors.values() if isinstance(t.encoding, Clustered)]
    assert len(clustered) >= 3 and all(t._data is None for t in clustered)
    notes = [s.note for s in sess._impl.steps if s.op in ("Conv", "Gemm")]
    assert all(note.startswith("clustered") for note in notes), notes
    got = sess.run({sess.input_names[0]: x})
    assert_close(got[sess.output_names[0]], expected[ref.output_names[0]], rtol=1e-4)


# -- errors ---------------------------------------------------------------------------------------
def test_bad_inputs_raise_typed_one_line_errors() -> None:
    sess = edgesdk.Session(str(default_model_path()), backend="cpu")
    name, shape = sess.input_names[0], sess.input_shapes[sess.input_names[0]]
    for feeds in ({name: np.zeros(shape, np.float64)}, {name: np.zeros(shape[:-1], np.float32)}, {"nope": 1}):
        with pytest.raises(InputError) as info:
            sess.run(feeds)
        assert "\n" not in str(info.value)
    with pytest.raises(BackendUnavailableError, match="precision 'int8'"):
        edgesdk.Session(str(default_model_path()), backend="cpu", precision="int8")
    with pytest.raises(InputError, match="threads"):
        edgesdk.Session(str(default_model_path()), backend="cpu", threads=0)


@pytest.mark.parametrize("value", ["fast", "-5", "1.5"])
def test_bad_spin_setting_is_one_clear_error(monkeypatch, value: str) -> None:
    monkeypatch.setenv("EDGESDK_CPU_SPIN_US", value)
    with pytest.raises(BackendUnavailableError, match="EDGESDK_CPU_SPIN_US.*whole number") as info:
        edgesdk.Session(str(default_model_path()), backend="cpu")
    assert "\n" not in str(info.value)


def test_never_spinning_pool_gives_the_same_bits(tmp_path: Path) -> None:
    """EDGESDK_CPU_SPIN_US=0: every hand-off goes through the sleeping path (a fresh process per
    setting: the native pool reads it once). GEMMs big enough to split over 2 threads, back to back."""
    code = (
        "import sys, numpy as np\n"
        "from edgesdk._native import kernels as k\n"
        "rng = np.random.default_rng(0)\n"
        "a = rng.random((300, 256), dtype=np.float32); w = rng.random((200, 256), dtype=np.float32)\n"
        "packed = k.pack_gemm(w, None, 'nk', False)\n"
        "outs = []\n"
        "for _ in range(200):\n"
        "    out = np.empty((300, 200), np.float32); k.gemm(a, packed, out, 'relu', None, None, 2); outs.append(out)\n"
        "assert all(np.array_equal(o, outs[0]) for o in outs)\n"
        "np.save(sys.argv[1], outs[0])\n")
    results = []
    for spin in ("0", "1000"):
        target = tmp_path / f"spin{spin}.npy"
        env = {**os.environ, "EDGESDK_CPU_SPIN_US": spin}
        subprocess.run([sys.executable, "-c", code, str(target)], env=env, check=True, timeout=120)
        results.append(np.load(target))
    assert np.array_equal(results[0], results[1])
    rng = np.random.default_rng(0)
    a, w = rng.random((300, 256), dtype=np.float32), rng.random((200, 256), dtype=np.float32)
    np.testing.assert_allclose(results[0], np.maximum(a @ w.T, 0), rtol=1e-4)


def test_missing_extension_makes_the_backend_unavailable(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "edgesdk._native", None)  # importing it raises ImportError
    with pytest.raises(BackendUnavailableError, match="cpu.*unavailable.*pip install"):
        get_backend("cpu")
