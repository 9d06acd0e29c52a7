"""LQ-Nets binary-coded quantization (issue 16): the numbers of edgesdk.compress.lq, the LQBinary
encoding, the LQQuantize op, recipes and post-training packing. The bitwise kernels have their
own tests (test_native_lq.py, test_opencl_lq.py); the golden vector runs here on every backend."""
from __future__ import annotations

import numpy as np
import pytest

from edgesdk import Session
from edgesdk.backends import available_backends
from edgesdk.compress import LayerSettings, Recipe, RecipeError, pack_model
from edgesdk.compress import lq
from edgesdk.compress.encode import encode_lq, lq_as_clustered, lq_from_codes
from edgesdk.compress.encodings import EncodingError, LQBinary
from edgesdk.compress.lq_layers import insert_quantizer
from edgesdk.datasets import digits_split
from edgesdk.errors import InputError
from edgesdk.graph import Graph
from edgesdk.models import default_model_path
from edgesdk.package import load_package, save_package

BACKENDS = [b for b in ("reference", "cpu", "opencl") if b in available_backends()]

# The LQ-Nets thesis's unit test (seed 002 §2.3, from the fork's LQFullyConnected.test.cpp). Its
# input scales a = (0.12, 1.7) read bits as -1/+1; here activations are offset + sum alpha_i bit_i,
# the same levels with alpha = 2a and offset = -sum(a).
GOLDEN_X = np.array([0.5, 1.2, 2.3, -1.0, 0.0], np.float32)
GOLDEN_ALPHA, GOLDEN_OFFSET = np.array([0.24, 3.4], np.float32), -1.82
GOLDEN_BETA = np.array([[0.11, 0.23, 0.31], [0.23, 0.41, 0.53], [0.13, 0.22, 0.46], [0.32, 0.33, 0.35]], np.float32)
GOLDEN_PLANES = np.array([[7, 13, 20], [4, 15, 3], [31, 17, 11], [22, 19, 2]], np.uint32)[:, :, None]
GOLDEN_BIAS = np.array([-1.1, -5.0, -0.3, 2.8], np.float32)
GOLDEN_CODES = [2, 2, 3, 1, 1]
GOLDEN_WITH_BIAS = [-0.2014, -0.1546, 0.1526, 4.2936]
GOLDEN_RELU_NO_BIAS = [0.8986, 4.8454, 0.4526, 1.4936]


def golden_graph(bias: bool, relu: bool) -> Graph:
    """The thesis's LQFullyConnected as edgesdk stores it: LQQuantize -> Gemm (LQBinary weights)."""
    from edgesdk.runtime.activations import Activation
    g = Graph("golden")
    g.add_input("x", (1, 5))
    g.add_encoded("w", LQBinary((4, 5), GOLDEN_BETA, GOLDEN_PLANES, 3))
    inputs = ["x", "w"]
    if bias:
        g.add_constant("b", GOLDEN_BIAS)
        inputs.append("b")
    attrs = {"alpha": 1.0, "beta": 1.0, "transA": False, "transB": True}
    if relu:
        attrs["fused_activation"] = Activation("Relu")
    gemm = g.add_node("Gemm", inputs, ["y"], name="fc", **attrs)
    g.add_tensor("y", (1, 4), np.float32)
    g.outputs = ["y"]
    insert_quantizer(g, gemm, GOLDEN_ALPHA, GOLDEN_OFFSET)
    return g


def test_golden_codes():
    thresholds, codes = lq.level_table(lq.activation_levels(GOLDEN_ALPHA, GOLDEN_OFFSET))
    np.testing.assert_allclose(thresholds, [-1.70, 0.0, 1.70], atol=1e-6)
    assert lq.encode_nearest(GOLDEN_X, thresholds, codes).tolist() == GOLDEN_CODES


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bias, relu, expected", [(True, False, GOLDEN_WITH_BIAS), (False, True, GOLDEN_RELU_NO_BIAS)])
def test_golden_vector_on_every_backend(backend, bias, relu, expected):
    session = Session(golden_graph(bias, relu), backend=backend)
    y = session.run({"x": GOLDEN_X[None]})["y"]
    np.testing.assert_allclose(y[0], expected, atol=5e-5)


