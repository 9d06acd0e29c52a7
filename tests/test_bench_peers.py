"""tools/bench_peers.py without any peer venv: the correctness gate, the round order, the tables,
the command line, and whole runs against fake peer runners (tests/fake_peer_runner.py, which
speaks tools/peers/peer_runner.py's protocol) on a tiny model. Nothing is timed for long."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import pytest

from onnx_builders import graph_model

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import bench_peers as bp  # noqa: E402

FAKE = Path(__file__).resolve().parent / "fake_peer_runner.py"


# -- the gate ----------------------------------------------------------------------------------------
def test_gate_bound_is_1e_3_of_max_1_and_the_largest_reference_value():
    ref = [np.array([[10.0, -3.0, 0.5]], np.float32)]  # bound 1e-3 * 10
    assert bp.gate(ref, [ref[0] + 0.0099])["ok"]
    refused = bp.gate(ref, [ref[0] + 0.0101])
    assert not refused["ok"] and refused["max_abs_diff"] == pytest.approx(0.0101, rel=1e-3)
    assert refused["bound"] == pytest.approx(0.01)
    assert "max abs diff" in refused["reason"]
    small = [np.array([0.1, -0.2], np.float32)]  # below 1: the bound is 1e-3 itself
    assert bp.gate(small, [small[0] + 0.0009])["ok"]
    assert not bp.gate(small, [small[0] + 0.0011])["ok"]


def test_gate_refuses_nan_shape_and_count_mismatches():
    ref = [np.ones((1, 4), np.float32)]
    nan = ref[0].copy()
    nan[0, 1] = np.nan
    assert not bp.gate(ref, [nan])["ok"]
    assert not bp.gate(ref, [np.ones((1, 5), np.float32)])["ok"]
    assert not bp.gate(ref, [ref[0], ref[0]])["ok"]
    # ncnn gives outputs without the batch dimension: the same values, leading 1s dropped
    assert bp.gate([np.arange(6, dtype=np.float32).reshape(1, 6)], [np.arange(6, dtype=np.float32)])["ok"]
    assert bp.gate([np.ones((1, 2, 3, 3), np.float32)], [np.ones((2, 3, 3), np.float32)])["ok"]
    assert not bp.gate([np.ones((1, 2, 3, 3), np.float32)], [np.ones((3, 2, 3), np.float32)])["ok"]


def test_rounds_alternate_their_order():
    assert bp.round_orders(["a", "b", "c"], 4) == [["a", "b", "c"], ["c", "b", "a"], ["a", "b", "c"], ["c", "b", "a"]]
    assert bp.round_orders(["a"], 1) == [["a"]]


# -- the tables --------------------------------------------------------------------------------------
def _row(engines: dict, model: str = "m", threads: int = 1) -> dict:
    best, ratio = bp.best_peer(engines)
    return {"model": model, "threads": threads, "engines": engines, "best_peer": best, "ratio": ratio}


def test_best_peer_is_the_fastest_timed_one_refused_and_failed_ones_excluded():
    row = _row({"edgesdk": {"status": "timed", "median_ms": 3.0},
                "ort": {"status": "timed", "median_ms": 4.0},
                "mnn": {"status": "timed", "median_ms": 2.0},
                "ncnn": {"status": "refused", "max_abs_diff": 0.0123, "reason": "x"},
                "openvino": {"status": "failed", "reason": "runner died during load (killed by SIGSEGV)"},
                "litert": {"status": "not installed", "reason": "make peers-litert"}})
    assert row["best_peer"] == "mnn" and row["ratio"] == pytest.approx(1.5)
    columns = [bp.ENGINES[n] for n in ("edgesdk", "ort", "openvino", "litert", "mnn", "ncnn")]
    head, rule, line = bp.latency_table([row], columns)
    assert head == ("| model | threads | edgesdk cpu | ORT | OpenVINO | LiteRT (XNNPACK) | MNN | ncnn | "
                    "ratio (edgesdk / best peer) |")
    assert rule == "|" + "---|" * 9
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells == ["m", "1", "3.00", "4.00", "failed: runner died during load (killed by SIGSEGV)",
                     "not installed", "2.00", "refused: max abs diff 0.012", "1.50 (MNN)"]


def test_no_ratio_without_a_timed_peer_or_a_timed_edgesdk():
    assert bp.best_peer({"edgesdk": {"status": "timed", "median_ms": 1.0},
                         "ort": {"status": "refused", "max_abs_diff": 1.0}}) == (None, None)
    assert bp.best_peer({"edgesdk": {"status": "failed", "reason": "x"},
                         "ort": {"status": "timed", "median_ms": 1.0}}) == ("ort", None)
    row = _row({"edgesdk": {"status": "timed", "median_ms": 1.0}, "ort": {"status": "refused", "max_abs_diff": 1.0}})
    assert bp.latency_table([row], [bp.ENGINES["edgesdk"], bp.ENGINES["ort"]])[2].endswith("| n/a |")


def test_ms_format():
    assert [bp.fmt_ms(x) for x in (123.4, 12.34, 1.234, 0.04567)] == ["123", "12.3", "1.23", "0.046"]


# -- the command line --------------------------------------------------------------------------------
def test_unknown_peer_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as exc:
        bp.main(["--peers", "ort", "tvm"])
    assert exc.value.code == 2
    assert "invalid choice: 'tvm'" in capsys.readouterr().err


# -- whole runs with fake runners --------------------------------------------------------------------
@pytest.fixture
def tiny_model(tmp_path) -> Path:
    """x (1, 3, 4, 4) -> Conv 1x1 (2 filters) -> Relu."""
    w = np.random.default_rng(1).standard_normal((2, 3, 1, 1)).astype(np.float32)
    model = graph_model([oh.make_node("Conv", ["x", "w"], ["c"]), oh.make_node("Relu", ["c"], ["y"])],
                        {"x": (1, 3, 4, 4)}, ["y"], {"w": w})
    path = tmp_path / "tiny.onnx"
    onnx.save(model, path)
    return path


def fake(monkeypatch, name: str, *args: str) -> None:
    e = bp.ENGINES[name]
    monkeypatch.setitem(bp.ENGINES, name, bp.Engine(name, e.label, None, e.target, runner=FAKE, args=tuple(args)))


def run(capsys, *argv: str) -> tuple[int, list[str], list[dict]]:
    code = bp.main(list(argv))
    out = capsys.readouterr().out.splitlines()
    rows = [json.loads(line) for line in out if line.startswith("{")]
    return code, out, rows


def common(tmp_path, model: Path) -> list[str]:
    return ["--models", str(model), "--threads", "1", "--rounds", "3", "--min-time", "0.01", "--settle", "0",
            "--load-repeat", "1", "--cache-dir", str(tmp_path / "cache")]


def test_fake_peers_gate_interleave_and_tables(monkeypatch, capsys, tmp_path, tiny_model):
    trace = tmp_path / "trace"
    fake(monkeypatch, "edgesdk", "--ms", "3", "--trace", str(trace), "--rss-mb", "50")
    fake(monkeypatch, "ort", "--ms", "4", "--trace", str(trace))
    fake(monkeypatch, "mnn", "--ms", "2", "--diff", "0.9e-3", "--trace", str(trace))  # within the bound: timed
    fake(monkeypatch, "ncnn", "--ms", "1", "--diff", "1.1e-3", "--trace", str(trace))  # beyond it: refused
    out_json = tmp_path / "out.json"
    code, out, rows = run(capsys, *common(tmp_path, tiny_model), "--peers", "ort", "mnn", "ncnn",
                          "--json", str(out_json))
    assert code == 0
    assert out[0].startswith("# ") and "python tools/bench_peers.py --models" in out[0]
    (row,) = rows
    engines = row["engines"]
    assert {k: v["status"] for k, v in engines.items()} == {"edgesdk": "timed", "ort": "timed", "mnn": "timed",
                                                             "ncnn": "refused"}
    assert engines["mnn"]["median_ms"] == pytest.approx(2.0) and engines["edgesdk"]["median_ms"] == pytest.approx(3.0)
    assert row["best_peer"] == "mnn" and row["ratio"] == pytest.approx(1.5)
    assert engines["ncnn"]["max_abs_diff"] > engines["ncnn"]["bound"]
    assert any(line.startswith("# ncnn on tiny at 1 thread: refused (not timed): max abs diff") for line in out)
    # the refused engine is never timed; the others in alternating order, round by round
    timed = [line.split()[0] for line in trace.read_text().splitlines() if line.endswith(" time")]
    assert timed == ["edgesdk", "ort", "mnn", "mnn", "ort", "edgesdk", "edgesdk", "ort", "mnn"]
    table = [line for line in out if line.startswith("# | tiny |")]
    diff = engines["ncnn"]["max_abs_diff"]
    assert table[0] == f"# | tiny | 1 | 3.00 | 4.00 | 2.00 | refused: max abs diff {diff:.2g} | 1.50 (MNN) |"
    assert table[1] == "# | tiny | 1 | 2.00 (1.50) / 50 | 2.00 (1.50) / 42 | 2.00 (1.50) / 42 | 2.00 (1.50) / 42 |"
    saved = json.loads(out_json.read_text())
    assert saved["rows"][0]["ratio"] == pytest.approx(1.5) and "versions" in saved


def test_missing_peer_is_skipped_with_its_make_target(monkeypatch, capsys, tmp_path, tiny_model):
    fake(monkeypatch, "edgesdk")
    fake(monkeypatch, "ort")
    monkeypatch.setitem(bp.ENGINES, "openvino", bp.Engine("openvino", "OpenVINO", "no-such-venv", "make peers-openvino",
                                                         converts=True))
    code, out, rows = run(capsys, *common(tmp_path, tiny_model), "--peers", "openvino", "--no-rss")
    assert code == 0
    assert "# OpenVINO skipped: no-such-venv is not installed; install it with make peers-openvino" in out
    assert rows[0]["engines"]["openvino"] == {"status": "not installed", "reason": "make peers-openvino"}
    assert [line for line in out if line.startswith("# | tiny |")][0].endswith("| not installed | n/a |")


def test_a_crashing_peer_is_recorded_and_the_run_goes_on(monkeypatch, capsys, tmp_path, tiny_model):
    second = tmp_path / "second.onnx"
    second.write_bytes(tiny_model.read_bytes())
    fake(monkeypatch, "edgesdk", "--ms", "3")
    fake(monkeypatch, "ort", "--ms", "4")
    fake(monkeypatch, "litert", "--crash-on", "load")
    fake(monkeypatch, "ncnn", "--crash-on", "time", "--ms", "0.5")
    argv = common(tmp_path, tiny_model)
    argv[argv.index("--models") + 1:argv.index("--models") + 2] = [str(tiny_model), str(second)]
    code, out, rows = run(capsys, *argv, "--peers", "ort", "litert", "ncnn", "--no-rss")
    assert code == 0 and [r["model"] for r in rows] == ["tiny", "second"]
    for row in rows:
        assert row["engines"]["litert"]["status"] == "failed"
        assert "runner died during load (killed by SIGSEGV)" in row["engines"]["litert"]["reason"]
        assert row["engines"]["ncnn"]["status"] == "failed"  # passed the gate, then crashed: not a candidate
        assert row["engines"]["ncnn"]["reason"].startswith("while timing: runner died during time")
        assert row["engines"]["edgesdk"]["status"] == row["engines"]["ort"]["status"] == "timed"
        assert row["ratio"] == pytest.approx(0.75)


def test_real_edgesdk_and_onnx_runtime_runners(capsys, tmp_path, tiny_model):
    """tools/peers/peer_runner.py itself, for the two engines of .venv (no peer venv needed)."""
    code, out, rows = run(capsys, *common(tmp_path, tiny_model), "--peers", "ort", "--rss-runs", "1")
    assert code == 0
    engines = rows[0]["engines"]
    for name in ("edgesdk", "ort"):
        assert engines[name]["status"] == "timed", engines[name]
        assert engines[name]["max_abs_diff"] <= engines[name]["bound"]
        assert engines[name]["median_ms"] > 0 and engines[name]["runs"] >= 15  # 3 rounds of at least 5
        assert 10 < engines[name]["peak_rss_mb"] < 2000
    assert rows[0]["best_peer"] == "ort" and rows[0]["ratio"] > 0
