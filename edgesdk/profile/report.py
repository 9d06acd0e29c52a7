"""Reports over one or more run profiles (:func:`edgesdk.profile.collect.profile_session`):

- ``report.json``: the runs and a comparison summary (schema ``edgesdk.report/1``);
- ``report.html``: self-contained (inline CSS and SVG charts, no URL anywhere): a summary table,
  a comparison across runs when there are several, and per run the slowest layers, time by op
  type, the latency histogram, the per-op table and the environment;
- ``trace.json``: Chrome Trace Event format (:mod:`edgesdk.profile.trace`).

Every file is written to a temporary name and renamed. Charts need matplotlib (the ``host``
extra); without it the HTML says so and keeps its tables.
"""
from __future__ import annotations

import html
import json
import math
import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..fileio import atomic_write_text
from . import charts
from .collect import SCHEMA as RUN_SCHEMA
from .latency import format_ms
from .trace import chrome_trace

Run = dict[str, Any]
REPORT_SCHEMA = "edgesdk.report/1"
REPORT_FILES = {"html": "report.html", "json": "report.json", "trace": "trace.json"}
RUN_KEYS = ("label", "model", "host", "backend", "precision", "device", "latency", "ops", "placements", "memory")
TOP_OPS = 15
# Fields that can tell runs apart, in the order a comparison names them.
COMPARED = {"model": lambda r: r["model"].get("name"), "board": lambda r: r["host"].get("hostname"),
            "device": lambda r: r.get("device"), "backend": lambda r: r.get("backend"),
            "precision": lambda r: r.get("precision"), "threads": lambda r: r.get("threads")}


def default_out_dir(model_name: str, target_name: str, *, parent: str | Path | None = None) -> Path:
    """``<model>-<target>-<YYYYmmdd-HHMMSS>`` under ``parent`` (default: the working directory),
    with a numeric suffix when that folder exists already. Nothing is created."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path(parent) if parent is not None else Path.cwd()
    name = f"{_file_safe(model_name)}-{_file_safe(target_name)}-{stamp}"
    candidate, n = base / name, 2
    while candidate.exists():
        candidate, n = base / f"{name}-{n}", n + 1
    return candidate


def prepare_out_dir(out_dir: str | Path) -> Path:
    """Create ``out_dir`` (and its parents) and check that files can be written there; raises
    InputError with the reason otherwise. Call it before long measurements to fail early."""
    path = Path(out_dir)
    if path.exists() and not path.is_dir():
        raise InputError(f"cannot write the report to {path}: it is a file, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create the report folder {path}: {exc.strerror or exc}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise InputError(f"cannot write the report to {path}: the folder is not writable")
    return path


def write_reports(runs: list[Run], out_dir: str | Path, title: str | None = None) -> dict[str, Path]:
    """Write report.json, report.html and trace.json into ``out_dir``; returns {"json", "html",
    "trace"} -> path."""
    check_runs(runs)
    out = prepare_out_dir(out_dir)
    runs = [{**run, "label": label} for run, label in zip(runs, unique_labels(runs))]
    title = title or default_title(runs)
    comparison = compare_runs(runs)
    document = {"schema": REPORT_SCHEMA, "title": title,
                "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "comparison": comparison, "runs": runs}
    paths = {key: out / name for key, name in REPORT_FILES.items()}
    _write_text(paths["json"], _json(document))
    _write_text(paths["trace"], _json(chrome_trace(runs)))
    _write_text(paths["html"], render_html(runs, comparison, title))
    return paths


def check_runs(runs: Any) -> None:
    if not isinstance(runs, list) or not runs:
        raise InputError("a report needs a non-empty list of run profiles")
    for index, run in enumerate(runs):
        schema = run.get("schema") if isinstance(run, dict) else type(run).__name__
        if schema != RUN_SCHEMA:
            raise InputError(f"run {index}: not an {RUN_SCHEMA} run profile (schema {schema!r})")
        missing = [key for key in RUN_KEYS if key not in run]
        if missing:
            raise InputError(f"run {index} ({run.get('label')!r}): run profile without {', '.join(missing)}")


def unique_labels(runs: list[Run]) -> list[str]:
    """Run labels, made distinct (charts and the trace key on them) by appending #2, #3..."""
    seen: dict[str, int] = {}
    labels = []
    for run in runs:
        label = str(run.get("label") or f"{run['backend']} {run['precision']}")
        seen[label] = seen.get(label, 0) + 1
        labels.append(label if seen[label] == 1 else f"{label} #{seen[label]}")
    return labels