def test_bitwise_formula_is_the_dense_product(rng):
    for kw, kx, n, offset in [(1, 1, 5, 0.0), (2, 2, 63, -0.7), (3, 2, 64, 0.0), (4, 3, 65, 1.5), (2, 4, 200, -2.0)]:
        w = rng.normal(size=(7, n)).astype(np.float32)
        enc = encode_lq(w, kw)
        x = rng.normal(size=(3, n)).astype(np.float32)
        alpha = np.sort(rng.uniform(0.1, 1.0, kx)).astype(np.float32)
        dense = lq.quantize_activations(x, alpha, offset).astype(np.float64) @ enc.decode().astype(np.float64).T
        bitwise = lq.bitwise_reference(x, enc.planes, enc.basis, n, alpha, offset)
        np.testing.assert_allclose(bitwise, dense, rtol=1e-6, atol=1e-6 * float(np.abs(dense).max()))  # float32 levels


@pytest.mark.parametrize("n", [1, 5, 31, 32, 33, 64, 100])
@pytest.mark.parametrize("bits", [1, 3, 8])
def test_planes_round_trip_and_clear_tails(rng, n, bits):
    codes = rng.integers(0, 1 << bits, size=(4, n), dtype=np.uint8)
    planes = lq.pack_planes(codes, bits)
    assert planes.shape == (4, bits, -(-n // 32)) and planes.dtype == np.uint32
    assert lq.tail_bits_clear(planes, n)
    assert np.array_equal(lq.unpack_planes(planes, n), codes)
    # element k at word k >> 5, bit k & 31 of plane j = bit j of its code
    k = n - 1
    assert (planes[0, bits - 1, k >> 5] >> np.uint32(k & 31)) & 1 == (codes[0, k] >> (bits - 1)) & 1


def test_nearest_level_ties_infinities_and_nan():
    alpha, offset = np.array([1.0, 2.0], np.float32), 0.0  # levels 0, 1, 2, 3; thresholds 0.5, 1.5, 2.5
    x = np.array([0.5, 1.5, 0.5000001, -np.inf, np.inf, np.nan, -3.0, 9.0], np.float32)
    q = lq.quantize_activations(x, alpha, offset)
    assert q[:2].tolist() == [0.0, 1.0]  # exactly on a threshold: the lower level
    assert q[2] == 1.0
    assert q[3] == 0.0 and q[4] == 3.0  # -Inf, +Inf: the extreme levels
    assert np.isnan(q[5])
    assert q[6] == 0.0 and q[7] == 3.0


def test_levels_not_in_code_order_are_sorted():
    # alpha (1, 1.5, 2): code 3 (2.5) lies above code 4 (2.0); the seed's table skips sorting the ends
    levels = lq.activation_levels(np.array([1.0, 1.5, 2.0], np.float32), 0.0)
    thresholds, codes = lq.level_table(levels)
    assert np.all(np.diff(levels[codes]) >= 0)
    assert lq.encode_nearest(np.array([2.1], np.float32), thresholds, codes).tolist() == [4]


def test_one_bit_qem_is_the_mean_magnitude(rng):
    w = rng.normal(size=(5, 300)).astype(np.float32)
    beta, codes = lq.fit_weight_basis(w, 1)
    np.testing.assert_allclose(beta[:, 0], np.abs(w).mean(axis=1), rtol=1e-5)
    assert np.array_equal(codes, (w > 0).astype(np.uint8))


def test_qem_error_falls_with_bits_and_bases_are_sorted(rng):
    w = rng.normal(size=(16, 500)).astype(np.float32) * rng.uniform(0.1, 3, size=(16, 1)).astype(np.float32)
    errors = []
    for bits in (1, 2, 3, 4):
        enc = encode_lq(w, bits)
        enc.validate()
        assert np.all(np.diff(enc.basis, axis=1) >= 0) and np.all(enc.basis >= 0)
        errors.append(float(np.sqrt(np.mean((enc.decode() - w) ** 2)) / np.sqrt(np.mean(w ** 2))))
    assert errors == sorted(errors, reverse=True) and errors[1] < 0.36 and errors[3] < 0.12, errors


def test_activation_basis_keeps_zero_exact_for_relu_outputs(rng):
    x = np.maximum(rng.normal(size=20000), 0).astype(np.float32)
    alpha, offset = lq.fit_activation_basis(x, 2)
    assert offset == 0.0 and np.all(alpha >= 0)
    assert np.all(lq.quantize_activations(np.zeros(3, np.float32), alpha, offset) == 0)
    signed_alpha, signed_offset = lq.fit_activation_basis(rng.normal(size=20000), 2)
    assert signed_offset < 0 and np.all(signed_alpha >= 0)
    assert lq.fit_activation_basis(np.array([np.nan]), 2)[1] == 0.0  # nothing finite: a zero basis


def test_encoding_decodes_as_codebooks(rng):
    w = rng.normal(size=(6, 3, 3, 3)).astype(np.float32)
    enc = encode_lq(w, 2)
    assert enc.describe() == "lq2" and enc.nbytes == 6 * 2 * 4 + 6 * 2 * 1 * 4
    assert np.array_equal(lq_as_clustered(enc).decode(), enc.decode())
    again = lq_from_codes(enc.shape, enc.basis, enc.codes())
    assert np.array_equal(again.planes, enc.planes)


@pytest.mark.parametrize("edit, message", [
    (lambda e: dict(bits=9), "bits is 9"),
    (lambda e: dict(word_bits=64), "word_bits"),
    (lambda e: dict(bit_order="msb_first"), "bit_order"),
    (lambda e: dict(sign="one_is_minus"), "sign"),
    (lambda e: dict(basis=e.basis.astype(np.float64)), "basis are float64"),
    (lambda e: dict(basis=e.basis[:-1]), "basis have shape"),
    (lambda e: dict(basis=np.full_like(e.basis, np.nan)), "NaN"),
    (lambda e: dict(planes=e.planes.astype(np.int32)), "planes are int32"),
    (lambda e: dict(planes=e.planes[:, :, :1]), "planes have shape"),
    (lambda e: dict(planes=e.planes | np.uint32(1 << 31)), "bits past weight 40"),
])
def test_validate_refuses_what_kernels_would_misread(rng, edit, message):
    enc = encode_lq(rng.normal(size=(4, 40)).astype(np.float32), 2)
    fields = dict(basis=enc.basis, planes=enc.planes, bits=enc.bits, word_bits=32, bit_order="lsb_first",
                  sign="one_is_plus")
    with pytest.raises(EncodingError, match=message):
        LQBinary(enc.shape, **{**fields, **edit(enc)}).validate()


def test_recipe_settings_are_checked():
    with pytest.raises(RecipeError, match="lq_act_bits quantizes the input"):
        LayerSettings(lq_act_bits=2)
    with pytest.raises(RecipeError, match="cannot be combined with cluster_bits, prune"):
        LayerSettings(lq_bits=2, prune=0.5, cluster_bits=3)
    with pytest.raises(RecipeError, match="lq_bits must be 1..8"):
        LayerSettings(lq_bits=9)
    with pytest.raises(RecipeError, match="lq_bits must be an integer"):
        Recipe.from_dict({"default": {"lq_bits": True}})
    assert LayerSettings(lq_bits=2).compresses


def test_packing_activations_needs_calibration(tmp_path):
    with pytest.raises(InputError, match="give calibration inputs"):
        pack_model(default_model_path(), tmp_path / "m.edgepkg", Recipe(LayerSettings(lq_bits=2, lq_act_bits=2)))
    assert not (tmp_path / "m.edgepkg").exists()


@pytest.fixture(scope="module")
def lq_package(tmp_path_factory):
    """The default model post-training quantized at 4 bits (weights and activations, the first
    layer's input left float), with accuracies."""
    train, test = digits_split()
    path = tmp_path_factory.mktemp("lq") / "lq4.edgepkg"
    recipe = Recipe.from_dict({"default": {"lq_bits": 4, "lq_act_bits": 4},
                               "layers": [{"match": "/0/Conv", "lq_act_bits": None}]})
    result = pack_model(default_model_path(), path, recipe, data=test, calibration=train.x[:64])
    return path, result, test


def test_post_training_lq_packs_small_and_keeps_4_bit_accuracy(lq_package):
    path, result, test = lq_package
    assert result.baseline_accuracy - result.accuracy <= 0.005, (result.accuracy, result.baseline_accuracy)
    assert [r.encoding for r in result.layers] == ["lq4"] * 4
    graph = load_package(path)
    quantizers = [n for n in graph.nodes if n.op == "LQQuantize"]
    assert [n.name for n in quantizers] == ["/4/Conv/LQQuantize", "/9/Gemm/LQQuantize", "/12/Gemm/LQQuantize"]
    assert all(len(n.attrs["basis"]) == 4 and n.attrs["offset"] == 0.0 for n in quantizers)  # after ReLU / MaxPool


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "reference"])
def test_lq_package_runs_alike_on_every_backend(lq_package, backend):
    path, _, test = lq_package
    x = test.x[:8].reshape(8, 1, 8, 8)
    expected = np.concatenate([Session(path, backend="reference").run({"input": x[i:i + 1]})["logits"] for i in range(8)])
    session = Session(path, backend=backend)
    got = np.concatenate([session.run({"input": x[i:i + 1]})["logits"] for i in range(8)])
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * float(np.abs(expected).max()))


