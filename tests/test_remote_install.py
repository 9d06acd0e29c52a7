"""Provisioning for real, from a pip-installed edgesdk: a wheel of this checkout is built and
installed into a fresh venv (the "host", no source checkout); its `edgesdk remote push` assembles
an sdist from the installed package and pip-installs it on the "board" (this machine over SSH)
into a fresh venv, the native module compiled there; then the runner runs from that venv (~50 s on
2 cores; the wheel's CMake build is kept in tests/.cache, the first one compiles ~20 s more), and a
real pip failure (~10 s): both marked ``slow``. The sdist of the checkout itself (an editable
install's route) is built and compared with the assembled one, not installed."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import tarfile
import time
from pathlib import Path

import pytest

from sshd import Board, SSHServer, sshd_available

pytestmark = pytest.mark.skipif(sshd_available() is not None, reason=str(sshd_available()))
pytest.importorskip("paramiko")


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    server = SSHServer(tmp_path_factory.mktemp("sshd"), private_mounts=False).start()
    yield Board(server, tmp_path_factory.mktemp("board"))
    server.stop()


ROOT = Path(__file__).resolve().parents[1]
# The wheel's CMake build, kept between test sessions (an incremental rebuild takes seconds).
WHEEL_BUILD_DIR = ROOT / "tests" / ".cache" / "wheel-build"


@pytest.fixture(scope="session")
def checkout_sdist(tmp_path_factory) -> tuple[Path, str, Path]:
    """This checkout's sdist, built once per test session into a private cache: (sdist, source
    hash, cache folder)."""
    from edgesdk.remote.provision import build_sdist, source_hash, source_root
    root = source_root()
    if root is None:
        pytest.skip("edgesdk is not running from a source checkout")
    cache, digest = tmp_path_factory.mktemp("sdist-cache"), source_hash(root)
    return build_sdist(root, digest, cache), digest, cache


def edgesdk(capsys, *argv: str) -> tuple[int, str, str]:
    from edgesdk.cli import main
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_built_sdist_is_cached_and_holds_the_sources(checkout_sdist):
    import tarfile
    from edgesdk.remote.provision import build_sdist, source_root
    sdist, digest, cache = checkout_sdist
    with tarfile.open(sdist) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    assert {"pyproject.toml", "CMakeLists.txt", "edgesdk/remote/runner.py", "cpu_native/src/cpu_features.cc"} <= names
    started = time.monotonic()
    assert build_sdist(source_root(), digest, cache) == sdist and time.monotonic() - started < 1


@pytest.fixture(scope="module")
def host(tmp_path_factory) -> Host:
    """A wheel of this checkout, pip-installed (not editable) into a fresh venv. Its dependencies
    come from this test environment through a .pth line, so nothing is downloaded; the
    environment's edgesdk (the editable checkout) stays out of it."""
    pytest.importorskip("pybind11", reason="building the wheel without isolation needs pybind11 (the dev extra)")
    pytest.importorskip("scikit_build_core", reason="building the wheel needs scikit-build-core (the dev extra)")
    tmp = tmp_path_factory.mktemp("host")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(tmp / "wheels"), "-C", f"build-dir={WHEEL_BUILD_DIR}", str(ROOT)],
                           capture_output=True, text=True, timeout=900)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = (tmp / "wheels").glob("edgesdk-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # Appended after the venv's own site-packages: numpy, paramiko... from here, edgesdk from the wheel.
    (Path(site) / "test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    installed = subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
                               capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr
    return Host(venv, tmp / "cache", tmp)


class Host:
    """Runs commands with the venv's interpreter and `edgesdk` script, from outside the checkout,
    with a private sdist cache."""

    def __init__(self, venv: Path, cache: Path, cwd: Path) -> None:
        self.venv, self.cwd = venv, cwd
        self.env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        self.env["XDG_CACHE_HOME"] = str(cache)

    def run(self, program: str, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.venv / "bin" / program), *args], capture_output=True, text=True,
                              cwd=self.cwd, env=self.env, timeout=timeout)

    def python(self, code: str) -> str:
        done = self.run("python", "-c", code)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()


