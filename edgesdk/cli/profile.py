"""``edgesdk profile``: per-op profiles of one model on one or more backends and precisions, then
one report over all of them (report.html, report.json, trace.json)."""
from __future__ import annotations

import argparse
import itertools
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..profile.latency import format_ms
from ..profile.report import REPORT_FILES, compare_runs, default_out_dir, format_bytes, prepare_out_dir, write_reports
from .inputs import open_session
from .output import emit_json, table


def add_profile_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Register ``profile`` on the CLI's subparsers (``parents``: --json/--debug and the model)."""
    from ..backends import backend_names
    from ..runtime.precision import PRECISIONS
    p = sub.add_parser("profile", parents=parents,
                       help="per-op time, placement and memory on one or more backends; HTML/JSON/trace report")
    p.add_argument("--backend", action="append", metavar="NAME",
                   help=f"one of {', '.join(backend_names())}; repeat to compare (default: reference)")
    p.add_argument("--precision", action="append", choices=PRECISIONS,
                   help="repeat to compare; every backend runs every precision (default: fp32)")
    p.add_argument("--threads", type=int, default=None, help="worker threads (default: backend's)")
    p.add_argument("--warmup", type=int, default=3, help="untimed runs first (default 3)")
    p.add_argument("--iters", type=int, default=20, help="timed runs, and as many profiled runs (default 20)")
    p.add_argument("--out", metavar="DIR", help="report folder (default: ./<model>-<backends>-<YYYYmmdd-HHMMSS>)")
    p.add_argument("--thermal", action="append", metavar="PATH",
                   help="a temperature file (millidegrees) to record with the thermal zones (repeatable)")
    p.add_argument("--power", nargs=2, metavar=("CURRENT", "VOLTAGE"),
                   help="a power supply's current_now and voltage_now files: energy per inference")
    p.add_argument("--top", type=int, default=5, help="slowest ops printed per run (default 5)")
    p.set_defaults(func=cmd_profile)


def cmd_profile(args: argparse.Namespace) -> int:
    from ..profile.collect import profile_session
    from ..progress import Progress
    if args.iters < 1 or args.warmup < 0:
        raise InputError(f"--iters must be >= 1 and --warmup >= 0 (got {args.iters} and {args.warmup})")
    backends, precisions = _distinct(args.backend or ["reference"]), _distinct(args.precision or ["fp32"])
    # Every session is made before anything is measured: a bad backend, precision or model fails at once.
    sessions = [open_session(args, backend=b, precision=p) for b, p in itertools.product(backends, precisions)]
    out = Path(args.out) if args.out else default_out_dir(Path(args.model).stem, "+".join(backends))
    created = not out.exists()
    prepare_out_dir(out)
    try:
        runs = [profile_session(session, warmup=args.warmup, iters=args.iters, thermal=args.thermal,
                                power=dict(zip(("current", "voltage"), args.power)) if args.power else None,
                                progress=None if args.json else Progress(f"profiling {session.backend} "
                                                                         f"{session.precision}"))
                for session in sessions]
        files = write_reports(runs, out)
    except BaseException:
        if created and not any(out.iterdir()):
            out.rmdir()  # no half-made empty folder left behind
        raise
    if args.json:
        emit_json({"out_dir": str(out), "files": {k: str(v) for k, v in files.items()},
                    "comparison": compare_runs(runs), "runs": [run_summary(run, args.top) for run in runs]})
    else:
        print_summary(args.model, runs, files, args.top, notes=not getattr(args, "quiet", False))
    return 0


def _distinct(values: list[str]) -> list[str]:
    return list(dict.fromkeys(values))


def _slowest(run: dict[str, Any], top: int) -> list[dict[str, Any]]:
    return sorted(run["ops"], key=lambda op: -op["median_ms"])[:max(top, 0)]


def run_summary(run: dict[str, Any], top: int) -> dict[str, Any]:
    latency = {k: v for k, v in run["latency"].items() if k != "samples_ms"}
    return {"label": run["label"], "backend": run["backend"], "precision": run["precision"], "device": run["device"],
            "latency": latency, "placements": run["placements"], "peak_memory_bytes": run["memory"]["peak_bytes"],
            "energy": run["energy"], "slowest_ops": _slowest(run, top), "notes": run["notes"]}


def print_summary(model: str, runs: list[dict[str, Any]], files: dict[str, Path], top: int, *,
                  notes: bool = True) -> None:
    """The text report of ``edgesdk profile`` (and ``remote profile``); ``notes=False`` (-q) leaves
    out the runs' notes."""
    first = runs[0]
    print(f"{model}: {len(runs)} run{'s' if len(runs) != 1 else ''}, each {first['warmup']} warm-up, "
          f"{first['iters']} timed and {first['iters']} profiled runs")
    rows = [[r["label"], r["device"], format_ms(r["latency"]["median_ms"]), format_ms(r["latency"]["p90_ms"]),
             format_bytes(r["memory"]["peak_bytes"]), ", ".join(f"{k} {v}" for k, v in r["placements"].items())]
            for r in runs]
    print(table(rows, ["run", "device", "median", "p90", "peak memory", "placements"], right={2, 3, 4}))
    for run in runs:
        total = sum(op["median_ms"] for op in run["ops"]) or 1.0
        rows = [[op["node"], op["op"], op["placement"], format_ms(op["median_ms"]),
                 f"{100 * op['median_ms'] / total:.1f} %"] for op in _slowest(run, top)]
        if rows:
            print(f"\nslowest ops, {run['label']}:")
            print(table(rows, ["node", "op", "placement", "median", "share"], right={3, 4}))
        for note in run["notes"] if notes else ():
            print(f"note ({run['label']}): {note}")
    print()
    for index, key in enumerate(REPORT_FILES):
        hint = "  (open in chrome://tracing or ui.perfetto.dev)" if key == "trace" else ""
        print(f"{'report:' if index == 0 else '':8}{files[key]}{hint}")
