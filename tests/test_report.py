"""Reports over run profiles: report.json, the self-contained report.html (rendered in headless
Chromium), trace.json in the Chrome Trace Event format, the output folder, and ``edgesdk profile``."""
from __future__ import annotations

import copy
import html
import json
import os
import re
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from edgesdk.cli import main as cli_main
from edgesdk.errors import InputError
from edgesdk.models import default_model_path
from edgesdk.profile import default_out_dir, profile_session, write_reports
from edgesdk.profile import report as report_module
from edgesdk.profile.trace import lane_name
from edgesdk.runtime.session import Session

LENET = default_model_path()
EDGESDK = shutil.which("edgesdk", path=os.path.dirname(sys.executable)) or "edgesdk"
CHROMIUM = shutil.which("chromium-headless-shell") or "/usr/bin/chromium-headless-shell"
TITLE = "LeNet <test> & co"
CHARTS_PER_RUN, COMPARISON_CHARTS = 3, 2
# A URL in an attribute that loads something (src, href, xlink:href, action...), or in CSS.
EXTERNAL = re.compile(r"""(?:\b(?:src|href|action|poster|data)\s*=\s*["']?\s*(?:[a-z][a-z0-9+.-]*:)?//)"""
                      r"""|url\(\s*["']?\s*(?:[a-z][a-z0-9+.-]*:)?//|@import|<link\b|<script\b""", re.I)


@pytest.fixture(scope="module")
def runs() -> list[dict]:
    return [profile_session(Session(LENET, backend=backend), warmup=1, iters=6) for backend in ("reference", "cpu")]


@pytest.fixture(scope="module")
def report(runs, tmp_path_factory) -> tuple[Path, dict[str, Path]]:
    out = tmp_path_factory.mktemp("report") / "nested" / "out"
    return out, write_reports(runs, out, title=TITLE)


def test_writes_the_three_files_atomically(report):
    out, files = report
    assert {k: p.name for k, p in files.items()} == {"html": "report.html", "json": "report.json",
                                                       "trace": "trace.json"}
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "report.json", "trace.json"]  # no temp files


def test_report_json_holds_the_runs_and_a_comparison(report, runs):
    document = json.loads(report[1]["json"].read_text(), parse_constant=_no_constant)
    assert document["schema"] == "edgesdk.report/1" and document["title"] == TITLE
    assert document["runs"] == json.loads(json.dumps(runs))
    comparison = document["comparison"]
    assert comparison["varying"] == ["device", "backend"]
    assert comparison["baseline"] == "reference fp32"
    assert [r["label"] for r in comparison["runs"]] == ["reference fp32", "cpu fp32"]
    assert comparison["runs"][0]["speedup_vs_first"] == 1.0
    second = comparison["runs"][1]
    medians = [run["latency"]["median_ms"] for run in runs]
    assert second["speedup_vs_first"] == pytest.approx(medians[0] / medians[1])
    assert comparison["fastest"] in ("reference fp32", "cpu fp32")
    conv = comparison["time_by_op_type_ms"]["Conv+Relu"]
    assert set(conv) == {"reference fp32", "cpu fp32"} and all(v > 0 for v in conv.values())


def test_trace_follows_the_chrome_trace_event_format(report, runs):
    trace = json.loads(report[1]["trace"].read_text())
    assert trace["displayTimeUnit"] == "ms" and isinstance(trace["traceEvents"], list)
    names: dict[tuple[int, int], str] = {}
    slices: dict[int, list[dict]] = {}
    for event in trace["traceEvents"]:
        assert {"name", "ph", "pid", "tid"} <= set(event), event
        assert isinstance(event["name"], str) and event["name"]
        assert isinstance(event["pid"], int) and isinstance(event["tid"], int)
        if event["ph"] == "M":
            assert event["name"] in ("process_name", "thread_name", "process_sort_index", "thread_sort_index")
            assert isinstance(event["args"], dict)
            if event["name"] in ("process_name", "thread_name"):
                names[(event["pid"], event["tid"] if event["name"] == "thread_name" else -1)] = event["args"]["name"]
        else:
            assert event["ph"] == "X", event
            assert isinstance(event["ts"], (int, float)) and isinstance(event["dur"], (int, float))
            assert event["ts"] >= 0 and event["dur"] >= 0
            slices.setdefault(event["pid"], []).append(event)
    assert sorted(slices) == [1, 2]  # one process per run
    for pid, run in zip((1, 2), runs):
        assert names[(pid, -1)].startswith(run["label"])
        assert all((pid, e["tid"]) in names for e in slices[pid])  # every thread is named
        iteration, *ops = slices[pid]
        assert names[(pid, iteration["tid"])] == "iteration"
        assert [e["name"] for e in ops] == [op["node"] for op in run["ops"]]
        assert [names[(pid, e["tid"])] for e in ops] == [lane_name(op) for op in run["ops"]]
        for before, after in zip(ops, ops[1:]):  # laid end to end
            assert after["ts"] == pytest.approx(before["ts"] + before["dur"], abs=2e-3)
        assert iteration["dur"] == pytest.approx(sum(op["median_ms"] for op in run["ops"]) * 1e3, abs=0.01)
    cpu_lanes = {names[(2, e["tid"])] for e in slices[2]}
    assert {"native (host)", "view (host)"} <= cpu_lanes  # one lane per placement


