"""--min-sqnr (edgesdk.quant.float_fallback): the tensors that cost most stay float until the int8
model's SQNR against fp32 reaches the target; the choice is measured, recorded and reproducible."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import edgesdk
from edgesdk.datasets import digits_split
from edgesdk.errors import InputError
from edgesdk.models import default_model_path
from edgesdk.pack import compress_model
from edgesdk.quant.float_fallback import check_min_sqnr, float_units, output_sqnr_db
from edgesdk.quant.ptq import plan_quantization, quantize_graph

CLI = [sys.executable, "-m", "edgesdk"]


@pytest.fixture(scope="module")
def digits():
    graph, _ = compress_model(default_model_path(), input_shapes={"input": (1, 1, 8, 8)})
    train, test = digits_split()
    return graph, train.x[:64], test.x[:32]


def _sqnr(float_graph, quantized, xs) -> float:
    with edgesdk.Session(float_graph, backend="cpu", optimize=False) as ref, \
            edgesdk.Session(quantized, backend="cpu", optimize=False) as got:
        name = ref.input_names[0]
        want = [ref.run({name: x[None]})[o] for x in xs for o in ref.output_names]
        have = [got.run({name: x[None]})[o] for x in xs for o in ref.output_names]
    return output_sqnr_db(want, have)


def test_the_target_is_reached_with_the_costliest_tensors_float(digits) -> None:
    graph, calib, test = digits
    plain, _ = quantize_graph(graph, calib, backend="cpu")
    all_int8 = _sqnr(graph, plain, calib[:16])
    target = all_int8 + 6  # a quarter of the noise power: some tensors must go, not all
    quantized, report = quantize_graph(graph, calib, backend="cpu", min_sqnr=target)
    fb = report.float_fallback
    assert fb["int8_sqnr_db"] == pytest.approx(all_int8, abs=0.01)
    # measured on the first 16 calibration inputs, which is what the search promises
    assert fb["sqnr_db"] >= target and _sqnr(graph, quantized, calib[:16]) == pytest.approx(fb["sqnr_db"], abs=0.01)
    capable = plan_quantization(graph).capable
    assert 0 < len(fb["keep_float"]) < len(capable) and set(fb["keep_float"]) <= capable
    assert 0 < fb["float_macs_share"] < 1 and fb["tensors"]
    assert {n.op for n in quantized.nodes} & {"QLinearConv", "QGemm", "QLinearMatMul"}, "everything went float"
    kept = set(fb["keep_float"])
    assert not any(n.name in kept for n in quantized.nodes if n.op.startswith("QLinear") or n.op == "QGemm")
    # a bisection: the shortest measured prefix, so the last one short of it is short of the target
    assert fb["evaluations"] <= len(float_units(plan_quantization(graph))) + 1 + math.ceil(math.log2(len(capable))) + 2
    # held-out inputs gain too (not only the ones searched on)
    assert _sqnr(graph, quantized, test) > _sqnr(graph, plain, test) + 3


def test_a_target_already_met_keeps_every_op_int8(digits) -> None:
    graph, calib, _ = digits
    plain, _ = quantize_graph(graph, calib, backend="cpu")
    quantized, report = quantize_graph(graph, calib, backend="cpu", min_sqnr=10)
    assert report.float_fallback["keep_float"] == [] and report.float_fallback["evaluations"] == 1
    assert [n.op for n in quantized.nodes] == [n.op for n in plain.nodes]


def test_units_cover_each_quantized_tensor_once(digits) -> None:
    graph, _, _ = digits
    plan = plan_quantization(graph)
    units = float_units(plan)
    assert len({u.nodes for u in units}) == len(units)  # a reshape's input and output: one unit
    producers, consumers = plan.graph.producers(), plan.graph.consumers()
    for unit in units:
        expected = {n.name for n in consumers.get(unit.tensor, []) if n.name in plan.capable}
        if producers.get(unit.tensor) is not None and producers[unit.tensor].name in plan.capable:
            expected.add(producers[unit.tensor].name)
        assert unit.nodes == expected
    assert sum(u.macs for u in units) > 0


def test_output_sqnr_leaves_out_what_int8_cannot_hold() -> None:
    ref = [np.array([1.0, np.nan, np.inf, 2.0], np.float32)]
    assert output_sqnr_db(ref, [np.array([1.0, 0.0, 0.0, 2.0], np.float32)]) == math.inf
    assert output_sqnr_db(ref, [np.array([1.1, 0.0, 0.0, 2.0], np.float32)]) == pytest.approx(
        10 * math.log10(5 / 0.01), abs=1e-3)
    # a NaN where the reference is finite is as bad as it gets, not ignored
    assert output_sqnr_db(ref, [np.array([np.nan, 0.0, 0.0, 2.0], np.float32)]) < -100


@pytest.mark.parametrize("bad", [0, -3, math.nan, math.inf, 101, "thirty"])
def test_min_sqnr_must_be_a_plausible_target(bad) -> None:
    with pytest.raises(InputError, match="--min-sqnr is a target SQNR in dB"):
        check_min_sqnr(bad)


def test_cli_min_sqnr_writes_a_recipe_that_packs_the_same_bytes(tmp_path: Path, digits) -> None:
    graph, calib, _ = digits
    plain, _ = quantize_graph(graph, calib, backend="cpu")
    target = f"{_sqnr(graph, plain, calib[:16]) + 6:.1f}"
    model, out = str(default_model_path()), tmp_path / "m.edgepkg"
    proc = subprocess.run(CLI + ["pack", model, "-o", str(out), "--int8", "--calib", "digits", "--min-sqnr", target],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "min-sqnr: all-int8" in proc.stdout and "kept float:" in proc.stdout, proc.stdout
    recipe = json.loads((tmp_path / "m.recipe.json").read_text())
    assert recipe["default"]["int8"] and recipe["calibration"]["keep_float"]
    from edgesdk.package.reader import load_package
    stored = load_package(out).metadata["package"]["recipe"]
    assert stored["calibration"]["keep_float"] == recipe["calibration"]["keep_float"]
    again = tmp_path / "again.edgepkg"
    proc = subprocess.run(CLI + ["pack", model, "-o", str(again), "--recipe", str(tmp_path / "m.recipe.json"),
                                 "--calib", "digits"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert again.read_bytes() == out.read_bytes()


@pytest.mark.parametrize("args, words", [
    (["--min-sqnr", "30"], "add --int8 --calib DATA"),
    (["--int8", "--calib", "digits", "--min-sqnr", "-1"], "above 0 and at most 100"),
    (["--save-recipe", "r.json"], "add --min-sqnr DB"),
    (["--recipe", "{bad_keep}", "--calib", "digits"], "keep_float names 1 node(s) this model does not have"),
    (["--recipe", "{not_list}", "--calib", "digits"], "keep_float must be a list of node names"),
])
def test_cli_min_sqnr_bad_input(tmp_path: Path, args, words) -> None:
    bad_keep, not_list = tmp_path / "bad_keep.json", tmp_path / "not_list.json"
    bad_keep.write_text(json.dumps({"default": {"int8": True}, "calibration": {"keep_float": ["/no/such/Conv"]}}))
    not_list.write_text(json.dumps({"default": {"int8": True}, "calibration": {"keep_float": "/0/Conv"}}))
    args = [a.format(bad_keep=bad_keep, not_list=not_list) for a in args]
    out = tmp_path / "x.edgepkg"
    proc = subprocess.run(CLI + ["pack", str(default_model_path()), "-o", str(out), *args], capture_output=True,
                          text=True, cwd=tmp_path)
    assert proc.returncode == 2 and words in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert len([line for line in proc.stderr.splitlines() if "error" in line]) == 1
    assert not out.exists()
