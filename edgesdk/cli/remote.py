"""``edgesdk remote info|push|run|profile``: the command line over :mod:`edgesdk.remote.commands`.

Registering the parser imports nothing heavy; paramiko is imported when a remote command runs,
so a board (base install, no paramiko) still has a working ``edgesdk`` command.
"""
from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from ..errors import InputError, RemoteError
from .output import EXIT_USAGE, describe_array, emit_json, print_error

EXIT_FAILED = EXIT_USAGE  # like every other edgesdk error


# -- parser ----------------------------------------------------------------------------------
def add_remote_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``remote`` and its subcommands on the CLI's subparsers (``common``: --json/--debug)."""
    from ..backends import backend_names
    from ..runtime.precision import PRECISIONS

    connection = argparse.ArgumentParser(add_help=False)
    connection.add_argument("--targets", metavar="A,B,C", help="several targets at once (instead of TARGET)")
    connection.add_argument("--inventory", metavar="FILE",
                            help="targets file (default: $EDGESDK_INVENTORY, else ~/.config/edgesdk/targets.yaml)")
    connection.add_argument("--known-hosts", metavar="FILE", help="known_hosts to verify host keys against "
                            "(default: ~/.ssh/known_hosts)")
    connection.add_argument("--accept-new-host", action="store_true",
                            help="trust a host key seen for the first time and add it to known_hosts")
    connection.add_argument("--ssh-config", metavar="FILE", help="ssh client config (default: ~/.ssh/config)")
    connection.add_argument("--connect-timeout", type=float, default=10.0, metavar="S", help="default 10 s")
    connection.add_argument("--timeout", type=float, default=600.0, metavar="S",
                            help="limit for each command on the board (default 600 s)")
    connection.add_argument("--install-timeout", type=float, default=3600.0, metavar="S",
                            help="limit for installing the SDK on the board (default 3600 s)")
    connection.add_argument("--sdist", metavar="FILE", help="install this edgesdk sdist on the boards "
                            "(default: built from this checkout, or from the installed edgesdk)")

    model_run = argparse.ArgumentParser(add_help=False)
    model_run.add_argument("--input", help=".npy (single-input models) or .npz (default: seeded random inputs)")
    model_run.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    model_run.add_argument("--backend", choices=backend_names(),
                           help="default: the target's `backend`, else cpu")
    model_run.add_argument("--precision", default="fp32", choices=PRECISIONS)
    model_run.add_argument("--threads", type=int, default=None, help="worker threads (default: backend's)")

    remote = sub.add_parser("remote", help="info, push, run and profile on boards over SSH")
    commands = remote.add_subparsers(dest="remote_command", metavar="SUBCOMMAND", required=True)

    p = commands.add_parser("info", parents=[common, connection],
                            help="OS, CPU, governor, memory, CPU features, OpenCL devices, temperatures")
    p.add_argument("target", nargs="?", metavar="TARGET", help="inventory name or ssh://user@host:port")
    p.set_defaults(func=cmd_info)

    p = commands.add_parser("push", parents=[common, connection],
                            help="upload a package and install the SDK on the board (skips what is there)")
    _target_and_package(p)
    p.set_defaults(func=cmd_push)

    p = commands.add_parser("run", parents=[common, connection, model_run], help="run a package once on the board")
    _target_and_package(p)
    p.add_argument("--output", metavar="FILE.npz", help="save the outputs here (with several targets: "
                   "FILE-<target>.npz)")
    p.set_defaults(func=cmd_run)

    p = commands.add_parser("profile", parents=[common, connection, model_run],
                            help="profile a package on the board: report.html, report.json, trace.json")
    _target_and_package(p)
    p.add_argument("--warmup", type=int, default=3, help="untimed runs first (default 3)")
    p.add_argument("--iters", type=int, default=20, help="timed runs, and as many profiled runs (default 20)")
    p.add_argument("--out", metavar="DIR", help="report folder (default: ./<model>-<targets>-<YYYYmmdd-HHMMSS>)")
    p.add_argument("--top", type=int, default=5, help="slowest ops printed per run (default 5)")
    p.set_defaults(func=cmd_profile)


