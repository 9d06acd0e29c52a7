"""What ``edgesdk remote`` does on each board, and running it on several boards at once.

Every job gets an open :class:`Connection`, makes sure the SDK is installed, and works in the
target's work directory::

    <workdir>/.edgesdk/install.json   which SDK is installed (see provision)
    <workdir>/venv/                   the SDK's venv
    <workdir>/sdk/<hash>/             the uploaded sdist
    <workdir>/packages/<name>         pushed packages
    <workdir>/inputs/<name>           uploaded inputs
    <workdir>/runs/<id>/              one run's outputs, removed once downloaded

:func:`on_targets` runs one job per target in threads; a failing target yields an error outcome
and never stops the others. Ctrl-C sets a shared event that every connection checks: remote
commands are killed and partial uploads removed before the interrupt propagates.
"""
from __future__ import annotations

import json
import secrets
import shlex
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..errors import EdgeSDKError, InputError, RemoteCommandError
from .connection import DEFAULT_CONNECT_TIMEOUT, Connection
from .inventory import Target
from .provision import INSTALL_TIMEOUT_S, SdkSource, SdkStatus, ensure_sdk
from .transfer import download, upload

DEFAULT_COMMAND_TIMEOUT_S = 600.0
DEFAULT_BACKEND = "cpu"
RUNNER_MODULE = "edgesdk.remote.runner"
ProgressFactory = Callable[[str], Callable[[int, int, str], None] | None]


@dataclass
class RemoteSettings:
    """How to reach boards and how long to wait, shared by every target of one command."""

    known_hosts: str | None = None
    accept_new_host: bool = False
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    command_timeout: float = DEFAULT_COMMAND_TIMEOUT_S
    install_timeout: float = INSTALL_TIMEOUT_S
    sdist: str | None = None  # install this sdist instead of one made from this edgesdk
    progress: ProgressFactory = field(default=lambda label: None)  # label -> progress callback or None
    _source: SdkSource | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def sdk_source(self) -> SdkSource:
        """Computed once (hashing the checkout or the installed package) and shared by every target."""
        with self._lock:
            if self._source is None:
                self._source = SdkSource.from_sdist(self.sdist) if self.sdist else SdkSource.from_this_install()
            return self._source


@dataclass
class Outcome:
    """One target's result, or the one-line error that stopped it."""

    target: Target
    result: Any = None
    error: str | None = None
    exception: BaseException | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


# -- several targets -------------------------------------------------------------------------
def on_targets(targets: list[Target], job: Callable[[Connection], Any], settings: RemoteSettings) -> list[Outcome]:
    """``job(connection)`` on every target at once; outcomes in the order of ``targets``."""
    cancel = threading.Event()
    with ThreadPoolExecutor(max_workers=len(targets), thread_name_prefix="edgesdk-remote") as pool:
        futures = [pool.submit(_attempt, target, job, settings, cancel) for target in targets]
        try:
            while wait(futures, timeout=0.2).not_done:  # short waits keep Ctrl-C responsive
                pass
        except KeyboardInterrupt:
            cancel.set()  # every connection stops its command and cleans up, then we re-raise
            wait(futures)
            raise
    return [future.result() for future in futures]


def _attempt(target: Target, job: Callable[[Connection], Any], settings: RemoteSettings,
             cancel: threading.Event) -> Outcome:
    started = time.monotonic()
    try:
        with Connection.open(target, known_hosts=settings.known_hosts, accept_new_host=settings.accept_new_host,
                             timeout=settings.connect_timeout, cancel=cancel) as conn:
            result = job(conn)
        return Outcome(target, result=result, seconds=time.monotonic() - started)
    except EdgeSDKError as exc:
        return Outcome(target, error=str(exc), exception=exc, seconds=time.monotonic() - started)
    except Exception as exc:  # a bug: report it for this target, keep the others going
        return Outcome(target, error=f"internal error: {type(exc).__name__}: {exc} (rerun with --debug)",
                       exception=exc, seconds=time.monotonic() - started)


# -- the pieces every job uses ---------------------------------------------------------------
@dataclass(frozen=True)
class Board:
    """A connection whose work directory is resolved and whose SDK is installed."""

    conn: Connection
    workdir: str
    sdk: SdkStatus

    @property
    def target(self) -> Target:
        return self.conn.target


def prepare_board(conn: Connection, settings: RemoteSettings) -> Board:
    workdir = conn.resolve(conn.target.workdir)
    sdk = ensure_sdk(conn, settings.sdk_source(), workdir=workdir, install_timeout=settings.install_timeout,
                     progress=settings.progress(f"{conn.target.name}: installing edgesdk"))
    return Board(conn, workdir, sdk)