def test_html_is_self_contained_and_complete(report, runs):
    text = report[1]["html"].read_text()
    assert not EXTERNAL.search(text), EXTERNAL.search(text)
    assert "http://" not in text and "https://" not in text
    assert html.escape(TITLE) in text and TITLE not in text
    assert text.count('<svg class="chart"') == CHARTS_PER_RUN * len(runs) + COMPARISON_CHARTS
    ids = re.findall(r'\bid="([^"]+)"', text)
    assert len(ids) == len(set(ids)), "element ids repeat across charts"
    for run in runs:
        assert f">{html.escape(run['label'])}</h2>" in text
        for op in run["ops"]:
            assert f"<td>{html.escape(op['node'])}</td>" in text
    assert "<h2>Comparison</h2>" in text and "The runs differ in: device, backend." in text


# Appended to a copy of the report: measures every chart as laid out by the browser.
PROBE = """<script>
const charts = [...document.querySelectorAll("svg.chart")].map(svg => {
  const box = svg.getBoundingClientRect(), content = svg.getBBox();
  const uses = [...svg.querySelectorAll("use")];
  return {id: svg.id, width: box.width, height: box.height, contentWidth: content.width,
          contentHeight: content.height, shapes: svg.querySelectorAll("path, rect, use").length,
          text: [...svg.querySelectorAll("text")].map(t => t.textContent).join("|"), uses: uses.length,
          usesDrawn: uses.filter(u => { const b = u.getBBox(); return b.width > 0 || b.height > 0; }).length};
});
const probe = document.createElement("pre");
probe.id = "render-probe";
probe.textContent = JSON.stringify(charts);
document.body.appendChild(probe);
</script>"""


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="chromium-headless-shell is not installed "
                    "(apt install chromium-headless-shell)")
def test_html_charts_render_in_headless_chromium(report, runs, tmp_path):
    page = tmp_path / "probe.html"
    page.write_text(report[1]["html"].read_text().replace("</body>", PROBE + "</body>"))
    proc = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1280,900",
                           "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    found = re.search(r'<pre id="render-probe">(.*?)</pre>', proc.stdout, re.S)
    assert found, f"no probe output; chromium exit {proc.returncode}: {proc.stderr[-2000:]}"
    charts = json.loads(html.unescape(found.group(1)))
    assert len(charts) == CHARTS_PER_RUN * len(runs) + COMPARISON_CHARTS
    for chart in charts:
        assert chart["width"] > 200 and chart["height"] > 100, chart["id"]
        assert chart["contentWidth"] > 100 and chart["contentHeight"] > 50, chart["id"]
        assert chart["shapes"] > 10, chart["id"]
        assert chart["uses"] > 0 and chart["usesDrawn"] == chart["uses"], chart["id"]  # markers resolve
    text = {chart["id"]: chart["text"] for chart in charts}
    assert "Slowest layers: reference fp32" in text["run0-ops"] and "/0/Conv" in text["run0-ops"]
    assert "Time by op type: cpu fp32" in text["run1-optypes"]
    assert "Latency by run" in text["cmp-latency"] and "cpu fp32" in text["cmp-latency"]


def test_one_run_has_no_comparison(runs, tmp_path):
    text = write_reports(runs[:1], tmp_path)["html"].read_text()
    assert "<h2>Comparison</h2>" not in text and text.count('<svg class="chart"') == CHARTS_PER_RUN


