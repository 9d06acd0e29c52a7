"""The scripts in tools/ run and say what they should (no timing assertions: speed is reported by
the tools themselves, never judged by tests)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
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


def _bench_int8():
    import importlib.util
    spec = importlib.util.spec_from_file_location("bench_int8", TOOLS / "bench_int8.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_int8_feeds_ppocr_printed_text_as_its_preprocessing_does():
    """tools/bench_int8.py's PP-OCR inputs: text on paper (mostly the light background, some
    dark ink), normalized as rapidocr does, the same for the same seed."""
    b = _bench_int8()
    rec = b.text_images("rec", (1, 3, 48, 160), 4, seed=0)
    assert rec.shape == (4, 3, 48, 160) and rec.dtype == np.float32
    assert rec.min() >= -1 and rec.max() <= 1 and np.median(rec) > 0.3 and (rec < -0.3).mean() > 0.01  # ink
    np.testing.assert_array_equal(rec, b.text_images("rec", (1, 3, 48, 160), 4, seed=0))
    det = b.text_images("det", (1, 3, 64, 64), 2, seed=1)
    assert det.max() <= (1 - 0.406) / 0.225 + 1e-5 and det.min() >= -0.485 / 0.229 - 1e-5


def test_bench_int8_task_agreement():
    b = _bench_int8()
    steps = np.zeros((5, b.REC_CLASSES), np.float32)
    steps[[0, 1, 2, 3, 4], [7, 7, 0, 7, 9]] = 1  # "7 7 - 7 9" decodes to 7 7 9
    merged = steps.copy()
    merged[2] = 0
    merged[2, 7] = 1  # "7 7 7 7 9" decodes to 7 9
    assert b.task_agreement("rec", [steps.ravel(), steps.ravel()], [steps.ravel(), merged.ravel()]) == 0.5
    assert b.task_agreement("det", [np.array([0.9, 0.9, 0.1, 0.5])], [np.array([0.9, 0.2, 0.1, 0.4])]) == \
        pytest.approx(2 / 3, abs=1e-3)  # masks 1101 and 1001
    assert b.task_agreement("cls", [np.array([0.9, 0.1]), np.array([0.4, 0.6])],
                            [np.array([0.8, 0.2]), np.array([0.7, 0.3])]) == 0.5
