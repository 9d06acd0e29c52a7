"""Provisioning for real: an sdist of this checkout built here, pip-installed on the "board" (this
machine over SSH) into a fresh venv, the native module compiled there; then the runner runs from
that venv (~70 s on 2 cores), and a real pip failure (~10 s): both marked ``slow``."""
from __future__ import annotations

import json
import subprocess
import sys
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


@pytest.mark.slow
def test_push_installs_the_sdk_into_a_fresh_venv_once(board, checkout_sdist, capsys, tmp_path):
    from edgesdk.compress.recipe import Recipe
    from edgesdk.models import default_model_path
    from edgesdk.pack import pack_model
    package = tmp_path / "digits.edgepkg"
    pack_model(default_model_path(), package, Recipe())
    workdir = board.workdir("fresh", provisioned=False)
    url = board.url(workdir)
    options = ["--known-hosts", str(board.server.known_hosts), "--sdist", str(checkout_sdist[0])]

    started = time.monotonic()
    code, out, err = edgesdk(capsys, "remote", "push", url, str(package), *options)
    install_s = time.monotonic() - started
    assert code == 0, err
    assert "edgesdk 0.1.0 installed;" in out, out
    venv_python = Path(workdir) / "venv" / "bin" / "python"
    marker = json.loads((Path(workdir) / ".edgesdk" / "install.json").read_text())
    assert marker["python"] == str(venv_python) and marker["base_python"] == board.python
    assert list((Path(workdir) / "sdk").iterdir()) == [Path(workdir) / "sdk" / marker["source_hash"][:16]]
    native = subprocess.run([str(venv_python), "-c", "import edgesdk, edgesdk._native; print(edgesdk.__file__)"],
                            capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    assert native.startswith(str(Path(workdir) / "venv")), "the board runs its own install, not this checkout"

    started = time.monotonic()
    code, out, err = edgesdk(capsys, "remote", "push", url, str(package), *options)
    assert code == 0 and "already installed" in out and "already there" in out, out + err
    assert time.monotonic() - started < 10

    code, out, err = edgesdk(capsys, "remote", "info", url, "--json", *options)
    assert code == 0, err
    info = json.loads(out)["targets"][0]["info"]
    assert info["python"]["executable"] == str(venv_python) and info["cpu"]["features"]
    code, out, err = edgesdk(capsys, "remote", "run", url, str(package), *options)
    assert code == 0 and "top-5" in out, err
    # The opencl backend's kernel sources and device configs must be inside the installed wheel.
    code, out, err = edgesdk(capsys, "remote", "run", url, str(package), "--backend", "opencl", *options)
    assert code == 0 and "top-5" in out and "opencl" in out, err
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