def run_runner(board: Board, args: list[str], *, timeout: float, what: str) -> dict[str, Any]:
    """``python -m edgesdk.remote.runner ARGS`` in the work directory, with the target's env;
    returns its JSON answer. The runner's one-line errors become this command's errors."""
    env = [f"{name}={value}" for name, value in board.target.env.items()]
    command = (f"cd {shlex.quote(board.workdir)} && exec {shlex.join(['env', *env]) + ' ' if env else ''}"
               f"{shlex.join([board.sdk.python, '-m', RUNNER_MODULE, '--watch-stdin', *args])}")
    result = board.conn.run(command, timeout=timeout, what=what, check=False)
    if result.exit_status != 0:
        line = result.last_error_line()
        reason = line.removeprefix("edgesdk: error: ")
        raise RemoteCommandError(f"{what} failed on the board: {reason}" if reason != line else
                                 f"{what} failed on the board ({result.status_text}): {line}")
    try:
        return json.loads(result.stdout.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise RemoteCommandError(f"{what}: the runner gave no answer ({result.last_error_line()})") from None


def push_file(board: Board, local: Path, folder: str, settings: RemoteSettings):
    return upload(board.conn, local, f"{board.workdir}/{folder}/{local.name}", python=board.target.python,
                  progress=settings.progress(f"{board.target.name}: {local.name}"))


def _sdk_summary(sdk: SdkStatus) -> dict[str, Any]:
    return {"version": sdk.version, "source_hash": sdk.source_hash, "python": sdk.python, "installed": sdk.installed}


# -- the jobs --------------------------------------------------------------------------------
def info_job(settings: RemoteSettings) -> Callable[[Connection], dict[str, Any]]:
    def job(conn: Connection) -> dict[str, Any]:
        board = prepare_board(conn, settings)
        thermal = [arg for path in board.target.thermal for arg in ("--thermal", path)]
        info = run_runner(board, ["info", *thermal], timeout=settings.command_timeout, what="the runner's info")
        return {"workdir": board.workdir, "sdk": _sdk_summary(board.sdk), "info": info}
    return job


def push_job(package: Path, settings: RemoteSettings) -> Callable[[Connection], dict[str, Any]]:
    def job(conn: Connection) -> dict[str, Any]:
        board = prepare_board(conn, settings)
        uploaded = push_file(board, package, "packages", settings)
        return {"workdir": board.workdir, "sdk": _sdk_summary(board.sdk),
                "package": {"path": uploaded.path, "sha256": uploaded.sha256, "size": uploaded.size,
                            "uploaded": not uploaded.skipped}}
    return job


@dataclass(frozen=True)
class RunOptions:
    backend: str | None = None  # None: the target's preferred backend, else "cpu"
    precision: str = "fp32"
    threads: int | None = None
    input: Path | None = None
    seed: int = 0

    def runner_args(self, target: Target) -> list[str]:
        args = ["--backend", self.backend or target.backend or DEFAULT_BACKEND, "--precision", self.precision,
                "--seed", str(self.seed)]
        return args + (["--threads", str(self.threads)] if self.threads is not None else [])


def _push_model(board: Board, package: Path, options: RunOptions, settings: RemoteSettings) -> list[str]:
    """Upload the package (and the input file); the runner arguments that name them."""
    remote_package = push_file(board, package, "packages", settings).path
    args = [remote_package, *options.runner_args(board.target)]
    if options.input is not None:
        args += ["--input", push_file(board, options.input, "inputs", settings).path]
    return args


def run_job(package: Path, options: RunOptions, settings: RemoteSettings,
            output_for: Callable[[Target], Path | None]) -> Callable[[Connection], dict[str, Any]]:
    """One inference on the board; the outputs come back as an .npz (``output_for(target)``, or
    only summarised when that is None)."""
    def job(conn: Connection) -> dict[str, Any]:
        board = prepare_board(conn, settings)
        args = _push_model(board, package, options, settings)
        run_dir = f"{board.workdir}/runs/{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(4)}"
        try:
            answer = run_runner(board, ["run", *args, "--output", f"{run_dir}/outputs.npz"],
                                timeout=settings.command_timeout, what="the run")
            outputs = _fetch_outputs(board.conn, answer["output_file"], output_for(board.target))
        finally:
            _remove_quietly(conn, run_dir)
        return {"workdir": board.workdir, "sdk": _sdk_summary(board.sdk), "run": answer, **outputs}
    return job


def _remove_quietly(conn: Connection, folder: str) -> None:
    """Best effort, also after an interrupt; a board that went away keeps the folder."""
    if not conn.alive:
        return
    try:
        conn.run(f"rm -rf {shlex.quote(folder)}", timeout=60, what="removing the run folder", check=False, cleanup=True)
    except EdgeSDKError:
        pass


def _fetch_outputs(conn: Connection, remote: str, local: Path | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="edgesdk-remote-") as tmp:
        path = download(conn, remote, local if local is not None else Path(tmp) / "outputs.npz")
        with np.load(path, allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
    return {"outputs": arrays, "saved_to": str(local) if local is not None else None}


def profile_job(package: Path, options: RunOptions, settings: RemoteSettings, *, warmup: int,
                iters: int) -> Callable[[Connection], dict[str, Any]]:
    """The run profile (schema edgesdk.profile/1) measured on the board, labelled with the target."""
    if warmup < 0 or iters < 1:
        raise InputError(f"--iters must be >= 1 and --warmup >= 0 (got {iters} and {warmup})")

    def job(conn: Connection) -> dict[str, Any]:
        board = prepare_board(conn, settings)
        args = _push_model(board, package, options, settings)
        target = board.target
        backend = options.backend or target.backend or DEFAULT_BACKEND
        args += ["--warmup", str(warmup), "--iters", str(iters), "--label", f"{target.name} {backend} {options.precision}"]
        args += [arg for path in target.thermal for arg in ("--thermal", path)]
        if target.power:
            args += ["--power-current", target.power["current"], "--power-voltage", target.power["voltage"]]
        return run_runner(board, ["profile", *args], timeout=settings.command_timeout, what="the profile")
    return job