def test_lq_graph_saves_and_loads(tmp_path):
    graph = golden_graph(True, False)
    save_package(graph, tmp_path / "g.edgepkg")
    loaded = load_package(tmp_path / "g.edgepkg")
    y = Session(loaded, backend="reference").run({"x": GOLDEN_X[None]})["y"]
    np.testing.assert_allclose(y[0], GOLDEN_WITH_BIAS, atol=5e-5)


def test_lq_quantize_torch_lowering_matches_reference_and_passes_gradients(rng):
    torch = pytest.importorskip("torch")
    from edgesdk.ops import OPS
    node = golden_graph(True, False).nodes[0]
    x = rng.normal(size=(64,)).astype(np.float32) * 3
    x[:3] = [np.nan, np.inf, -np.inf]
    expected = OPS["LQQuantize"].reference(node, x)
    t = torch.tensor(x, requires_grad=True)
    y = OPS["LQQuantize"].torch(None, node, t)
    np.testing.assert_array_equal(y.detach().numpy(), expected)
    y[3:].sum().backward()
    assert np.all(t.grad.numpy()[3:] == 1.0)


def test_export_writes_lq_layers_onnx_runtime_runs_exactly(tmp_path):
    """edgesdk export: LQQuantize as standard ops (ties, +-Inf and NaN included), LQ weights decoded."""
    import onnxruntime as ort
    from edgesdk.export import export_onnx
    graph = golden_graph(True, False)
    path = tmp_path / "golden.onnx"
    export_onnx(graph, path)
    x = np.array([[0.5, 1.2, 2.3, -1.0, 0.0]], np.float32)
    got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got[0], GOLDEN_WITH_BIAS, atol=5e-5)
    from edgesdk.ops import OPS
    node = graph.nodes[0]
    probe = Graph("quantizer")
    probe.add_input("x", (1, 9))
    probe.nodes.append(node)
    probe.add_tensor(node.outputs[0], (1, 9), np.float32)
    probe.outputs = [node.outputs[0]]
    export_onnx(probe, tmp_path / "q.onnx")
    values = np.array([[-1.7, 0.0, 1.7, -np.inf, np.inf, np.nan, -9.0, 0.3, 1.69999]], np.float32)
    got = ort.InferenceSession(str(tmp_path / "q.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": values})[0]
    np.testing.assert_array_equal(got, OPS["LQQuantize"].reference(node, values))


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "reference"])
def test_lq_package_is_correct_from_many_threads(lq_package, backend):
    """One session, 8 threads at once on different inputs: each gets what a lone run gives (the
    cpu layers share one read-only packed layer across arenas)."""
    from concurrent.futures import ThreadPoolExecutor
    path, _, test = lq_package
    session = Session(path, backend=backend)
    steps = [op.note for op in session.profile({"input": test.x[:1].reshape(1, 1, 8, 8)}).ops]
    if backend == "cpu":
        assert sum(note.startswith("LQ bitwise") for note in steps) == 3, steps
    inputs = [test.x[i:i + 1].reshape(1, 1, 8, 8) for i in range(32)]
    alone = [session.run({"input": x})["logits"] for x in inputs]
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda x: session.run({"input": x})["logits"], inputs * 4))
    for i, y in enumerate(together):
        np.testing.assert_array_equal(y, alone[i % 32])


@pytest.mark.parametrize("backend", BACKENDS)
def test_nan_and_inf_through_an_lq_layer(backend):
    """NaN in an input makes every output it reads NaN; +-Inf quantize to the extreme levels."""
    graph = golden_graph(True, False)
    session = Session(graph, backend=backend)
    y = session.run({"x": np.array([[0.5, np.nan, 2.3, -1.0, 0.0]], np.float32)})["y"]
    assert np.isnan(y).all()
    y_inf = session.run({"x": np.array([[0.5, np.inf, 2.3, -np.inf, 0.0]], np.float32)})["y"]
    y_ext = session.run({"x": np.array([[0.5, 1e9, 2.3, -1e9, 0.0]], np.float32)})["y"]
    np.testing.assert_allclose(y_inf, y_ext, rtol=1e-6)
    assert np.isfinite(y_inf).all()