def test_without_matplotlib_the_report_keeps_its_tables(runs, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    files = write_reports(runs, tmp_path)
    text = files["html"].read_text()
    assert "Charts omitted: matplotlib is not installed" in text and "<svg" not in text
    assert "<td>/0/Conv</td>" in text and json.loads(files["trace"].read_text())["traceEvents"]


def test_non_finite_numbers_become_null(runs, tmp_path):
    run = copy.deepcopy(runs[0])
    run["environment"]["before"]["temperatures_c"] = {"zone": float("nan")}
    document = json.loads(write_reports([run], tmp_path)["json"].read_text(), parse_constant=_no_constant)
    assert document["runs"][0]["environment"]["before"]["temperatures_c"] == {"zone": None}


def test_bad_runs_and_folders_are_one_line_errors(runs, tmp_path):
    with pytest.raises(InputError, match="non-empty list"):
        write_reports([], tmp_path)
    with pytest.raises(InputError, match=r"run 1: not an edgesdk.profile/1 run profile \(schema None\)"):
        write_reports([runs[0], {"label": "x"}], tmp_path)
    with pytest.raises(InputError, match="run profile without ops"):
        write_reports([{k: v for k, v in runs[0].items() if k != "ops"}], tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(InputError, match="it is a file, not a folder"):
        write_reports(runs, blocker)
    with pytest.raises(InputError, match="cannot create the report folder"):
        write_reports(runs, blocker / "below")


def test_default_out_dir_names_model_target_and_time(tmp_path, monkeypatch):
    class FixedClock(datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime(2025, 1, 2, 3, 4, 5, tzinfo=tz)
    monkeypatch.setattr(report_module, "datetime", FixedClock)
    first = default_out_dir("digits_lenet", "my board/1", parent=tmp_path)
    assert first == tmp_path / "digits_lenet-my_board_1-20250102-030405" and not first.exists()
    first.mkdir()
    assert default_out_dir("digits_lenet", "my board/1", parent=tmp_path).name == first.name + "-2"
    monkeypatch.chdir(tmp_path)
    assert default_out_dir("m", "cpu+opencl") == tmp_path / "m-cpu+opencl-20250102-030405"


# -- edgesdk profile --------------------------------------------------------------------------
def edgesdk(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([EDGESDK, *args], capture_output=True, text=True, timeout=300, cwd=cwd)


def test_cli_compares_two_backends(tmp_path):
    out = tmp_path / "report"
    proc = edgesdk("profile", str(LENET), "--backend", "reference", "--backend", "cpu", "--iters", "3",
                   "--warmup", "1", "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].endswith("2 runs, each 1 warm-up, 3 timed and 3 profiled runs")
    assert any(line.startswith("reference fp32") for line in lines)
    assert any(line.startswith("cpu fp32") for line in lines)
    assert "slowest ops, cpu fp32:" in lines and f"report: {out / 'report.html'}" in lines
    document = json.loads((out / "report.json").read_text())
    assert [run["backend"] for run in document["runs"]] == ["reference", "cpu"]
    assert "backend" in document["comparison"]["varying"]
    assert "<h2>Comparison</h2>" in (out / "report.html").read_text()


def test_cli_json_and_default_folder(tmp_path):
    proc = edgesdk("profile", str(LENET), "--backend", "cpu", "--precision", "fp32", "--precision", "fp16",
                   "--iters", "2", "--warmup", "0", "--top", "2", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    out = Path(data["out_dir"])
    assert out.parent == tmp_path and re.fullmatch(r"digits_lenet-cpu-\d{8}-\d{6}", out.name)
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "report.json", "trace.json"]
    assert [r["label"] for r in data["runs"]] == ["cpu fp32", "cpu fp16"]
    assert data["comparison"]["varying"] == ["precision"]
    assert all(len(r["slowest_ops"]) == 2 and "samples_ms" not in r["latency"] for r in data["runs"])


@pytest.mark.parametrize("args, message", [
    (["--backend", "nope"], "unknown backend 'nope'"),
    (["--iters", "0"], "--iters must be >= 1"),
    (["--out", "{file}"], "it is a file, not a folder"),
    (["--out", "{file}/below"], "cannot create the report folder"),
])
def test_cli_errors_are_one_line_and_exit_2(args, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    argv = ["profile", str(LENET), "--iters", "1", *[a.replace("{file}", str(blocker)) for a in args]]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("edgesdk: error: ") and message in err and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]  # no report folder left behind


def _no_constant(name: str):
    raise ValueError(f"{name} in JSON")