def _target_and_package(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", nargs="?", metavar="TARGET", help="inventory name or ssh://user@host:port")
    p.add_argument("package", metavar="PKG", help="the .edgepkg (or .onnx) to run")


# -- shared plumbing -------------------------------------------------------------------------
def _commands():
    """The host-side implementation; needs paramiko (the `host` extra)."""
    import importlib.util
    if importlib.util.find_spec("paramiko") is None:
        raise RemoteError("`edgesdk remote` needs paramiko on this machine: pip install paramiko (or, in the "
                          "edgesdk source checkout, pip install -e '.[host]')")
    from ..remote import commands
    return commands


def _targets(args: argparse.Namespace):
    from ..remote.inventory import resolve_targets
    if args.targets and args.target:
        raise InputError("give either TARGET or --targets, not both")
    if args.targets:
        specs = [spec.strip() for spec in args.targets.split(",") if spec.strip()]
    else:
        specs = [args.target] if args.target else []
    return resolve_targets(specs, inventory=args.inventory, ssh_config=args.ssh_config)


def _settings(args: argparse.Namespace, commands, n_targets: int):
    from ..progress import Progress
    for name in ("connect_timeout", "timeout", "install_timeout"):
        if getattr(args, name) <= 0:
            raise InputError(f"--{name.replace('_', '-')} must be > 0")
    show_progress = not args.json and n_targets == 1  # several bars would overwrite one another
    return commands.RemoteSettings(
        known_hosts=args.known_hosts, accept_new_host=args.accept_new_host, connect_timeout=args.connect_timeout,
        command_timeout=args.timeout, install_timeout=args.install_timeout, sdist=args.sdist,
        progress=(lambda label: Progress(label)) if show_progress else (lambda label: None))


def _existing_file(path: str | None, what: str) -> Path | None:
    if path is None:
        return None
    file = Path(path)
    if not file.is_file():
        raise InputError(f"{what} {path!r} not found")
    return file


def _run_options(args: argparse.Namespace, commands):
    if args.threads is not None and args.threads < 1:
        raise InputError(f"--threads must be >= 1, got {args.threads}")
    return commands.RunOptions(backend=args.backend, precision=args.precision, threads=args.threads,
                               input=_existing_file(args.input, "input file"), seed=args.seed)


def _report_failures(args: argparse.Namespace, outcomes) -> int:
    """One line per failed target on stderr; the exit status. --debug re-raises a lone failure."""
    failed = [o for o in outcomes if not o.ok]
    if args.debug and len(outcomes) == 1 and failed:
        raise failed[0].exception
    for outcome in failed:
        print_error(f"{outcome.target.name}: {outcome.error}")
    return EXIT_FAILED if failed else 0


def _json_outcomes(outcomes, render) -> dict[str, Any]:
    return {"targets": [{"target": o.target.name, "address": o.target.address, "ok": o.ok, "seconds": o.seconds,
                         **(render(o.result) if o.ok else {"error": o.error})} for o in outcomes]}


def _execute(args: argparse.Namespace, make_job) -> list:
    """Resolve the targets, build the job (``make_job(commands, settings, targets)``), run it on all."""
    commands = _commands()
    targets = _targets(args)
    settings = _settings(args, commands, len(targets))
    job = make_job(commands, settings, targets)
    return commands.on_targets(targets, job, settings)


# -- info ------------------------------------------------------------------------------------
def cmd_info(args: argparse.Namespace) -> int:
    outcomes = _execute(args, lambda commands, settings, targets: commands.info_job(settings))
    if args.json:
        emit_json(_json_outcomes(outcomes, lambda r: r))
    else:
        for outcome in (o for o in outcomes if o.ok):
            _print_info(outcome.target, outcome.result)
    return _report_failures(args, outcomes)


def _print_info(target, result: dict[str, Any]) -> None:
    from ..remote.transfer import format_size
    info, sdk = result["info"], result["sdk"]
    system, cpu, memory = info["os"], info["cpu"], info["memory"]
    address = target.address if target.address != target.name else ""
    print(f"{target.name} ({', '.join(filter(None, [address, 'hostname ' + info['hostname'], result['workdir']]))})")
    facts = [system.get("distribution"), f"{system['system']} {system['kernel']}", info["arch"], system.get("device"),
             system.get("soc")]
    print(f"  os:       {', '.join(filter(None, facts))}")
    clusters = ", ".join(f"{len(c['cpus'])}x {c['core']}" + (f" @ {c['max_mhz']:.0f} MHz" if c.get("max_mhz") else "")
                         for c in cpu["clusters"])
    physical = f", {cpu['physical_cores']} physical" if cpu.get("physical_cores") else ""
    print(f"  cpu:      {cpu['model']}; {cpu['cores']} cores{physical} ({clusters}); "
          f"governor {cpu.get('governor') or 'unknown'}")
    if cpu.get("freq_mhz"):
        freqs = sorted(cpu["freq_mhz"].values())
        print(f"  clock:    {freqs[0]:.0f}-{freqs[-1]:.0f} MHz now")
    if memory.get("total_bytes"):
        print(f"  memory:   {format_size(memory['total_bytes'])} total, "
              f"{format_size(memory.get('available_bytes') or 0)} available")
    print(f"  features: {' '.join(cpu.get('features') or []) or cpu.get('features_note', '(none)')}")
    if cpu.get("isa_path"):
        print(f"  cpu backend kernels: {cpu['isa_path']} (this CPU runs: {', '.join(cpu['supported_isas'])})")
    if info.get("gpu"):
        print(f"  gpu clock: {info['gpu']['name']} {info['gpu']['freq_mhz']:.0f} MHz")
    if info.get("opencl_note"):
        print(f"  {info['opencl_note']}")
    for device in info.get("opencl") or []:
        summary = ", ".join(f"{key} {device[key]}" for key in ("type", "opencl_version", "compute_units") if key in device)
        print(f"  opencl [{device.get('index')}]: {device.get('device', '?')} ({summary})")
    temperatures = info.get("temperatures_c") or {}
    if temperatures:
        print("  temperatures: " + ", ".join(f"{name} {value:.1f} C" for name, value in temperatures.items()))
    state = "installed now" if sdk["installed"] else "installed"
    print(f"  edgesdk:  {sdk['version']} {state} ({sdk['python']}, Python {info['python']['version']})")


# -- push ------------------------------------------------------------------------------------
def cmd_push(args: argparse.Namespace) -> int:
    package = _existing_file(args.package, "package")
    outcomes = _execute(args, lambda commands, settings, targets: commands.push_job(package, settings))
    if args.json:
        emit_json(_json_outcomes(outcomes, lambda r: r))
    else:
        from ..remote.transfer import format_size
        for outcome in (o for o in outcomes if o.ok):
            r = outcome.result
            sdk = f"edgesdk {r['sdk']['version']} {'installed' if r['sdk']['installed'] else 'already installed'}"
            pkg = r["package"]
            state = "uploaded" if pkg["uploaded"] else "already there"
            print(f"{outcome.target.name}: {sdk}; {package.name} {state} ({format_size(pkg['size'])}, "
                  f"sha256 {pkg['sha256'][:12]}) at {pkg['path']}")
    return _report_failures(args, outcomes)


# -- run -------------------------------------------------------------------------------------
def _output_path(output: str | None, target_name: str, several: bool) -> Path | None:
    if output is None:
        return None
    path = Path(output)
    if not several:
        return path
    return path.with_name(f"{path.stem}-{_file_safe(target_name)}{path.suffix or '.npz'}")


def _file_safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "target"


def cmd_run(args: argparse.Namespace) -> int:
    package = _existing_file(args.package, "package")

    def make_job(commands, settings, targets):
        several = len(targets) > 1
        return commands.run_job(package, _run_options(args, commands), settings,
                                lambda target: _output_path(args.output, target.name, several))

    outcomes = _execute(args, make_job)
    if args.json:
        emit_json(_json_outcomes(outcomes, lambda r: {
            "run": r["run"], "saved_to": r["saved_to"],
            "outputs": {name: describe_array(value) for name, value in r["outputs"].items()}}))
    else:
        for outcome in (o for o in outcomes if o.ok):
            _print_run(outcome.target.name, outcome.result, describe_array)
        _print_agreement([o for o in outcomes if o.ok])
    return _report_failures(args, outcomes)


def _print_run(name: str, result: dict[str, Any], describe) -> None:
    run = result["run"]
    print(f"{name}: {run['backend']} {run['precision']}, load {run['load_ms']:.1f} ms, run {run['run_ms']:.3f} ms")
    for output, value in result["outputs"].items():
        info = describe(value)
        print(f"  {output}: shape {info['shape']} {info['dtype']}  min {info['min']:.6g}  max {info['max']:.6g}  "
              f"mean {info['mean']:.6g}")
        if "top5" in info:
            print("    top-5: " + ", ".join(f"{c} ({s:.4g})" for c, s in info["top5"]))
    if result["saved_to"]:
        print(f"  saved outputs to {result['saved_to']}")


def _print_agreement(outcomes) -> None:
    """With several boards: how far each one's outputs are from the first one's."""
    import numpy as np
    if len(outcomes) < 2:
        return
    first = outcomes[0]
    for other in outcomes[1:]:
        diffs = [float(np.max(np.abs(other.result["outputs"][k].astype(np.float64) - v)))
                 for k, v in first.result["outputs"].items()
                 if k in other.result["outputs"] and other.result["outputs"][k].shape == v.shape]
        print(f"max |{other.target.name} - {first.target.name}|: {max(diffs) if diffs else float('nan'):.3g}")


# -- profile ---------------------------------------------------------------------------------
def cmd_profile(args: argparse.Namespace) -> int:
    from ..profile.report import compare_runs, default_out_dir, prepare_out_dir, write_reports
    from .profile import print_summary, run_summary
    package = _existing_file(args.package, "package")
    commands = _commands()
    targets = _targets(args)
    out = Path(args.out) if args.out else default_out_dir(package.stem, "+".join(t.name for t in targets))
    created = not out.exists()
    prepare_out_dir(out)  # fail before measuring, not after
    settings = _settings(args, commands, len(targets))
    job = commands.profile_job(package, _run_options(args, commands), settings, warmup=args.warmup, iters=args.iters)
    try:
        outcomes = commands.on_targets(targets, job, settings)
        runs = [o.result for o in outcomes if o.ok]
        files = write_reports(runs, out) if runs else None
    finally:
        if created and out.is_dir() and not any(out.iterdir()):
            out.rmdir()  # every target failed: no empty report folder left behind
    if args.json:
        emit_json({"out_dir": str(out) if files else None, "files": {k: str(v) for k, v in (files or {}).items()},
                    "comparison": compare_runs(runs) if runs else None,
                    **_json_outcomes(outcomes, lambda r: run_summary(r, args.top))})
    elif files:
        print_summary(package.name, runs, files, args.top, notes=not getattr(args, "quiet", False))
    return _report_failures(args, outcomes)
