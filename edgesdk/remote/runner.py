"""The board side of ``edgesdk remote``: ``python -m edgesdk.remote.runner info|run|profile``.

It imports only the base SDK (no paramiko, no matplotlib) and answers with one JSON document on
stdout; everything else the process prints (library warnings, compiler logs) is sent to stderr
so the answer stays parseable. Errors: one line on stderr, exit status 2 (EdgeSDKError) or 1.

``--watch-stdin`` makes the runner exit as soon as its stdin closes. The host keeps it open for
the life of the command, so a host that is killed, or a connection that drops, never leaves a
runner behind on the board.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Sequence, TextIO

# ARM's "CPU part" numbers (implementer 0x41) of the cores found in phones and boards.
_ARM_PARTS = {
    "0xd03": "Cortex-A53", "0xd04": "Cortex-A35", "0xd05": "Cortex-A55", "0xd07": "Cortex-A57",
    "0xd08": "Cortex-A72", "0xd09": "Cortex-A73", "0xd0a": "Cortex-A75", "0xd0b": "Cortex-A76",
    "0xd0c": "Neoverse-N1", "0xd0d": "Cortex-A77", "0xd0e": "Cortex-A76AE", "0xd40": "Neoverse-V1",
    "0xd41": "Cortex-A78", "0xd44": "Cortex-X1", "0xd46": "Cortex-A510", "0xd47": "Cortex-A710",
    "0xd48": "Cortex-X2", "0xd49": "Neoverse-N2", "0xd4b": "Cortex-A78C", "0xd4d": "Cortex-A715",
    "0xd4e": "Cortex-X3", "0xd80": "Cortex-A520", "0xd81": "Cortex-A720", "0xd82": "Cortex-X4",
}


# -- info ------------------------------------------------------------------------------------
def board_info(thermal: Sequence[str] = ()) -> dict[str, Any]:
    """What `edgesdk remote info` shows: OS, CPU (model, clusters, governor, features), memory,
    OpenCL devices, temperatures, the Python and SDK that run here."""
    from edgesdk import __version__
    from edgesdk.profile.sensors import read_environment
    environment = read_environment(thermal)
    info: dict[str, Any] = {
        "hostname": platform.node(),
        "os": _os_info(),
        "arch": platform.machine(),
        "cpu": _cpu_info(environment),
        "memory": _memory_info(),
        "gpu": environment["gpu"],
        "temperatures_c": environment["temperatures_c"],
        "python": {"executable": sys.executable, "version": platform.python_version()},
        "edgesdk": __version__,
    }
    info["cpu"].update(_native_cpu())
    info["opencl"], info["opencl_note"] = _opencl_devices()
    return info


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip("\0\n ")
    except (OSError, UnicodeDecodeError):
        return None


def _getprop(name: str) -> str | None:
    """An Android system property (Termux has getprop on its PATH)."""
    try:
        value = subprocess.run(["getprop", name], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return value or None


def _os_info() -> dict[str, Any]:
    info: dict[str, Any] = {"system": platform.system(), "kernel": platform.release()}
    android = _getprop("ro.build.version.release") if Path("/system/build.prop").exists() else None
    if android:
        info["distribution"] = f"Android {android}"
        info["device"] = " ".join(filter(None, (_getprop("ro.product.manufacturer"), _getprop("ro.product.model"))))
        info["soc"] = _getprop("ro.soc.model") or _getprop("ro.board.platform")
        return info
    release = _read("/etc/os-release") or ""
    pretty = re.search(r'^PRETTY_NAME="?([^"\n]*)"?', release, re.M)
    info["distribution"] = pretty.group(1) if pretty else None
    info["device"] = _read("/proc/device-tree/model")  # "Raspberry Pi 4 Model B Rev 1.4"
    return info


def _cpu_info(environment: dict[str, Any]) -> dict[str, Any]:
    cpus = _cpuinfo_blocks()
    clusters: dict[tuple, list[str]] = {}
    for index, block in enumerate(cpus):
        name = f"cpu{block.get('processor', index)}"
        key = (_core_name(block), _read(f"/sys/devices/system/cpu/{name}/cpufreq/cpuinfo_max_freq"))
        clusters.setdefault(key, []).append(name)
    governors = sorted(set(environment["cpu_governor"].values()))
    return {
        "model": _cpu_model(cpus),
        "cores": os.cpu_count(),
        "physical_cores": _physical_cores(),
        "clusters": [{"core": core, "cpus": names, "max_mhz": int(khz) / 1e3 if khz and khz.isdigit() else None}
                     for (core, khz), names in clusters.items()],
        "governor": ", ".join(governors) if governors else None,
        "freq_mhz": environment["cpu_freq_mhz"],
    }


def _cpuinfo_blocks() -> list[dict[str, str]]:
    blocks, current = [], {}
    for line in (_read("/proc/cpuinfo") or "").splitlines() + [""]:
        if not line.strip():
            if "processor" in current:
                blocks.append(current)
            current = {}
            continue
        key, _, value = line.partition(":")
        current[key.strip()] = value.strip()
    return blocks


def _core_name(block: dict[str, str]) -> str:
    if block.get("model name"):
        return block["model name"]
    part = block.get("CPU part", "").lower()
    if block.get("CPU implementer", "").lower() == "0x41" and part in _ARM_PARTS:
        return _ARM_PARTS[part]
    return f"part {part}" if part else platform.machine()


def _cpu_model(cpus: list[dict[str, str]]) -> str:
    """x86: the model name; ARM: the cores by cluster, e.g. "4x Cortex-A55 + 4x Cortex-A76"."""
    if not cpus:
        return platform.processor() or platform.machine()
    counts: dict[str, int] = {}
    for block in cpus:
        counts[_core_name(block)] = counts.get(_core_name(block), 0) + 1
    if len(counts) == 1 and "model name" in cpus[0]:
        return cpus[0]["model name"]
    return " + ".join(f"{n}x {name}" for name, n in counts.items())


def _physical_cores() -> int | None:
    try:
        from edgesdk.backends.cpu import physical_cores
        return physical_cores()
    except Exception:  # the cpu backend (native module) may not have built on this board
        return None


def _native_cpu() -> dict[str, Any]:
    """CPU features as the native module detects them (what the cpu backend dispatches on)."""
    try:
        from edgesdk import native
        features = native.cpu_features()
        return {"vendor": features.vendor,
                "features": sorted(name for name, present in features.flags.items() if present),
                "isa_path": native.active_isa(), "supported_isas": native.supported_isas()}
    except Exception as exc:
        return {"features": [], "features_note": f"native module unavailable: {exc}"}


def _opencl_devices() -> tuple[list[dict[str, Any]], str | None]:
    try:
        from edgesdk.backends.opencl import describe_devices
        return describe_devices(), None
    except Exception as exc:  # no pyopencl, no ICD, no platform: say why instead of failing info
        return [], f"no OpenCL device listed: {exc}"


def _memory_info() -> dict[str, int | None]:
    fields = {}
    for line in (_read("/proc/meminfo") or "").splitlines():
        key, _, value = line.partition(":")
        parts = value.split()
        if parts and parts[0].isdigit():
            fields[key] = int(parts[0]) * 1024
    return {"total_bytes": fields.get("MemTotal"), "available_bytes": fields.get("MemAvailable")}


# -- run and profile -------------------------------------------------------------------------
def _session(args: argparse.Namespace):
    from edgesdk.runtime.session import Session
    return Session(args.package, backend=args.backend, precision=args.precision, threads=args.threads)


def _feeds(args: argparse.Namespace, session) -> dict:
    """From --input (.npy/.npz, as `edgesdk run --input`), else seeded random inputs."""
    from edgesdk.cli.inputs import load_feeds
    from edgesdk.profile.collect import random_feeds
    if args.input is None:
        return random_feeds(session, args.seed)
    return load_feeds(argparse.Namespace(random=False, input=args.input, seed=args.seed), session)


def run_once(args: argparse.Namespace) -> dict[str, Any]:
    """One inference; the outputs go to ``--output`` (.npz), the answer says where and how long."""
    import numpy as np
    from edgesdk.fileio import atomic_path
    started = time.perf_counter()
    session = _session(args)
    feeds = _feeds(args, session)
    loaded = time.perf_counter()
    outputs = session.run(feeds)
    ran = time.perf_counter()
    with atomic_path(args.output, fsync=False) as tmp, open(tmp, "wb") as f:
        np.savez(f, **outputs)  # (a file object stops numpy from appending ".npz")
    return {"backend": session.backend, "precision": session.precision, "threads": session.threads,
            "output_file": str(Path(args.output)), "outputs": list(outputs), "load_ms": (loaded - started) * 1e3,
            "run_ms": (ran - loaded) * 1e3}


def profile(args: argparse.Namespace) -> dict[str, Any]:
    """The run profile of :func:`edgesdk.profile.collect.profile_session` (schema edgesdk.profile/1)."""
    from edgesdk.profile.collect import profile_session
    session = _session(args)
    feeds = _feeds(args, session)
    power = {"current": args.power_current, "voltage": args.power_voltage} if args.power_current else None
    return profile_session(session, feeds, warmup=args.warmup, iters=args.iters, label=args.label,
                           thermal=args.thermal or None, power=power)


# -- process plumbing ------------------------------------------------------------------------
def _watch_stdin() -> None:
    """Exit the whole process when stdin reaches EOF (the host or the connection went away)."""
    def watch() -> None:
        # os.read, not sys.stdin: a daemon thread blocked inside a buffered reader holds its
        # lock, and the interpreter aborts at exit when it cannot take that lock.
        try:
            while os.read(0, 1 << 12):
                pass
        except OSError:
            pass
        os._exit(3)
    threading.Thread(target=watch, name="edgesdk-stdin-watch", daemon=True).start()


def _answer_channel() -> TextIO:
    """The real stdout for the JSON answer; fd 1 is pointed at stderr so that stray prints from
    libraries (C code included) cannot corrupt the answer."""
    answer = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    return answer


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m edgesdk.remote.runner",
                                     description="edgesdk's board-side runner (driven by `edgesdk remote`)")
    parser.add_argument("--watch-stdin", action="store_true", help="exit when stdin closes")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info")
    p.add_argument("--thermal", action="append", default=[], metavar="PATH")
    for name in ("run", "profile"):
        p = sub.add_parser(name)
        p.add_argument("package")
        p.add_argument("--input", help=".npy or .npz (default: seeded standard-normal inputs)")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--backend", default="cpu")
        p.add_argument("--precision", default="fp32")
        p.add_argument("--threads", type=int, default=None)
    sub.choices["run"].add_argument("--output", required=True, help="the .npz to write")
    p = sub.choices["profile"]
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--label")
    p.add_argument("--thermal", action="append", default=[], metavar="PATH")
    p.add_argument("--power-current", metavar="PATH")
    p.add_argument("--power-voltage", metavar="PATH")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.watch_stdin:
        _watch_stdin()
    answer = _answer_channel()
    try:
        if args.command == "info":
            result = board_info(args.thermal)
        elif args.command == "run":
            result = run_once(args)
        else:
            result = profile(args)
    except Exception as exc:
        from edgesdk.errors import EdgeSDKError
        if isinstance(exc, EdgeSDKError):
            print(f"edgesdk: error: {exc}", file=sys.stderr)
            return 2
        traceback.print_exc()
        return 1
    answer.write(json.dumps(result, default=_json_default) + "\n")
    answer.flush()
    return 0


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


if __name__ == "__main__":
    sys.exit(main())