def _members(sdist: Path) -> dict[str, bytes]:
    with tarfile.open(sdist) as tar:
        return {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


@pytest.mark.slow
def test_a_pip_installed_edgesdk_installs_itself_on_a_board(board, host, checkout_sdist, tmp_path):
    """`edgesdk remote` from a wheel install: info/push/run work without a checkout or --sdist."""
    from edgesdk.compress.recipe import Recipe
    from edgesdk.models import default_model_path
    from edgesdk.pack import pack_model
    where = json.loads(host.python(
        "import json, edgesdk; from edgesdk.remote.provision import SdkSource, source_root\n"
        "source = SdkSource.from_this_install()\n"
        "print(json.dumps([edgesdk.__file__, str(source_root()), str(source.sdist())]))"))
    assert where[0].startswith(str(host.venv)) and where[1] == "None", where  # the wheel, no checkout
    # The assembled sdist holds exactly the checkout's installed files, byte for byte.
    assembled, checkout = _members(Path(where[2])), _members(checkout_sdist[0])
    assert assembled.pop("PKG-INFO").startswith(b"Metadata-Version: 2.1\nName: edgesdk\nVersion: 0.1.0\n")
    assert {name: data for name, data in assembled.items() if checkout.get(name) != data} == {}
    wanted = {name for name in checkout if name in ("pyproject.toml", "CMakeLists.txt", "README.md")
              or name.startswith(("edgesdk/", "cpu_native/")) or name.endswith((".cl", ".yaml"))}
    assert wanted - set(assembled) == set()

    package = tmp_path / "digits.edgepkg"
    pack_model(default_model_path(), package, Recipe())
    workdir = board.workdir("from-wheel", provisioned=False)
    url, options = board.url(workdir), ["--known-hosts", str(board.server.known_hosts)]

    started = time.monotonic()
    done = host.run("edgesdk", "remote", "push", url, str(package), *options)
    install_s = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert "edgesdk 0.1.0 installed;" in done.stdout, done.stdout
    venv_python = Path(workdir) / "venv" / "bin" / "python"
    marker = json.loads((Path(workdir) / ".edgesdk" / "install.json").read_text())
    assert marker["python"] == str(venv_python) and marker["base_python"] == board.python
    assert list((Path(workdir) / "sdk").iterdir()) == [Path(workdir) / "sdk" / marker["source_hash"][:16]]
    native = subprocess.run([str(venv_python), "-c", "import edgesdk, edgesdk._native; print(edgesdk.__file__)"],
                            capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    assert native.startswith(str(Path(workdir) / "venv")), "the board runs its own install, not the host's"

    started = time.monotonic()
    done = host.run("edgesdk", "remote", "push", url, str(package), *options)
    assert done.returncode == 0 and "already installed" in done.stdout and "already there" in done.stdout, done
    assert time.monotonic() - started < 15

    done = host.run("edgesdk", "remote", "info", url, "--json", *options)
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)["targets"][0]["info"]
    assert info["python"]["executable"] == str(venv_python) and info["cpu"]["features"]
    done = host.run("edgesdk", "remote", "run", url, str(package), *options)
    assert done.returncode == 0 and "top-5" in done.stdout, done.stderr
    # The opencl backend's kernel sources and device configs must be inside the installed wheel.
    done = host.run("edgesdk", "remote", "run", url, str(package), "--backend", "opencl", *options)
    assert done.returncode == 0 and "top-5" in done.stdout and "opencl" in done.stdout, done.stderr
    print(f"\nfirst push with install: {install_s:.1f} s", file=sys.stderr)


@pytest.mark.slow  # a real venv with pip: ~10 s
def test_pip_failure_is_one_line_and_leaves_the_board_retryable(board, capsys, tmp_path):
    """The fake sdist (PKG-INFO only) is no installable project: pip fails, no marker is written."""
    package = tmp_path / "m.edgepkg"
    package.write_bytes(b"not needed")
    workdir = board.workdir("pipfail", provisioned=False)
    code, _, err = edgesdk(capsys, "remote", "push", board.url(workdir), str(package), *board.options())
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "pip install of the SDK failed on the board: ERROR:" in lines[0], err
    assert not (Path(workdir) / ".edgesdk" / "install.json").exists()
    assert (Path(workdir) / "venv" / "bin" / "python").exists()  # kept: the next attempt reuses it
