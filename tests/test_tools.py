"""The scripts in tools/ run and say what they should (no timing assertions: speed is reported by
the tools themselves, never judged by tests)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import edgesdk
from edgesdk.datasets import digits_split
from edgesdk.evaluation import evaluate

TOOLS = Path(__file__).resolve().parents[1] / "tools"


def tool(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_bench_reports_both_runtimes_and_the_ratio():
    report = json.loads(tool(str(TOOLS / "bench.py"), "default", "--min-time", "0.2", "--rounds", "1",
                             "--json").stdout)
    assert report["threads"] == 1 and report["edgesdk"]["runs"] >= 5 and report["onnxruntime"]["runs"] >= 5
    assert report["ratio_median"] == pytest.approx(report["edgesdk"]["median_ms"] / report["onnxruntime"]["median_ms"])
    text = tool(str(TOOLS / "bench.py"), "default", "--min-time", "0.1", "--rounds", "1").stdout
    assert "ratio edgesdk/onnxruntime" in text


def test_export_zoo_writes_a_model(tmp_path):
    out = tmp_path / "lenet5.onnx"
    tool(str(TOOLS / "export_zoo.py"), "lenet5", "-o", str(out))
    assert edgesdk.Session(out).input_shapes == {"input": (1, 1, 32, 32)}


@pytest.mark.slow
def test_training_script_reproduces_the_default_model(tmp_path):
    tool(str(TOOLS / "train_default_model.py"), "--out-dir", str(tmp_path), "--quiet")
    info = json.loads((tmp_path / "digits_lenet.json").read_text())
    result = evaluate(edgesdk.Session(tmp_path / "digits_lenet.onnx"), digits_split()[1])
    assert result.accuracy >= 0.97 and result.accuracy == pytest.approx(info["test_accuracy"], abs=1e-6)


def test_readme_operator_table_is_generated_from_the_registry():
    """README.md's operator table is tools/op_table.py's output for the ops registered now."""
    sys.path.insert(0, str(TOOLS))
    import op_table
    readme = (TOOLS.parent / "README.md").read_text()
    assert op_table.table() in readme, "README.md's operator table is stale: run python tools/op_table.py --write"