def default_title(runs: list[Run]) -> str:
    models = sorted({run["model"].get("name") or "model" for run in runs})
    hosts = sorted({run["host"].get("hostname") or "?" for run in runs})
    return f"{', '.join(models)} on {', '.join(hosts)}"


def compare_runs(runs: list[Run]) -> dict[str, Any]:
    """What differs between the runs, each run's headline numbers and its speed-up over the
    first run, and the time by op type per run (for charts and for tools reading report.json)."""
    first = runs[0]["latency"]["median_ms"]
    rows = [{"label": run["label"], "model": run["model"].get("name"), "board": run["host"].get("hostname"),
             "device": run.get("device"), "backend": run["backend"], "precision": run["precision"],
             "threads": run.get("threads"), "median_ms": run["latency"]["median_ms"],
             "p90_ms": run["latency"]["p90_ms"], "speedup_vs_first": _ratio(first, run["latency"]["median_ms"]),
             "peak_memory_bytes": run["memory"].get("peak_bytes"),
             "joules_per_inference": (run.get("energy") or {}).get("joules_per_inference")} for run in runs]
    by_type: dict[str, dict[str, float]] = {}
    for run in runs:
        for op in run["ops"]:
            cell = by_type.setdefault(op["op"], {})
            cell[run["label"]] = cell.get(run["label"], 0.0) + op["median_ms"]
    return {"varying": [key for key, get in COMPARED.items() if len({str(get(r)) for r in runs}) > 1],
            "baseline": runs[0]["label"], "fastest": min(rows, key=lambda r: r["median_ms"])["label"],
            "runs": rows, "time_by_op_type_ms": by_type}


