"""The SDK on the board: an sdist made here, pip-installed there into ``<workdir>/venv``.

The sdist comes from whatever edgesdk this is: a source checkout (an editable install) is built
with its PEP 517 backend; a pip-installed (non-editable) edgesdk assembles it from its own files,
since the wheel carries the build files a board needs (``edgesdk/_source``: pyproject.toml,
CMakeLists.txt, README.md, the C++ sources; see CMakeLists.txt's install rules).

The board compiles the native module for its own CPU. A marker, ``<workdir>/.edgesdk/install.json``,
records the version and the source hash that were installed and the interpreter that runs them;
when both match this machine's, provisioning is one short command. The sdist is made once per
source hash and cached under ``~/.cache/edgesdk/sdist`` (``$XDG_CACHE_HOME`` honoured).

The venv is made with ``--system-site-packages`` so that numpy and friends from the board's
distribution (apt, Termux ``pkg``) are reused instead of compiled.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .. import __version__
from ..errors import ProvisionError, RemoteCommandError
from .connection import Connection
from .transfer import run_python, upload, write_text_atomically

MARKER = ".edgesdk/install.json"
VENV_DIR = "venv"
SDK_DIR = "sdk"
MIN_BOARD_PYTHON = (3, 10)  # pyproject's requires-python
INSTALL_TIMEOUT_S = 3600.0  # a Raspberry Pi compiling the native module (and any dependency without a wheel)
STEP_TIMEOUT_S = 300.0
# Top-level folders that do not change what gets installed (the sdist carries them, the wheel not).
_NOT_INSTALLED = {"tests", "tools", "out", "build", "dist", ".venv", ".ci", ".git"}
PACKAGE_DIR = Path(__file__).resolve().parents[1]  # the edgesdk package this runs from
# In an installed wheel: the build files CMake installs into the package (sdist root -> here).
INSTALLED_BUILD_DIR = "_source"
# Folders a wheel carries inside the package that an sdist holds at its top level (CMake installs
# them into the package from there).
_TOP_LEVEL_DATA = ("cl_kernels", "device_configs")
# Build products and caches in an installed package: never part of an sdist.
_BUILD_PRODUCTS = (".so", ".pyd", ".dylib", ".pyc", ".pyo")

# Runs on the board with the target's python: its version and what the marker says.
_PROBE = r"""
import json, os, sys
marker_path = os.path.join(sys.argv[1], sys.argv[2])
try:
    with open(marker_path) as f:
        marker = json.load(f)
except (OSError, ValueError):
    marker = None
runner = marker.get("python") if isinstance(marker, dict) else None
print(json.dumps({"version": list(sys.version_info[:3]), "marker": marker,
                  "runner_ok": bool(runner) and os.access(runner, os.X_OK)}))
