#!/usr/bin/env python3
"""Real architectures (torchvision, timm, ultralytics, random weights; PP-OCR from the rapidocr wheel)
exported to ONNX and checked against edgesdk's backends (issue 13).

    .venv/bin/python tools/real_models.py setup                 # export venv + rapidocr wheel (idempotent)
    .venv/bin/python tools/real_models.py export [NAMES...] [--exporter legacy|dynamo|both] [--opset 17]
    .venv/bin/python tools/real_models.py report [NAMES...] [--backends reference,cpu,opencl] [--precisions fp32,fp16]
                                                 [--json out.json] [--markdown out.md]
    .venv/bin/python tools/real_models.py list

Everything lands in tools/real_models/.cache (gitignored; EDGESDK_REAL_MODELS_CACHE moves it). The
exports run inside the export venv (torch 2.14.1 + torchvision 0.29.1, which the project venv's torch
2.13 cannot host), one subprocess per model; the checks run in this interpreter's venv (edgesdk,
onnx, onnxruntime), one subprocess per model file. Each is bounded by a timeout: a model that fails
to build, export, load or run is recorded with its one-line error and the run goes on.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "real_models"))

import catalog as C  # noqa: E402  (tools/real_models/catalog.py)

EXPORT_WORKER = C.HERE / "export_worker.py"
CHECK_WORKER = C.HERE / "check_worker.py"
VERSION_PACKAGES = ["torch", "torchvision", "timm", "ultralytics", "onnx", "onnxscript", "numpy"]


def log(msg: str) -> None:
    print(msg, flush=True)


def _stream(cmd: list[str], env: dict | None = None, prefix: str = "    ") -> int:
    """Run cmd, echoing its output (pip's progress) line by line."""
    log(f"  $ {' '.join(cmd)}")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip()
        if line:
            print(prefix + line, flush=True)
    return proc.wait()


def _du(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


def _mb(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB" if n < 2**30 else f"{n / 2**30:.2f} GiB"


# --------------------------------------------------------------------------------------------------
# setup
# --------------------------------------------------------------------------------------------------
def export_python() -> Path:
    return C.EXPORT_VENV / "bin" / "python"


def export_env(**extra: str) -> dict[str, str]:
    """The export venv's environment: offline, and every package's config/cache dir inside the cache
    (ultralytics would otherwise write ~/.config/Ultralytics/settings.json)."""
    return dict(os.environ, YOLO_OFFLINE="1", YOLO_AUTOINSTALL="False", YOLO_VERBOSE="False",
                YOLO_CONFIG_DIR=str(C.CACHE / "ultralytics-config"), TORCH_HOME=str(C.CACHE / "torch-home"),
                HF_HOME=str(C.CACHE / "hf-home"), HF_HUB_OFFLINE="1", MPLBACKEND="Agg",
                MPLCONFIGDIR=str(C.CACHE / "mpl-config"), **extra)


def _probe_versions(python: Path) -> dict[str, str]:
    code = ("import importlib.metadata as m, json, platform\n"
            f"pk = {VERSION_PACKAGES!r}\n"
            "out = {'python': platform.python_version()}\n"
            "for p in pk:\n"
            "    try: out[p] = m.version(p)\n"
            "    except m.PackageNotFoundError: out[p] = 'none'\n"
            "print(json.dumps(out))\n")
    res = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
    return json.loads(res.stdout)


def _import_check(python: Path) -> str | None:
    """None if torch, torchvision, timm, ultralytics, onnx and onnxscript import together, else the error."""
    code = ("import os; os.environ.setdefault('YOLO_OFFLINE', '1')\n"
            "import torch, torchvision, timm, onnx, onnxscript\n"
            "import ultralytics\n"
            "print(torch.__version__, torchvision.__version__)\n")
    res = subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=export_env())
    if res.returncode == 0:
        return None
    lines = [ln for ln in (res.stderr or res.stdout).splitlines() if ln.strip()]
    return lines[-1] if lines else f"exit status {res.returncode}"


def cmd_setup(args: argparse.Namespace) -> int:
    t_all = time.monotonic()
    C.CACHE.mkdir(parents=True, exist_ok=True)
    reqs = list(args.requirement or C.EXPORT_REQUIREMENTS)
    py = export_python()
    stamp = C.EXPORT_VENV / ".edgesdk-requirements"

    log(f"[1/3] export venv at {C.EXPORT_VENV}")
    t = time.monotonic()
    if not py.exists():
        base = getattr(sys, "_base_executable", None) or sys.executable
        rc = _stream([base, "-m", "venv", str(C.EXPORT_VENV)])
        if rc:
            log(f"  FAILED: python -m venv exited {rc}")
            return 1
    else:
        log("  exists")
    log(f"  ({time.monotonic() - t:.1f} s)")

    log(f"[2/3] packages: {' '.join(reqs)}")
    t = time.monotonic()
    wanted = "\n".join(reqs)
    if stamp.exists() and stamp.read_text() == wanted and not args.force and _import_check(py) is None:
        log("  already installed (stamp matches, imports work)")
    else:
        rc = _stream([str(py), "-m", "pip", "install", "--progress-bar", "off", *reqs])
        if rc:
            log(f"  FAILED: pip install exited {rc}")
            return 1
        err = _import_check(py)
        if err:
            log(f"  FAILED: the packages do not import together: {err}")
            return 1
        stamp.write_text(wanted)
    versions = _probe_versions(py)
    C.write_json_atomic(C.VERSIONS_FILE, versions)
    log("  versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    log(f"  ({time.monotonic() - t:.1f} s, venv {_mb(_du(C.EXPORT_VENV))})")

    log(f"[3/3] {C.RAPIDOCR} wheel -> its PP-OCR .onnx files")
    t = time.monotonic()
    rc = fetch_rapidocr()
    log(f"  ({time.monotonic() - t:.1f} s)")
    log(f"setup done in {time.monotonic() - t_all:.1f} s; cache {C.CACHE} holds {_mb(_du(C.CACHE))}")
    return rc


def fetch_rapidocr(wheels: Path | None = None, out_dir: Path | None = None) -> int:
    """Download the rapidocr wheel (pip download, cached in ``wheels``) and unpack its PP-OCR .onnx files
    as ``out_dir/<catalog name>.onnx`` with a ``.json`` each; 0 on success, 1 when pip cannot fetch it.
    Defaults: the tool's cache (``C.WHEELS``, ``C.ONNX_DIR/rapidocr_onnxruntime-1.4.4``); tests/test_real_models.py
    passes its own directories."""
    name, version = C.RAPIDOCR.split("==")
    wheels = wheels or C.WHEELS
    wheels.mkdir(parents=True, exist_ok=True)
    found = sorted(wheels.glob(f"{name}-{version}-*.whl"))
    if not found:
        rc = _stream([sys.executable, "-m", "pip", "download", "--no-deps", "--progress-bar", "off",
                      "--retries", "1", "-d", str(wheels), C.RAPIDOCR])
        found = sorted(wheels.glob(f"{name}-{version}-*.whl"))
        if rc or not found:
            log(f"  FAILED: pip download {C.RAPIDOCR} exited {rc}")
            return 1
    else:
        log(f"  wheel cached: {found[0].name}")
    specs = [s for s in C.CATALOG if s.source == "rapidocr"]
    with zipfile.ZipFile(found[0]) as zf:
        members = {Path(n).name: n for n in zf.namelist() if n.endswith(".onnx")}
        log(f"  .onnx files in the wheel: {', '.join(sorted(members))}")
        for spec in specs:
            spec_dir = out_dir or C.export_dir(spec, {})
            onnx_path = spec_dir / f"{spec.name}.onnx"
            meta_path = spec_dir / f"{spec.name}.json"
            if onnx_path.exists() and meta_path.exists():
                log(f"  {spec.name}: cached")
                continue
            if spec.arch not in members:
                C.write_json_atomic(meta_path, {"name": spec.name, "exporter": "wheel", "status": "failed",
                                                "error": f"{spec.arch} is not in {found[0].name}"})
                log(f"  {spec.name}: FAILED, {spec.arch} not in the wheel")
                continue
            spec_dir.mkdir(parents=True, exist_ok=True)
            tmp = onnx_path.with_name(f".{onnx_path.name}.{os.getpid()}.tmp")
            with zf.open(members[spec.arch]) as src, open(tmp, "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.replace(tmp, onnx_path)
            C.write_json_atomic(meta_path, {
                "name": spec.name, "exporter": "wheel", "status": "ok", "source": C.RAPIDOCR,
                "member": members[spec.arch], "path": str(onnx_path), "bytes": onnx_path.stat().st_size,
                "sha256_16": C.file_sha(onnx_path), "shape": list(spec.shape)})
            log(f"  {spec.name}: {members[spec.arch]} -> {onnx_path}")
    return 0


# --------------------------------------------------------------------------------------------------
# export
# --------------------------------------------------------------------------------------------------
def _exporters(choice: str) -> list[str]:
    return list(C.EXPORTERS) if choice == "both" else [choice]


STRICT_OPSET = False  # --strict-opset: dynamo at exactly --opset (see catalog.DYNAMO_MIN_OPSET)


def stem(spec: C.ModelSpec, exporter: str, opset: int) -> str:
    return C.export_stem(spec, exporter, C.effective_opset(exporter, opset, STRICT_OPSET))


def meta_path(spec: C.ModelSpec, exporter: str, opset: int, versions: dict) -> Path:
    return C.export_dir(spec, versions) / f"{stem(spec, exporter, opset)}.json"


def read_meta(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def cmd_export(args: argparse.Namespace) -> int:
    versions = C.load_versions()
    py = export_python()
    if not versions or not py.exists():
        log("the export venv is missing: run `tools/real_models.py setup` first")
        return 1
    specs = C.select(args.names)
    exporters = _exporters(args.exporter)
    log(f"exporting into {C.ONNX_DIR / C.versions_tag(versions)} ("
        + ", ".join(f"{e} at opset {C.effective_opset(e, args.opset, STRICT_OPSET)}" for e in exporters) + ")")
    t_all = time.monotonic()
    counts: Counter[str] = Counter()
    for spec in specs:
        if spec.source == "rapidocr":
            meta = read_meta(meta_path(spec, "wheel", args.opset, versions))
            if not meta:
                fetch_rapidocr()
                meta = read_meta(meta_path(spec, "wheel", args.opset, versions))
            status = (meta or {}).get("status", "missing")
            counts[status] += 1
            log(f"  {spec.name:34s} wheel   {status} (shipped file, not exported)")
            continue
        todo = []
        for exp in exporters:
            meta = read_meta(meta_path(spec, exp, args.opset, versions))
            if meta and not args.force and (meta["status"] == "ok" or not args.retry_failed):
                counts[f"cached-{meta['status']}"] += 1
                log(f"  {spec.name:34s} {exp:7s} cached: {meta['status']}"
                    + (f" ({meta.get('error')})" if meta["status"] != "ok" else ""))
            else:
                todo.append(exp)
        if not todo:
            continue
        out_dir = C.export_dir(spec, versions)
        out_dir.mkdir(parents=True, exist_ok=True)
        for exp in todo:  # a stale result must not stand in for this attempt
            meta_path(spec, exp, args.opset, versions).unlink(missing_ok=True)
        cmd = [str(py), str(EXPORT_WORKER), "--name", spec.name, "--exporters", ",".join(todo),
               "--opset", str(args.opset), "--out-dir", str(out_dir)] + (["--strict-opset"] if STRICT_OPSET else [])
        env = export_env(OMP_NUM_THREADS=str(args.threads))
        t = time.monotonic()
        error = None
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
            if res.returncode:
                tail = [ln for ln in (res.stderr or res.stdout).splitlines() if ln.strip()]
                error = f"export worker exited {res.returncode}: {tail[-1] if tail else ''}"[:300]
            if args.verbose:
                sys.stdout.write(res.stdout + res.stderr)
        except subprocess.TimeoutExpired:
            error = f"timeout: the export worker ran past {args.timeout} s"
        elapsed = time.monotonic() - t
        for exp in todo:
            for leftover in out_dir.glob(f".{stem(spec, exp, args.opset)}.*.tmp.onnx*"):  # a killed worker's
                leftover.unlink(missing_ok=True)
            mp = meta_path(spec, exp, args.opset, versions)
            meta = read_meta(mp)
            if meta is None:
                meta = {"name": spec.name, "exporter": exp, "status": "failed",
                        "opset": C.effective_opset(exp, args.opset, STRICT_OPSET),
                        "error": error or "the export worker wrote no result", "seconds": round(elapsed, 1),
                        "versions": versions}
                C.write_json_atomic(mp, meta)
            counts[meta["status"]] += 1
            extra = f"{meta.get('seconds', 0):6.1f} s"
            if meta["status"] == "ok":
                extra += f"  {meta.get('bytes', 0) / 2**20:6.1f} MiB  opset {meta.get('file_opset')}"
                if meta.get("network_attempts"):
                    extra += f"  network attempts blocked: {meta['network_attempts']}"
            else:
                extra += f"  {meta.get('error')}"
            log(f"  {spec.name:34s} {exp:7s} {meta['status']:6s} {extra}")
    log(f"export done in {time.monotonic() - t_all:.1f} s: "
        + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    log(f"onnx cache: {_mb(_du(C.ONNX_DIR))}")
    return 0


# --------------------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------------------
def exported_files(specs: list[C.ModelSpec], exporters: list[str], opset: int, versions: dict
                   ) -> list[tuple[C.ModelSpec, str, dict]]:
    rows = []
    for spec in specs:
        for exp in spec.exporters:
            if exp != "wheel" and exp not in exporters:
                continue
            meta = read_meta(meta_path(spec, exp, opset, versions))
            if meta is not None:
                rows.append((spec, exp, meta))
    return rows


def cmd_report(args: argparse.Namespace) -> int:
    versions = C.load_versions()
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
    specs = C.select(args.names)
    rows = exported_files(specs, _exporters(args.exporter), args.opset, versions)
    if not rows:
        log("nothing exported yet: run `tools/real_models.py setup` and `export` first")
        return 1
    C.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    results = []
    t_all = time.monotonic()
    for spec, exp, meta in rows:
        rec = {"model": spec.name, "source": spec.source, "kind": spec.kind, "exporter": exp,
               "shape": list(spec.shape), "export": {k: meta.get(k) for k in ("status", "error", "seconds",
                                                                            "file_opset", "bytes", "checker_error")}}
        if meta.get("status") != "ok":
            rec["status"] = "not exported"
            results.append(rec)
            log(f"  {spec.name:34s} {exp:7s} not exported: {meta.get('error')}")
            continue
        path = Path(meta["path"])
        out = C.RESULTS_DIR / f"{stem(spec, exp, args.opset)}.check.json"
        cache_key = {"sha": meta.get("sha256_16"), "backends": backends, "precisions": precisions,
                     "census": not args.no_census, "edgesdk": _edgesdk_stamp()}
        old = read_meta(out)
        if old and old.get("cache_key") == cache_key and not args.force and old.get("complete"):
            rec.update(old)
            results.append(rec)
            log(f"  {spec.name:34s} {exp:7s} cached check  {_short(rec, backends, precisions)}")
            continue
        cmd = [sys.executable, str(CHECK_WORKER), "--model", str(path), "--shape",
               "x".join(map(str, spec.shape)), "--backends", ",".join(backends),
               "--precisions", ",".join(precisions), "--out", str(out),
               "--threads", str(args.threads)]
        if args.no_census:
            cmd.append("--no-census")
        t = time.monotonic()
        if out.exists():
            out.unlink()
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
            crash = None
            if res.returncode:
                tail = [ln for ln in (res.stderr or res.stdout).splitlines() if ln.strip()]
                crash = f"check worker exited {res.returncode}: {tail[-1] if tail else ''}"[:300]
        except subprocess.TimeoutExpired:
            crash = f"timeout: the check ran past {args.timeout} s"
        got = read_meta(out) or {}
        if crash:  # what the worker finished before it died is kept; the step it was in gets the error
            for p in precisions:
                slot = got.setdefault(_slot(p), {})
                for b in backends:
                    slot.setdefault(b, {"loads": False, "error": crash})
            step = got.get("in_progress")
            if step and step not in backends and step.split("/")[0] not in backends:
                got.setdefault("errors", {})[step] = crash
        got["cache_key"] = cache_key
        got["complete"] = not crash
        got["check_seconds"] = round(time.monotonic() - t, 1)
        C.write_json_atomic(out, got)
        rec.update(got)
        results.append(rec)
        log(f"  {spec.name:34s} {exp:7s} {got['check_seconds']:6.1f} s  {_short(rec, backends, precisions)}")
    log(f"checks done in {time.monotonic() - t_all:.1f} s")
    supported = _supported_ops()
    text = render_report(results, backends, supported, versions, precisions)
    print()
    print(text)
    if args.json:
        C.write_json_atomic(Path(args.json), {"versions": versions, "backends": backends, "precisions": precisions,
                                              "tolerances": TOLERANCE, "results": results,
                                              "machine": _machine(), "edgesdk": _git_state(),
                                              "date": time.strftime("%Y-%m-%d %H:%M %Z")})
        log(f"json -> {args.json}")
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
        log(f"markdown -> {args.markdown}")
    return 0


def _edgesdk_stamp() -> str:
    """A key that changes when edgesdk's source changes (a check is redone then)."""
    root = C.REPO / "edgesdk"
    newest = max((p.stat().st_mtime_ns for p in root.rglob("*") if p.suffix in (".py", ".so", ".cl")), default=0)
    return str(newest)


def _git_state() -> str:
    """The commit edgesdk was checked at, and whether its tree had local changes (read-only git)."""
    try:
        head = subprocess.run(["git", "-C", str(C.REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(C.REPO), "status", "--porcelain", "--", "edgesdk"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return head + (" + local changes in edgesdk/" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _supported_ops() -> list[str]:
    import edgesdk
    return list(edgesdk.supported_operators())


def _machine() -> str:
    import platform
    model = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model} x{os.cpu_count()}, {platform.system()} {platform.release()}, Python {platform.python_version()}"


def _fmt_err(x) -> str:
    if x is None:
        return "-"
    return f"{x:.1e}"


def _slot(precision: str) -> str:
    """Where check_worker puts a precision's per-backend results."""
    return "backends" if precision == "fp32" else f"backends_{precision}"


# issue 13: within 1e-4 of ONNX Runtime in fp32, 1e-2 in fp16 (relative to the output's max |value|)
TOLERANCE = {"fp32": 1e-4, "fp16": 1e-2}


def _short(rec: dict, backends: list[str], precisions: list[str] = ("fp32",)) -> str:
    parts = []
    for p in precisions:
        for b in backends:
            r = rec.get(_slot(p), {}).get(b, {})
            label = b if p == "fp32" else f"{b}/{p}"
            if r.get("loads") and r.get("runs", True) and "max_rel_err" in r:
                parts.append(f"{label} ok {_fmt_err(r.get('max_rel_err'))}")
            elif r.get("loads"):
                parts.append(f"{label} loads, run failed: {r.get('run_error', '')[:80]}")
            elif r.get("unavailable"):
                parts.append(f"{label} n/a")
            else:
                parts.append(f"{label} FAIL")
    err = next((rec["backends"][b].get("error") for b in backends
                if not rec.get("backends", {}).get(b, {}).get("loads")), None)
    return "; ".join(parts) + (f" | {err[:140]}" if err else "")


def _blockers(rec: dict) -> list[str]:
    """Distinct blocker categories of one model (from the census, else from the first load error)."""
    census = rec.get("census") or {}
    if census.get("blockers"):
        return sorted({b["category"] for b in census["blockers"]})
    cats = set()
    for r in rec.get("backends", {}).values():
        if not r.get("loads") and r.get("category"):
            cats.add(r["category"])
    return sorted(cats)


def _fallback_cell(rs: dict[str, dict]) -> str:
    """The cpu/opencl fallback of one precision: "none", or per backend its nodes, ops and MAC shares."""
    parts = []
    loaded = False
    for b, r in rs.items():
        if b == "reference" or not r.get("loads"):
            continue
        loaded = True
        fb = r.get("fallback") or {}
        if fb.get("nodes"):
            ops = ", ".join(f"{op} x{n}" for op, n in sorted(fb.get("ops", {}).items()))
            parts.append(f"{b}: {fb['nodes']} nodes ({ops}; {fb.get('macs_share', 0) * 100:.1f}% MACs, "
                         f"heaviest node {fb.get('max_node_macs_share', 0) * 100:.1f}%)")
    return "; ".join(parts) if parts else ("none" if loaded else "-")


def _err_cell(r: dict, tol: float) -> str:
    if r.get("max_rel_err") is not None:
        e = r["max_rel_err"]
        return _fmt_err(e) + (f" (> {tol:g})" if e > tol else "")
    if r.get("loads"):
        return "run fails"
    if r.get("unavailable"):
        return "n/a"
    return "-" if not r else "no"


def render_report(results: list[dict], backends: list[str], supported: list[str], versions: dict,
                  precisions: list[str] = ("fp32",)) -> str:
    lines = []
    low = [p for p in precisions if p != "fp32"]
    head = ["model", "exporter (opset)", *backends, "missing op types", "first load error", "fp32 max rel err",
            *(f"{p} {b}" for p in low for b in backends), "fp32 fallback", *(f"{p} fallback" for p in low)]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join("---" for _ in head) + "|")
    loads_all = 0
    checked = 0
    over: list[str] = []
    for rec in results:
        ex = rec.get("export") or {}
        opset = ex.get("file_opset") or rec.get("file_opset")
        cells = [rec["model"], rec["exporter"] + (f" ({opset})" if opset else "")
                 + (" INVALID" if ex.get("checker_error") else "")]
        if rec.get("status") == "not exported":
            err = (rec.get("export") or {}).get("error") or ""
            cells += (["-" for _ in backends] + ["-", f"export failed: {_md(err[:160])}", "-"]
                      + ["-" for _ in low for _b in backends] + ["-"] + ["-" for _ in low])
            lines.append("| " + " | ".join(cells) + " |")
            continue
        checked += 1
        bk = rec.get("backends", {})
        ok_all = True
        errs = []
        for b in backends:
            r = bk.get(b, {})
            if r.get("loads") and r.get("max_rel_err") is not None:
                cells.append("yes")
            elif r.get("loads"):
                cells.append("loads, run fails")
                ok_all = False
                errs.append(r.get("run_error", ""))
            elif r.get("unavailable"):
                cells.append("n/a")
            else:
                cells.append("no")
                ok_all = False
                errs.append(r.get("error", ""))
        loads_all += ok_all
        missing = rec.get("missing_ops") or []
        cells.append(", ".join(missing) if missing else "-")
        err = next((e for e in errs if e), "")
        ort_err = (rec.get("errors") or {}).get("onnxruntime")
        err = _trim_error(err) if err else ""
        if ort_err:
            ort_err = re.sub(r"Load model from \S+ failed:", "", ort_err)
            err = (err + "; " if err else "") + f"ONNX Runtime refuses it: {ort_err[:160]}"
        cells.append(_md(err) if err else "-")
        rel = [bk[b].get("max_rel_err") for b in backends if bk.get(b, {}).get("max_rel_err") is not None]
        worst = max(rel) if rel else None
        cells.append(_err_cell({"max_rel_err": worst}, TOLERANCE["fp32"]) if rel else "-")
        if worst is not None and worst > TOLERANCE["fp32"]:
            over.append(f"{rec['model']} {rec['exporter']} fp32 ({_fmt_err(worst)})")
        for p in low:
            for b in backends:
                r = rec.get(_slot(p), {}).get(b, {})
                cells.append(_err_cell(r, TOLERANCE.get(p, 1e-2)))
                if r.get("max_rel_err") is not None and r["max_rel_err"] > TOLERANCE.get(p, 1e-2):
                    over.append(f"{rec['model']} {rec['exporter']} {b}/{p} ({_fmt_err(r['max_rel_err'])})")
        cells.append(_fallback_cell(bk))
        for p in low:
            cells.append(_fallback_cell(rec.get(_slot(p), {})))
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(f"{loads_all} of {checked} exported model files load and run on every backend "
                 f"({', '.join(backends)}); {sum(1 for r in results if r.get('status') == 'not exported')} "
                 f"exports failed.")
    lines.append("")
    tol = ", ".join(f"{p} {TOLERANCE.get(p, 1e-2):g}" for p in precisions)
    lines.append(f"Beyond the tolerance ({tol}; max |edgesdk - ORT fp32| / max |ORT fp32|): "
                 + (", ".join(over) if over else "none") + ".")
    lines.append("")
    # rankings: per distinct architecture (a model counts once whichever exporter needs the op)
    by_model_static: dict[str, set[str]] = defaultdict(set)
    by_model_block: dict[str, set[str]] = defaultdict(set)
    by_file_block: Counter[str] = Counter()
    files = 0
    for rec in results:
        if rec.get("status") == "not exported":
            continue
        files += 1
        for op in rec.get("missing_ops") or []:
            by_model_static[op].add(rec["model"])
        for cat in _blockers(rec):
            by_model_block[cat].add(rec["model"])
            by_file_block[cat] += 1
    lines.append("Blockers ranked by how many models need them (census of every node edgesdk's importer "
                 "refuses, continuing past each; a model counts once across exporters; files = model x "
                 "exporter files affected):")
    lines.append("")
    lines.append("| blocker | models | files | which |")
    lines.append("|---|---|---|---|")
    for cat, models in sorted(by_model_block.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        lines.append(f"| {_md(cat)} | {len(models)} | {by_file_block[cat]} | {', '.join(sorted(models))} |")
    lines.append("")
    lines.append("Op types missing from `edgesdk.supported_operators()`, by models containing them:")
    lines.append("")
    lines.append("| op type | models | which |")
    lines.append("|---|---|---|")
    for op, models in sorted(by_model_static.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        lines.append(f"| {op} | {len(models)} | {', '.join(sorted(models))} |")
    return "\n".join(lines)


def _trim_error(err: str) -> str:
    cut = err.find("; supported operators:")
    return (err[:cut] if cut >= 0 else err)[:180]


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def cmd_list(args: argparse.Namespace) -> int:
    versions = C.load_versions()
    for spec in C.CATALOG:
        states = []
        for exp in spec.exporters:
            meta = read_meta(meta_path(spec, exp, args.opset, versions)) if versions or exp == "wheel" else None
            states.append(f"{exp}:{(meta or {}).get('status', '-')}")
        log(f"{spec.name:34s} {spec.source:12s} {spec.kind:10s} {'x'.join(map(str, spec.shape)):12s} "
            + " ".join(states))
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("setup", help="create the export venv and fetch the rapidocr wheel (idempotent)")
    s.add_argument("--force", action="store_true", help="run pip install even if the stamp matches")
    s.add_argument("--requirement", action="append", help="replace the pinned requirements (repeatable)")
    s.set_defaults(func=cmd_setup)
    for name, func, helptext in (("export", cmd_export, "export models to ONNX (cached)"),
                                 ("report", cmd_report, "check the exports on edgesdk's backends"),
                                 ("list", cmd_list, "the catalog and what is exported")):
        s = sub.add_parser(name, help=helptext)
        s.set_defaults(func=func)
        s.add_argument("--opset", type=int, default=C.DEFAULT_OPSET,
                       help=f"default {C.DEFAULT_OPSET}; dynamo exports use at least {C.DYNAMO_MIN_OPSET}")
        s.add_argument("--strict-opset", action="store_true",
                       help="dynamo at exactly --opset too (torch down-converts from 18; see README)")
        if name == "list":
            continue
        s.add_argument("names", nargs="*", help="catalog names, sources (timm) or kinds (segmenter); default all")
        s.add_argument("--exporter", choices=["legacy", "dynamo", "both"], default="both")
        s.add_argument("--force", action="store_true", help="redo what is cached")
        s.add_argument("--threads", type=int, default=2, help="OMP threads for the worker (default 2)")
        if name == "export":
            s.add_argument("--timeout", type=int, default=900, help="seconds per model (default 900)")
            s.add_argument("--retry-failed", action="store_true", help="retry cached failures")
            s.add_argument("-v", "--verbose", action="store_true", help="echo the workers' output")
        else:
            s.add_argument("--backends", default="reference,cpu,opencl")
            s.add_argument("--precisions", default="fp32,fp16",
                           help="fp16 is checked against the same fp32 ONNX Runtime outputs (default fp32,fp16)")
            s.add_argument("--timeout", type=int, default=600, help="seconds per model file (default 600)")
            s.add_argument("--no-census", action="store_true", help="skip the census of every refused node")
            s.add_argument("--json", help="write every result to this JSON file")
            s.add_argument("--markdown", help="write the tables to this markdown file")
    args = p.parse_args(argv)
    global STRICT_OPSET
    STRICT_OPSET = bool(getattr(args, "strict_opset", False))
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