# -- HTML -------------------------------------------------------------------------------------
def render_html(runs: list[Run], comparison: dict[str, Any], title: str) -> str:
    from .. import __version__
    missing = charts.matplotlib_missing()
    parts = [f"<h1>{_e(title)}</h1>",
             f'<p class="meta">{len(runs)} run{"s" if len(runs) != 1 else ""}, report written '
             f'{_e(datetime.now(timezone.utc).isoformat(timespec="seconds"))} by edgesdk {_e(__version__)}. '
             "The per-layer trace, trace.json next to this file, opens in chrome://tracing or the Perfetto UI.</p>"]
    if missing:
        parts.append(f'<p class="note">Charts omitted: {_e(missing)}.</p>')
    parts.append(_summary_section(runs))
    if len(runs) > 1:
        parts.append(_comparison_section(runs, comparison, draw=not missing))
    parts += [_run_section(run, index, draw=not missing) for index, run in enumerate(runs)]
    body = "\n".join(parts)
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{_e(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n{body}\n</body>\n</html>\n")


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;max-width:1200px;
     padding:0 16px;color:#222}
h1{font-size:22px;margin-bottom:4px} h2{font-size:18px;margin-top:36px;border-bottom:1px solid #ddd}
.meta,.note{color:#666} .note{font-style:italic}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
th,td{padding:3px 8px;border-bottom:1px solid #eee;text-align:left;vertical-align:top}
th{background:#f4f4f4;position:sticky;top:0} td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
tr:hover td{background:#fafafa}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(540px,1fr));gap:16px;align-items:start}
figure{margin:0;min-width:0}
svg.chart{width:100%;height:auto;display:block}
details{margin:8px 0} summary{cursor:pointer;font-weight:600}
dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:6px 0} dt{color:#666}
dd{margin:0}
"""


def _summary_section(runs: list[Run]) -> str:
    header = ["run", "model", "device", "backend", "precision", "threads", "median", "p90", "placements",
              "peak memory", "hottest zone before \u2192 after", "energy / inference"]
    rows = [[run["label"], run["model"].get("name"), run.get("device"), run["backend"], run["precision"],
             run.get("threads") or "default", _ms(run["latency"]["median_ms"]), _ms(run["latency"]["p90_ms"]),
             ", ".join(f"{k} {v}" for k, v in run["placements"].items()), format_bytes(run["memory"].get("peak_bytes")),
             _temperature_change(run.get("environment") or {}), _energy(run.get("energy"))] for run in runs]
    return "<h2>Summary</h2>\n" + _html_table(header, rows, numeric={6, 7, 9})


def _comparison_section(runs: list[Run], comparison: dict[str, Any], draw: bool) -> str:
    varying = comparison["varying"] or ["nothing recorded (repeated runs)"]
    labels = [run["label"] for run in runs]
    parts = ["<h2>Comparison</h2>",
             f"<p>The runs differ in: {_e(', '.join(varying))}. Baseline (1.00x): {_e(comparison['baseline'])}; "
             f"fastest: {_e(comparison['fastest'])}.</p>"]
    if draw:
        parts.append('<div class="charts">'
                     + _figure(charts.latency_comparison(runs, labels, "cmp-latency"))
                     + _figure(charts.op_type_comparison(runs, labels, "cmp-optypes")) + "</div>")
    rows = [[r["label"], _ms(r["median_ms"]), _ms(r["p90_ms"]),
             f"{r['speedup_vs_first']:.2f}x" if r["speedup_vs_first"] is not None else "n/a",
             format_bytes(r["peak_memory_bytes"]), _energy_joules(r["joules_per_inference"])]
            for r in comparison["runs"]]
    parts.append(_html_table(["run", "median", "p90", "speed-up vs first", "peak memory", "energy / inference"],
                             rows, numeric={1, 2, 3, 4, 5}))
    return "\n".join(parts)


def _run_section(run: Run, index: int, draw: bool) -> str:
    parts = [f'<h2 id="run-{index}">{_e(run["label"])}</h2>', _run_facts(run)]
    if draw:
        parts.append('<div class="charts">'
                     + _figure(charts.op_time_bars(run, f"run{index}-ops", top=TOP_OPS))
                     + _figure(charts.op_type_bars(run, f"run{index}-optypes"))
                     + _figure(charts.latency_histogram(run, f"run{index}-latency")) + "</div>")
    parts.append(f"<details open><summary>Per-op table ({len(run['ops'])} steps, execution order)</summary>"
                 f"{_op_table(run)}</details>")
    parts.append(f"<details><summary>Environment before and after</summary>{_environment_table(run)}</details>")
    return '<section class="run">\n' + "\n".join(parts) + "\n</section>"


def _run_facts(run: Run) -> str:
    model, host, memory, latency = run["model"], run["host"], run["memory"], run["latency"]
    profiled = run.get("op_profile")
    facts = {
        "model": f"{model.get('file') or model.get('name')}: {model.get('nodes')} nodes, "
                 f"{_count(model.get('params'))} params, {_count(model.get('macs'))} MACs",
        "device": f"{run.get('device')} ({run['backend']}, {run['precision']}, "
                  f"threads {run.get('threads') or 'default'})",
        "host": f"{host.get('hostname')}: {host.get('cpu')}, {host.get('cores')} cores, {host.get('os')} "
                f"{host.get('arch')}, Python {host.get('python')}",
        "protocol": f"{run.get('warmup')} warm-up runs, {run.get('iters')} timed runs, {run.get('iters')} "
                    f"profiled runs; started {run.get('started_at')}",
        "latency": f"median {_ms(latency['median_ms'])}, min {_ms(latency['min_ms'])}, p90 {_ms(latency['p90_ms'])}",
        "profiled runs": profiled and f"sum of op medians {_ms(profiled.get('ops_ms_median'))}, wall "
                                      f"{_ms(profiled.get('wall_ms_median'))} (profiling adds per-op overhead)",
        "memory": f"peak {format_bytes(memory.get('peak_bytes'))}: activations "
                  f"{format_bytes(memory.get('arena_bytes'))}, inputs/outputs {format_bytes(memory.get('io_bytes'))}, "
                  f"weights {format_bytes(memory.get('weight_bytes'))} ({memory.get('source', '')})",
        "energy": _energy(run.get("energy"), detailed=True),
        "notes": "; ".join(run.get("notes") or []),
    }
    return "<dl>" + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in facts.items() if v) + "</dl>"


def _op_table(run: Run) -> str:
    total = sum(op["median_ms"] for op in run["ops"]) or 1.0
    rows = [[str(i), op["node"], op["op"], op["placement"], _ms(op["median_ms"]), _ms(op["p90_ms"]),
             _ms(op["min_ms"]), f"{100 * op['median_ms'] / total:.1f} %", op.get("timed_on", ""),
             format_bytes(op.get("output_bytes")), format_bytes(op.get("weight_bytes")),
             " ".join(op.get("kernels") or []), op.get("note", "")] for i, op in enumerate(run["ops"])]
    return _html_table(["#", "node", "op", "placement", "median", "p90", "min", "share", "clock", "output",
                        "weights", "kernels", "note"], rows, numeric={0, 4, 5, 6, 7, 9, 10})


def _environment_table(run: Run) -> str:
    env = run.get("environment") or {}
    before, after = env.get("before") or {}, env.get("after") or {}
    rows = [["CPU MHz (min-max over cores)", _range(before.get("cpu_freq_mhz")), _range(after.get("cpu_freq_mhz"))],
            ["CPU governor", _distinct(before.get("cpu_governor")), _distinct(after.get("cpu_governor"))],
            ["GPU MHz", _gpu(before.get("gpu")), _gpu(after.get("gpu"))],
            ["load average", _load(before.get("load_avg")), _load(after.get("load_avg"))]]
    zones = sorted(set(before.get("temperatures_c") or {}) | set(after.get("temperatures_c") or {}))
    rows += [[f"{zone} \u00b0C", _celsius((before.get("temperatures_c") or {}).get(zone)),
              _celsius((after.get("temperatures_c") or {}).get(zone))] for zone in zones]
    return _html_table(["", "before", "after"], rows, numeric={1, 2})


# -- formatting -------------------------------------------------------------------------------
def format_bytes(n: Any) -> str:
    if not isinstance(n, (int, float)):
        return "n/a"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def _ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def _ms(value: Any) -> str:
    return format_ms(value) if isinstance(value, (int, float)) else "n/a"


def _count(n: Any) -> str:
    if not isinstance(n, (int, float)):
        return "?"
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f}{unit}"
    return str(int(n))


def _energy(energy: dict[str, Any] | None, detailed: bool = False) -> str:
    if not energy:
        return "" if detailed else "n/a"
    text = f"{_energy_joules(energy['joules_per_inference'])} at {energy['mean_power_w']:.2f} W"
    return text + (f" ({energy.get('samples')} samples of {energy.get('source')})" if detailed else "")


def _energy_joules(joules: Any) -> str:
    return f"{joules * 1e3:.3f} mJ" if isinstance(joules, (int, float)) else "n/a"


def _temperature_change(env: dict[str, Any]) -> str:
    before = (env.get("before") or {}).get("temperatures_c") or {}
    after = (env.get("after") or {}).get("temperatures_c") or {}
    if not after:
        return "n/a"
    zone = max(after, key=after.get)
    return f"{_celsius(before.get(zone))} \u2192 {_celsius(after[zone])} \u00b0C ({zone})"


def _celsius(value: Any) -> str:
    return f"{value:.1f}" if isinstance(value, (int, float)) else "n/a"


def _range(values: dict[str, float] | None) -> str:
    return f"{min(values.values()):.0f}-{max(values.values()):.0f}" if values else "n/a"


def _distinct(values: dict[str, str] | None) -> str:
    return ", ".join(sorted(set(values.values()))) if values else "n/a"


def _gpu(gpu: dict[str, Any] | None) -> str:
    return f"{gpu['freq_mhz']:.0f} ({gpu.get('name')}, {gpu.get('governor') or '?'})" if gpu else "n/a"


def _load(load: list[float] | None) -> str:
    return " ".join(f"{x:.2f}" for x in load) if load else "n/a"


def _html_table(header: list[str], rows: list[list[Any]], numeric: set[int] = frozenset()) -> str:
    def cell(tag: str, i: int, value: Any) -> str:
        return f'<{tag}{" class=num" if i in numeric else ""}>{_e(value)}</{tag}>'
    head = "".join(cell("th", i, h) for i, h in enumerate(header))
    body = "\n".join("<tr>" + "".join(cell("td", i, v) for i, v in enumerate(row)) + "</tr>" for row in rows)
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>"


def _figure(svg: str) -> str:
    return f"<figure>{svg}</figure>"


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _file_safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", str(name)).strip("._") or "run"


def _json(document: Any) -> str:
    return json.dumps(_finite(document), indent=1, allow_nan=False)


def _finite(value: Any) -> Any:
    """NaN and infinities are not JSON: None stands for them."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _write_text(path: Path, text: str) -> None:
    atomic_write_text(path, text)