"""


# -- this machine's side ---------------------------------------------------------------------
def source_root() -> Path | None:
    """The checkout edgesdk runs from (an editable install), or None for an installed wheel."""
    root = Path(__file__).resolve().parents[2]
    pyproject = root / "pyproject.toml"
    if pyproject.is_file() and re.search(r'^name\s*=\s*"edgesdk"', pyproject.read_text(), re.M):
        return root
    return None


def source_files(root: Path) -> list[str]:
    """Files that make up the installed SDK: git's view (tracked + untracked, not ignored) when
    the checkout is a git work tree, else a walk that skips build products."""
    try:
        listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                                capture_output=True, check=True, timeout=60).stdout.decode().split("\0")
    except (OSError, subprocess.SubprocessError):
        listed = [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()
                  and not any(part.startswith(".") or part == "__pycache__" for part in p.relative_to(root).parts)
                  and p.suffix not in (".so", ".pyc", ".pyd")]
    return sorted(name for name in listed
                  if name and name.split("/", 1)[0] not in _NOT_INSTALLED and (root / name).is_file())


def source_hash(root: Path) -> str:
    return files_hash({name: root / name for name in source_files(root)})


def files_hash(files: dict[str, Path]) -> str:
    """What the marker compares: names and contents (not times) of the files that get installed."""
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + hashlib.sha256(files[name].read_bytes()).digest())
    return h.hexdigest()


def installed_sources(package_dir: Path = PACKAGE_DIR) -> dict[str, Path] | None:
    """The sdist a pip-installed edgesdk amounts to, as member name (below the sdist's top
    folder) -> file: the build files from ``edgesdk/_source`` and ``cl_kernels/`` and
    ``device_configs/`` at the top, every other file of the package under ``edgesdk/``. None
    when the package carries no build files (a source checkout)."""
    build = package_dir / INSTALLED_BUILD_DIR
    if not all((build / name).is_file() for name in ("pyproject.toml", "CMakeLists.txt")):
        return None
    files: dict[str, Path] = {}
    for path in package_dir.rglob("*"):
        parts = path.relative_to(package_dir).parts
        if (not path.is_file() or path.suffix in _BUILD_PRODUCTS
                or any(part == "__pycache__" or part.startswith(".") for part in parts)):
            continue  # compiled for this machine, or a stray temp/dot file
        if parts[0] == INSTALLED_BUILD_DIR:
            name = "/".join(parts[1:])
        elif parts[0] in _TOP_LEVEL_DATA:
            name = "/".join(parts)
        else:
            name = "edgesdk/" + "/".join(parts)
        files[name] = path
    return files


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "edgesdk" / "sdist"


@dataclass
class SdkSource:
    """What gets installed on boards: this edgesdk (its checkout built into an sdist, or the
    installed package assembled into one, on first need) or a given sdist file. Shared by the
    threads of a multi-target command."""

    version: str
    hash: str
    root: Path | None = None  # a source checkout
    files: dict[str, Path] | None = field(default=None, repr=False)  # an installed package's sdist members
    _sdist: Path | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def from_this_install(cls) -> "SdkSource":
        """The edgesdk running here: its source checkout, else the installed package."""
        root = source_root()
        if root is not None:
            return cls(version=__version__, hash=source_hash(root), root=root)
        files = installed_sources()
        if files is None:
            raise ProvisionError(f"this edgesdk ({PACKAGE_DIR}) is neither a source checkout nor an installed wheel "
                                 f"with build files, so there is nothing to install on the board: pass --sdist FILE "
                                 f"(an edgesdk sdist) or reinstall edgesdk with pip")
        return cls(version=__version__, hash=files_hash(files), files=files)

    @classmethod
    def from_sdist(cls, path: str | os.PathLike) -> "SdkSource":
        sdist = Path(path).expanduser().resolve()
        version = _sdist_version(sdist)
        return cls(version=version, hash=hashlib.sha256(sdist.read_bytes()).hexdigest(), _sdist=sdist)

    def sdist(self) -> Path:
        with self._lock:
            if self._sdist is None:
                if self.root is not None:
                    self._sdist = build_sdist(self.root, self.hash)
                else:
                    assert self.files is not None, "an SdkSource has a checkout, installed files or an sdist"
                    self._sdist = assemble_sdist(self.files, self.version, self.hash)
            return self._sdist


def _sdist_version(sdist: Path) -> str:
    try:
        with tarfile.open(sdist) as tar:
            info = next(m for m in tar.getmembers() if m.name.count("/") == 1 and m.name.endswith("/PKG-INFO"))
            text = tar.extractfile(info).read().decode()
    except (OSError, tarfile.TarError, StopIteration):
        raise ProvisionError(f"--sdist {sdist}: not an sdist (.tar.gz with a PKG-INFO)") from None
    name = re.search(r"^Name:\s*(\S+)", text, re.M)
    version = re.search(r"^Version:\s*(\S+)", text, re.M)
    if not name or name.group(1).lower() != "edgesdk" or not version:
        raise ProvisionError(f"--sdist {sdist}: not an edgesdk sdist")
    return version.group(1)


def build_sdist(root: Path, digest: str, cache: Path | None = None) -> Path:
    """The sdist of ``root``, built with its PEP 517 backend in this environment (no isolation,
    so no download) and cached by source hash under ``cache`` (default :func:`cache_dir`)."""
    folder = (cache or cache_dir()) / digest[:32]
    cached = sorted(folder.glob("edgesdk-*.tar.gz"))
    if cached:
        return cached[0]
    backend = re.search(r'^build-backend\s*=\s*"([^"]+)"', (root / "pyproject.toml").read_text(), re.M)
    if backend is None:
        raise ProvisionError(f"{root / 'pyproject.toml'} names no build-backend")
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".build-") as tmp:
        hook = (f"import sys, {backend.group(1)} as backend; "
                f"print(backend.build_sdist(sys.argv[1]))")
        done = subprocess.run([sys.executable, "-c", hook, tmp], cwd=root, capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            module = backend.group(1).split(".")[0]
            raise ProvisionError(f"building the sdist for the board failed: {last} (needs {module} here: "
                                 f"pip install {module.replace('_', '-')}; or pass --sdist FILE)")
        built = Path(tmp) / done.stdout.strip().splitlines()[-1]
        _publish(Path(tmp), folder)
    return folder / built.name


def _publish(tmp: Path, folder: Path) -> None:
    """Rename the finished ``tmp`` folder to the cache ``folder``: atomic, and another process
    that built the same hash meanwhile wins without harm."""
    try:
        os.rename(tmp, folder)
    except OSError:
        if not folder.is_dir():
            raise
        shutil.rmtree(tmp, ignore_errors=True)


def assemble_sdist(files: dict[str, Path], version: str, digest: str, cache: Path | None = None) -> Path:
    """``edgesdk-VERSION.tar.gz`` holding ``files`` (see :func:`installed_sources`) and a PKG-INFO,
    cached by ``digest`` like :func:`build_sdist`. Needs no build backend here: the board's pip
    builds it with the backend pyproject.toml names."""
    folder = (cache or cache_dir()) / digest[:32]
    cached = sorted(folder.glob("edgesdk-*.tar.gz"))
    if cached:
        return cached[0]
    top = f"edgesdk-{version}"
    pkg_info = f"Metadata-Version: 2.1\nName: edgesdk\nVersion: {version}\n".encode()

    def anonymous(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0  # this machine's user names mean nothing on the board
        info.uname = info.gname = ""
        return info

    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".assemble-") as tmp:
        out = Path(tmp) / f"{top}.tar.gz"
        with tarfile.open(out, "w:gz") as tar:
            info = anonymous(tarfile.TarInfo(f"{top}/PKG-INFO"))
            info.size, info.mtime, info.mode = len(pkg_info), int(time.time()), 0o644
            tar.addfile(info, io.BytesIO(pkg_info))
            for name in sorted(files):
                tar.add(files[name], arcname=f"{top}/{name}", recursive=False, filter=anonymous)
        _publish(Path(tmp), folder)
    return folder / out.name


# -- the board's side ------------------------------------------------------------------------
def marker(source: SdkSource, python: str, base_python: str) -> dict:
    """What ``<workdir>/.edgesdk/install.json`` holds: ``python`` runs SDK ``version`` built from
    ``source_hash``; ``base_python`` made its venv."""
    return {"version": source.version, "source_hash": source.hash, "python": python, "base_python": base_python,
            "installed": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def probe(conn: Connection, python: str, workdir: str) -> dict:
    result = run_python(conn, python, _PROBE, [workdir, MARKER], what="checking the board's python")
    try:
        return json.loads(result.stdout.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise ProvisionError(f"unexpected answer from {python!r} on the board: {result.last_error_line()}") from None


@dataclass(frozen=True)
class SdkStatus:
    python: str  # the board interpreter that runs the SDK (``<workdir>/venv/bin/python`` once installed)
    version: str
    source_hash: str
    installed: bool  # False: the marker said it was there already


def ensure_sdk(conn: Connection, source: SdkSource, *, workdir: str,
               progress: Callable[[int, int, str], None] | None = None,
               install_timeout: float = INSTALL_TIMEOUT_S) -> SdkStatus:
    """Install ``source`` on the board unless its marker says it is there already."""
    base_python = conn.target.python
    state = probe(conn, base_python, workdir)
    if tuple(state["version"][:2]) < MIN_BOARD_PYTHON:
        raise ProvisionError(f"{base_python!r} on the board is Python {'.'.join(map(str, state['version']))}; edgesdk "
                             f"needs >= {'.'.join(map(str, MIN_BOARD_PYTHON))} (set `python:` to a newer one)")
    current = state["marker"] or {}
    if (current.get("source_hash") == source.hash and current.get("version") == source.version
            and state["runner_ok"]):
        return SdkStatus(current["python"], source.version, source.hash, installed=False)
    python = _install(conn, source, workdir, base_python, current, progress, install_timeout)
    return SdkStatus(python, source.version, source.hash, installed=True)


def _install(conn: Connection, source: SdkSource, workdir: str, base_python: str, current: dict,
             progress: Callable[[int, int, str], None] | None, install_timeout: float) -> str:
    steps = ["upload sdist", "venv", "pip install", "check"]

    def step(i: int) -> None:
        if progress:
            progress(i, len(steps), steps[i] if i < len(steps) else "installed")

    sdist = source.sdist()
    step(0)
    board_sdist = f"{workdir}/{SDK_DIR}/{source.hash[:16]}/{sdist.name}"
    upload(conn, sdist, board_sdist, python=base_python)
    venv = f"{workdir}/{VENV_DIR}"
    venv_python = f"{venv}/bin/python"
    step(1)
    _make_venv(conn, base_python, venv, fresh=current.get("base_python") not in (None, base_python))
    step(2)
    _pip_install(conn, venv_python, board_sdist, install_timeout)
    step(3)
    # From the work directory, like the runner: the login directory may hold a checkout named edgesdk.
    check = conn.run(f"cd {shlex.quote(workdir)} && {shlex.quote(venv_python)} -c 'import edgesdk, edgesdk._native'",
                     timeout=STEP_TIMEOUT_S, what="importing the installed SDK", check=False)
    if check.exit_status != 0:
        raise ProvisionError(f"the SDK installed but does not import on the board: {check.last_error_line()}")
    write_text_atomically(conn, f"{workdir}/{MARKER}", json.dumps(marker(source, venv_python, base_python), indent=1))
    keep = shlex.quote(f"{workdir}/{SDK_DIR}/{source.hash[:16]}")
    conn.run(f"for d in {shlex.quote(f'{workdir}/{SDK_DIR}')}/*; do [ \"$d\" = {keep} ] || rm -rf \"$d\"; done",
             timeout=STEP_TIMEOUT_S, what="removing old sdists", check=False)
    step(4)
    return venv_python


def _make_venv(conn: Connection, base_python: str, venv: str, fresh: bool) -> None:
    """``python -m venv --system-site-packages`` unless a working one is there (``fresh``:
    the base interpreter changed, start over). A failed attempt leaves no half venv."""
    q_venv, q_python = shlex.quote(venv), shlex.quote(base_python)
    create = f"{q_python} -m venv --system-site-packages {q_venv} || {{ s=$?; rm -rf {q_venv}; exit $s; }}"
    command = (f"{'rm -rf ' + q_venv + '; ' if fresh else ''}"
               f"[ -x {q_venv}/bin/python ] && {q_venv}/bin/python -m pip --version >/dev/null 2>&1 || "
               f"{{ rm -rf {q_venv}; {create}; }}")
    result = conn.run(command, timeout=STEP_TIMEOUT_S, what="creating the venv", check=False)
    if result.exit_status == 0:
        return
    text = (result.stderr + result.stdout).decode(errors="replace")
    if "ensurepip" in text or "No module named venv" in text:
        raise ProvisionError(f"{base_python!r} on the board cannot create a venv with pip: install python3-venv "
                             "(Debian, Raspberry Pi OS: sudo apt install python3-venv python3-pip)")
    raise ProvisionError(_disk_or(text, f"creating the venv {venv} on the board failed: {result.last_error_line()}"))


def _pip_install(conn: Connection, venv_python: str, sdist: str, timeout: float) -> None:
    py = shlex.quote(venv_python)
    command = (f"{py} -m pip uninstall -y -q edgesdk >/dev/null 2>&1; "
               f"{py} -m pip install --no-input --disable-pip-version-check --progress-bar off {shlex.quote(sdist)}")
    try:
        result = conn.run(command, timeout=timeout, what="pip install of the SDK", check=False)
    except RemoteCommandError as exc:  # the deadline: say which knob moves it
        raise ProvisionError(f"{exc} (raise the limit with --install-timeout)") from None
    if result.exit_status == 0:
        return
    text = (result.stderr + result.stdout).decode(errors="replace")
    if "No module named pip" in text:
        raise ProvisionError(f"no pip in the board's venv ({venv_python}): install python3-pip there")
    errors = [line.strip() for line in text.splitlines() if line.strip().startswith("ERROR:")]
    reason = errors[-1] if errors else result.last_error_line()
    raise ProvisionError(_disk_or(text, f"pip install of the SDK failed on the board: {reason}"))


def _disk_or(text: str, message: str) -> str:
    if "No space left on device" in text:
        return "no space left on the board while installing the SDK (free some space or choose another `workdir`)"
    return message
