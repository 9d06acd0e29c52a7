"""The edgesdk command line, run as users run it (a subprocess of the installed console script)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from onnx_builders import single_node_model

EDGESDK = shutil.which("edgesdk", path=os.path.dirname(sys.executable)) or "edgesdk"


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([EDGESDK, *args], capture_output=True, text=True, timeout=300)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="module")
def conv_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "conv.onnx"
    rng = np.random.default_rng(0)
    model = single_node_model("Conv", ("N", 3, 8, 8), {"W": rng.standard_normal((4, 3, 3, 3)).astype(np.float32)},
                              pads=[1, 1, 1, 1])
    path.write_bytes(model.SerializeToString())
    return path


def test_inspect_table_and_json(conv_model):
    out = cli("inspect", str(conv_model)).stdout
    assert "Conv" in out and "1x4x8x8" in out and "MACs" in out and "total: 1 layers" in out
    data = json.loads(cli("inspect", str(conv_model), "--json").stdout)
    assert data["totals"]["macs"] == 4 * 8 * 8 * 3 * 3 * 3 and data["totals"]["params"] == 108
    assert data["layers"][0]["output_shape"] == [1, 4, 8, 8]


def test_input_shape_option(conv_model):
    data = json.loads(cli("inspect", str(conv_model), "--input-shape", "x=2x3x8x8", "--json").stdout)
    assert data["inputs"] == {"x": [2, 3, 8, 8]}
    bad = cli("inspect", str(conv_model), "--input-shape", "x=2xZ", check=False)
    assert bad.returncode == 2 and "--input-shape" in bad.stderr


def test_run_random_and_from_file(conv_model, tmp_path):
    out = tmp_path / "out.npz"
    data = json.loads(cli("run", str(conv_model), "--random", "--output", str(out), "--json").stdout)
    assert data["outputs"]["y"]["shape"] == [1, 4, 8, 8]
    assert np.load(out)["y"].shape == (1, 4, 8, 8)
    x = tmp_path / "x.npy"
    np.save(x, np.ones((1, 3, 8, 8)))  # float64 on purpose: the CLI casts floats
    text = cli("run", str(conv_model), "--input", str(x)).stdout
    assert "y: shape [1, 4, 8, 8]" in text
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left


def test_eval_digits_and_npz(tmp_path):
    model = tmp_path / "flat.onnx"
    rng = np.random.default_rng(0)
    m = single_node_model("Gemm", (1, 64), {"B": rng.standard_normal((64, 10)).astype(np.float32)})
    model.write_bytes(m.SerializeToString())
    data = tmp_path / "d.npz"
    np.savez(data, x=rng.standard_normal((20, 64)).astype(np.float32), y=rng.integers(0, 10, 20))
    result = json.loads(cli("eval", str(model), "--data", str(data), "--json").stdout)
    assert result["samples"] == 20 and 0 <= result["accuracy"] <= 1 and result["latency"]["runs"] == 20
    wrong = cli("eval", str(model), "--data", "digits", check=False)
    assert wrong.returncode == 2 and "shape" in wrong.stderr


@pytest.mark.parametrize("args,words", [
    (["inspect", "missing.onnx"], "not found"),
    (["run", "missing.onnx", "--random"], "not found"),
    (["eval", "missing.onnx", "--data", "nope.npz"], "not found"),
    (["run", "{model}", "--random", "--backend", "tpu"], "unknown backend 'tpu'"),
    (["run", "{model}", "--input", "{model}"], "not a readable"),
])
def test_errors_are_one_line_with_exit_2(conv_model, args, words):
    proc = cli(*[a.format(model=conv_model) for a in args], check=False)
    assert proc.returncode == 2
    # conv_model's batch is dynamic: besides the error, import notes once that it runs as 1
    lines = [line for line in proc.stderr.strip().splitlines() if "is dynamic and was fixed to 1" not in line]
    assert len(lines) == 1 and lines[0].startswith("edgesdk: error:") and words in lines[0], proc.stderr


def test_unsupported_operator_one_line(tmp_path):
    path = tmp_path / "einsum.onnx"
    path.write_bytes(single_node_model("Einsum", (2, 3), equation="ij->ji").SerializeToString())
    proc = cli("inspect", str(path), check=False)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "unsupported operator 'Einsum'" in proc.stderr and "Conv" in proc.stderr


def test_debug_shows_traceback(tmp_path):
    proc = cli("inspect", str(tmp_path / "missing.onnx"), "--debug", check=False)
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_quickstart_json():
    report = json.loads(cli("quickstart", "--json").stdout)
    rows = {(r["backend"], r["precision"]): r for r in report["results"]}
    assert rows[("reference", "fp32")]["accuracy"] >= 0.97
    assert rows[("reference", "fp16")]["accuracy"] >= 0.96
    assert report["passes"]["fold_batchnorm"] >= 1 and report["passes"]["fuse_activations"] >= 1


def test_quickstart_text():
    out = cli("quickstart").stdout
    assert "reference" in out and "accuracy" in out and "%" in out


def test_pack_inspect_eval_a_package(tmp_path):
    from edgesdk.models import default_model_path, default_recipe_path
    out = tmp_path / "d.edgepkg"
    result = json.loads(cli("pack", str(default_model_path()), "-o", str(out), "--recipe", str(default_recipe_path()),
                            "--eval", "digits", "--json").stdout)
    # the no-fine-tuning target: >= 10x smaller file, <= 0.5 pp accuracy loss
    assert result["ratio"] >= 10 and result["accuracy"] >= result["baseline_accuracy"] - 0.005
    assert {r["encoding"].split("(")[0] for r in result["layers"]} >= {"cluster4/layer/fp16"}
    text = cli("inspect", str(out)).stdout
    assert "package: format 2" in text and "recipe:" in text and "cluster4/layer/fp16" in text
    evaluated = json.loads(cli("eval", str(out), "--data", "digits", "--json").stdout)
    assert evaluated["accuracy"] == pytest.approx(result["accuracy"])
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left


def test_pack_flags_override_and_bad_recipes(conv_model, tmp_path):
    out = tmp_path / "c.edgepkg"
    data = json.loads(cli("pack", str(conv_model), "-o", str(out), "--cluster-bits", "3", "--per-channel",
                          "--json").stdout)
    assert data["layers"][0]["encoding"].startswith(("cluster3/channel", "dense-fp32 (cluster3/channel"))
    bad = tmp_path / "bad.json"
    bad.write_text('{"default": {"bitz": 3}}')
    proc = cli("pack", str(conv_model), "-o", str(out), "--recipe", str(bad), check=False)
    assert proc.returncode == 2 and "unknown setting 'bitz'" in proc.stderr and len(proc.stderr.splitlines()) == 1
    proc = cli("pack", str(conv_model), "-o", str(out), "--cluster-bits", "9", check=False)
    assert proc.returncode == 2 and "cluster_bits must be 1..8" in proc.stderr


def test_damaged_package_is_one_line(tmp_path, conv_model):
    out = tmp_path / "c.edgepkg"
    cli("pack", str(conv_model), "-o", str(out), "--fp16")
    data = bytearray(out.read_bytes())
    data[-3] ^= 0x40
    out.write_bytes(bytes(data))
    proc = cli("run", str(out), "--random", check=False)
    assert proc.returncode == 2 and "checksum mismatch" in proc.stderr and len(proc.stderr.splitlines()) == 1


def test_finetune_takes_a_builtin_recipe_by_name_and_packs(tmp_path):
    from edgesdk.compress.finetune import DIGITS_RECIPES
    from edgesdk.compress.recipe import Recipe
    out = tmp_path / "ft.edgepkg"
    result = json.loads(cli("finetune", "--recipe", "prune+cluster2-25x", "--epochs", "2", "-o", str(out),
                            "--json").stdout)
    assert result["package_bytes"] == out.stat().st_size and result["accuracy"] is not None
    stored = json.loads(cli("inspect", str(out), "--json").stdout)["metadata"]["package"]["recipe"]
    assert Recipe.from_dict(stored) == Recipe.from_dict(DIGITS_RECIPES["prune+cluster2-25x"])
    bad = cli("finetune", "--recipe", "no-such-recipe", "-o", str(tmp_path / "x.edgepkg"), check=False)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "no-such-recipe" in bad.stderr


def test_export_a_package_back_to_onnx(tmp_path, conv_model):
    import onnx
    from conftest import ort_run
    package, exported = tmp_path / "conv.edgepkg", tmp_path / "conv.onnx"
    cli("pack", str(conv_model), "-o", str(package), "--cluster-bits", "4")
    out = cli("export", str(package), "-o", str(exported)).stdout
    assert f"wrote {exported}" in out
    model = onnx.load(str(exported))
    onnx.checker.check_model(model, full_check=True)
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    cli("run", str(package), "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npz"))
    np.testing.assert_allclose(ort_run(model, {"x": x})[0], np.load(tmp_path / "y.npz")["y"], rtol=1e-4, atol=1e-5)
    tflite = tmp_path / "m.tflite"
    tflite.write_bytes(b"\x1c\x00\x00\x00TFL3" + bytes(32))
    bad = cli("export", str(tflite), "-o", str(tmp_path / "t.onnx"), check=False)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "tf2onnx" in bad.stderr
