"""`edgesdk remote` end to end against a real OpenSSH server on 127.0.0.1 (tests/sshd.py).

The "board" is this machine: targets use this interpreter as the board's python, with a marker
that makes provisioning a no-op (tests/test_remote_install.py does the real sdist + pip install).
Commands run in-process through ``edgesdk.cli.main``; the interrupt tests use a subprocess.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from sshd import TINY_FS_BYTES, Board, SSHServer, free_port, sshd_available

pytestmark = pytest.mark.skipif(sshd_available() is not None, reason=str(sshd_available()))
paramiko = pytest.importorskip("paramiko")

EDGESDK = shutil.which("edgesdk", path=os.path.dirname(sys.executable)) or "edgesdk"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = SSHServer(tmp_path_factory.mktemp("sshd")).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def board(server, tmp_path_factory) -> Board:
    return Board(server, tmp_path_factory.mktemp("board"))


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    from edgesdk.compress.recipe import LayerSettings, Recipe
    from edgesdk.models import default_model_path
    from edgesdk.pack import pack_model
    path = tmp_path_factory.mktemp("pkg") / "digits.edgepkg"
    pack_model(default_model_path(), path, Recipe(default=LayerSettings(cluster_bits=4)))
    return path


def edgesdk(capsys, *argv: str) -> tuple[int, str, str]:
    from edgesdk.cli import main
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def runner_processes(pattern: str) -> list[str]:
    done = subprocess.run(["pgrep", "-af", pattern], capture_output=True, text=True)
    return [line for line in done.stdout.splitlines() if "edgesdk.remote.runner" in line]


def wait_until(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def no_part_files(folder: str) -> bool:
    return not list(Path(folder).rglob("*.part"))


# -- the commands --------------------------------------------------------------------------------
def test_info_push_run_profile(board, package, capsys, tmp_path):
    from edgesdk.runtime.session import Session
    workdir = board.workdir("main")
    url = board.url(workdir)

    code, out, err = edgesdk(capsys, "remote", "info", url, *board.options())
    assert code == 0, err
    assert "cpu:" in out and "memory:" in out and "features:" in out and "opencl" in out.lower()
    code, out, err = edgesdk(capsys, "remote", "info", url, "--json", *board.options())
    info = json.loads(out)["targets"][0]["info"]
    assert info["arch"] == os.uname().machine and info["cpu"]["cores"] == os.cpu_count()
    assert info["memory"]["total_bytes"] > 0 and info["edgesdk"] and isinstance(info["opencl"], list)

    code, out, err = edgesdk(capsys, "remote", "push", url, str(package), *board.options())
    assert code == 0, err
    assert "already installed" in out and "uploaded" in out
    remote_package = Path(workdir) / "packages" / package.name
    assert remote_package.read_bytes() == package.read_bytes() and no_part_files(workdir)

    x = np.random.default_rng(3).standard_normal((1, 1, 8, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    code, out, err = edgesdk(capsys, "remote", "run", url, str(package), "--input", str(tmp_path / "x.npy"),
                             "--output", str(tmp_path / "out.npz"), *board.options())
    assert code == 0, err
    assert "top-5" in out and "saved outputs" in out
    expected = Session(package, backend="cpu").run({"input": x})
    with np.load(tmp_path / "out.npz") as got:
        np.testing.assert_allclose(got["logits"], expected["logits"], rtol=1e-5)
    assert not list((Path(workdir) / "runs").iterdir()), "the run folder on the board is removed after download"

    report = tmp_path / "report"
    code, out, err = edgesdk(capsys, "remote", "profile", url, str(package), "--iters", "5", "--warmup", "1",
                             "--backend", "reference", "--out", str(report), *board.options())
    assert code == 0, err
    document = json.loads((report / "report.json").read_text())
    (run,) = document["runs"]
    assert run["schema"] == "edgesdk.profile/1" and run["backend"] == "reference" and run["iters"] == 5
    assert run["label"].endswith("reference fp32") and run["ops"] and run["latency"]["median_ms"] > 0
    assert "before" in run["environment"] and "after" in run["environment"]
    assert json.loads((report / "trace.json").read_text())
    assert (report / "report.html").read_text().lstrip().lower().startswith("<!doctype html")
    assert not runner_processes(workdir)


def test_push_skips_same_content_and_replaces_changed(board, package, capsys, tmp_path):
    workdir = board.workdir("push")
    url = board.url(workdir)
    assert edgesdk(capsys, "remote", "push", url, str(package), *board.options())[0] == 0
    code, out, _ = edgesdk(capsys, "remote", "push", url, str(package), *board.options())
    assert code == 0 and "already there" in out
    changed = tmp_path / package.name
    changed.write_bytes(package.read_bytes() + b"\0")
    code, out, _ = edgesdk(capsys, "remote", "push", url, str(changed), *board.options(), "--json")
    result = json.loads(out)["targets"][0]
    assert code == 0 and result["package"]["uploaded"] is True
    assert (Path(workdir) / "packages" / package.name).read_bytes() == changed.read_bytes()
    assert no_part_files(workdir)


def test_named_target_with_ssh_config_env_thermal_and_power(board, package, capsys, tmp_path, monkeypatch):
    """A target from $EDGESDK_INVENTORY whose host is an ~/.ssh/config alias (HostName, Port, User,
    IdentityFile come from there), with env, thermal and power sensors (fake sysfs files)."""
    server = board.server
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text(f"Host testboard\n  HostName {server.host}\n  Port {server.port}\n  User {server.user}\n"
                          f"  IdentityFile {server.identity}\n")
    sensors = tmp_path / "sysfs"
    sensors.mkdir()
    (sensors / "temp").write_text("42000\n")
    (sensors / "current_now").write_text("500000\n")  # µA
    (sensors / "voltage_now").write_text("4000000\n")  # µV: 2 W
    inventory = tmp_path / "targets.yaml"
    inventory.write_text(f"""targets:
  pi:
    host: testboard
    python: {board.python}
    workdir: {board.workdir('alias')}
    backend: reference
    env: {{EDGESDK_CPU_ISA: scalar}}
    thermal: {sensors / 'temp'}
    power: {{current: {sensors / 'current_now'}, voltage: {sensors / 'voltage_now'}}}
""")
    monkeypatch.setenv("EDGESDK_INVENTORY", str(inventory))
    options = ["--ssh-config", str(ssh_config), "--json", *board.options()]
    code, out, err = edgesdk(capsys, "remote", "info", "pi", *options)
    assert code == 0, err
    (result,) = json.loads(out)["targets"]
    assert result["target"] == "pi" and result["address"] == f"{server.user}@{server.host}:{server.port}"
    assert result["info"]["cpu"]["isa_path"] == "scalar"  # the target's env reached the runner
    assert result["info"]["temperatures_c"][str(sensors / "temp")] == 42.0

    code, out, err = edgesdk(capsys, "remote", "profile", "pi", str(package), "--iters", "3",
                             "--out", str(tmp_path / "report"), *options)
    assert code == 0, err
    (run,) = json.loads(out)["targets"]
    assert run["backend"] == "reference"  # the target's preferred backend
    assert run["energy"]["mean_power_w"] == pytest.approx(2.0) and run["energy"]["joules_per_inference"] > 0


# -- several boards ------------------------------------------------------------------------------
def test_several_targets_one_failing(board, package, capsys, tmp_path):
    server = board.server
    inventory = tmp_path / "targets.yaml"
    targets = {name: {"host": server.host, "port": server.port, "user": server.user, "identity": str(server.identity),
                      "python": board.python, "workdir": board.workdir(f"multi-{name}")} for name in ("a", "b")}
    targets["broken"] = {**targets["a"], "identity": str(server.wrong_identity)}
    inventory.write_text(json.dumps({"targets": targets}))
    report = tmp_path / "report"
    code, out, err = edgesdk(capsys, "remote", "profile", "--targets", "a,broken,b", str(package), "--iters", "3",
                             "--inventory", str(inventory), "--out", str(report), *board.options())
    assert code == 2
    errors = err.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith("edgesdk: error: broken: authentication failed"), err
    runs = json.loads((report / "report.json").read_text())["runs"]
    assert [run["label"] for run in runs] == ["a cpu fp32", "b cpu fp32"]

    code, out, err = edgesdk(capsys, "remote", "run", "--targets", "a,b", str(package), "--inventory", str(inventory),
                             "--output", str(tmp_path / "out.npz"), *board.options())
    assert code == 0, err
    assert (tmp_path / "out-a.npz").is_file() and (tmp_path / "out-b.npz").is_file()
    assert re.search(r"max \|b - a\|: 0\b", out)


# -- failures: one line, exit status 2 -----------------------------------------------------------
def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_wrong_key_is_an_authentication_error(board, package, capsys):
    url = board.server.url(identity=str(board.server.wrong_identity), workdir=board.workdir("wrong-key"),
                           python=board.python)
    code, _, err = edgesdk(capsys, "remote", "push", url, str(package), *board.options())
    assert code == 2 and "authentication failed" in one_error_line(err)


def test_unknown_host_key_refused_then_accepted_explicitly(board, package, capsys, tmp_path):
    server = board.server
    known_hosts = tmp_path / "known_hosts"
    url = board.url(board.workdir("hostkey"))
    code, _, err = edgesdk(capsys, "remote", "push", url, str(package), *board.options(known_hosts))
    line = one_error_line(err)
    assert code == 2 and "unknown host key" in line and "SHA256:" in line
    assert f"ssh-keyscan -p {server.port} {server.host} >> {known_hosts}" in line and "--accept-new-host" in line
    assert not known_hosts.exists(), "nothing is trusted silently"

    code, _, err = edgesdk(capsys, "remote", "push", url, str(package), *board.options(known_hosts), "--accept-new-host")
    assert code == 0, err
    assert known_hosts.read_text() == server.known_hosts_line()
    code, _, err = edgesdk(capsys, "remote", "push", url, str(package), *board.options(known_hosts))
    assert code == 0, err


def test_changed_host_key_refused_even_with_accept_new_host(board, package, capsys, tmp_path):
    from sshd import generate_key
    other = generate_key(tmp_path / "other_host_key")
    key_type, key = other.with_suffix(".pub").read_text().split()[:2]
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"[{board.server.host}]:{board.server.port} {key_type} {key}\n")
    url = board.url(board.workdir("changed"))
    for extra in ([], ["--accept-new-host"]):
        code, _, err = edgesdk(capsys, "remote", "push", url, str(package), *board.options(known_hosts), *extra)
        line = one_error_line(err)
        assert code == 2 and "host key for" in line and "changed" in line and "ssh-keygen -R" in line
    assert known_hosts.read_text() == f"[{board.server.host}]:{board.server.port} {key_type} {key}\n"


def test_unreachable_port_fails_fast(board, package, capsys):
    url = f"ssh://root@127.0.0.1:{free_port()}?identity={board.server.identity}"
    started = time.monotonic()
    code, _, err = edgesdk(capsys, "remote", "info", url, *board.options())
    assert code == 2 and "connection refused" in one_error_line(err)
    assert time.monotonic() - started < 5


def test_silent_port_and_unknown_host_name(board, capsys):
    import socket
    with socket.socket() as silent:  # accepts connections (backlog) but never speaks SSH
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        url = f"ssh://root@127.0.0.1:{silent.getsockname()[1]}?identity={board.server.identity}"
        started = time.monotonic()
        code, _, err = edgesdk(capsys, "remote", "info", url, "--connect-timeout", "1", *board.options())
        assert code == 2 and "sent no SSH banner within 1 s" in one_error_line(err)
        assert time.monotonic() - started < 8
    code, _, err = edgesdk(capsys, "remote", "info", f"ssh://nosuchhost.invalid?identity={board.server.identity}",
                           *board.options())
    assert code == 2 and "cannot resolve host name 'nosuchhost.invalid'" in one_error_line(err)


def test_no_python_on_the_board(board, package, capsys):
    url = board.server.url(identity=str(board.server.identity), workdir=board.workdir("nopython", provisioned=False),
                           python="/nonexistent/bin/python3")
    code, _, err = edgesdk(capsys, "remote", "push", url, str(package), *board.options())
    line = one_error_line(err)
    assert code == 2 and "no usable python at '/nonexistent/bin/python3'" in line


def test_no_venv_on_the_board_leaves_no_half_venv(board, package, capsys, tmp_path):
    """A python whose venv module fails like Debian's without python3-venv."""
    fake = tmp_path / "python3"
    fake.write_text("#!/bin/sh\nif [ \"$1\" = -m ] && [ \"$2\" = venv ]; then mkdir -p \"$4\"; "
                    "echo 'The virtual environment was not created successfully because ensurepip is not available.' >&2;"
                    f" exit 1; fi\nexec {board.python} \"$@\"\n")
    fake.chmod(0o755)
    workdir = board.workdir("novenv", provisioned=False)
    url = board.server.url(identity=str(board.server.identity), workdir=workdir, python=str(fake))
    code, _, err = edgesdk(capsys, "remote", "push", url, str(package), *board.options())
    assert code == 2 and "install python3-venv" in one_error_line(err)
    assert not (Path(workdir) / "venv").exists() and no_part_files(workdir)


def test_no_pip_on_the_board(board, package, capsys, tmp_path):
    """A venv that comes without pip (the venv module works, ensurepip left pip out)."""
    fake = tmp_path / "python3"
    fake.write_text("#!/bin/sh\nif [ \"$1\" = -m ] && [ \"$2\" = venv ]; then mkdir -p \"$4/bin\"; "
                    "printf '#!/bin/sh\\nif [ \"$1\" = -m ] && [ \"$2\" = pip ]; then "
                    "echo \"$0: No module named pip\" >&2; exit 1; fi\\nexec %s \"$@\"\\n' "
                    f"{board.python} > \"$4/bin/python\"; chmod +x \"$4/bin/python\"; exit 0; fi\n"
                    f"exec {board.python} \"$@\"\n")
    fake.chmod(0o755)
    workdir = board.workdir("nopip", provisioned=False)
    url = board.server.url(identity=str(board.server.identity), workdir=workdir, python=str(fake))
    code, _, err = edgesdk(capsys, "remote", "push", url, str(package), *board.options())
    assert code == 2 and f"no pip in the board's venv ({workdir}/venv/bin/python)" in one_error_line(err)
    assert not (Path(workdir) / ".edgesdk" / "install.json").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="the read-only and tiny mounts need root (unshare --mount)")
def test_read_only_workdir(board, package, capsys):
    url = board.url(str(board.server.readonly_dir / "edgesdk"))
    code, _, err = edgesdk(capsys, "remote", "push", url, str(package), *board.options())
    line = one_error_line(err)
    assert code == 2 and "read-only file system" in line and "workdir" in line


@pytest.mark.skipif(os.geteuid() != 0, reason="the read-only and tiny mounts need root (unshare --mount)")
def test_full_disk_refused_before_upload_and_mid_upload(board, capsys, tmp_path):
    from edgesdk.errors import TransferError
    from edgesdk.remote.connection import Connection
    from edgesdk.remote.inventory import resolve_targets
    from edgesdk.remote.transfer import _upload_verified, file_sha256
    workdir = board.board_workdir(str(board.server.tiny_dir / "edgesdk"))
    big = tmp_path / "big.edgepkg"
    big.write_bytes(os.urandom(4 * TINY_FS_BYTES))
    code, _, err = edgesdk(capsys, "remote", "push", board.url(workdir), str(big), *board.options())
    assert code == 2 and "no space left on the board" in one_error_line(err)

    # The same file past the free-space check: the write itself fails and the part file goes.
    (target,) = resolve_targets([board.url(workdir)])
    with Connection.open(target, known_hosts=board.server.known_hosts) as conn:
        with pytest.raises(TransferError, match="no space left on the board"):
            _upload_verified(conn, big, f"{workdir}/packages/big.edgepkg", file_sha256(big), big.stat().st_size,
                             python=board.python, progress=None)
    status, out, _ = board.ssh(f"ls -A {workdir}/packages")
    assert status == 0 and out.strip() == ""


def test_connection_cut_mid_upload_and_next_push_cleans_up(board, capsys, tmp_path):
    """sshd dies (with every session) in the middle of an upload: one-line error, nothing under
    the package's name; the part file left behind is removed by the next push."""
    from edgesdk.errors import TransferError
    from edgesdk.remote.connection import Connection
    from edgesdk.remote.inventory import resolve_targets
    from edgesdk.remote.transfer import upload
    server = SSHServer(tmp_path / "sshd", private_mounts=False).start()
    try:
        workdir = board.workdir("cut")
        big = tmp_path / "big.edgepkg"
        big.write_bytes(os.urandom(48 << 20))
        url = server.url(identity=str(server.identity), workdir=workdir, python=board.python)
        (target,) = resolve_targets([url])

        def kill_midway(done: int, total: int, detail: str) -> None:
            if done > 4 << 20:
                server.kill_all()

        with Connection.open(target, known_hosts=server.known_hosts) as conn:
            with pytest.raises(TransferError, match="connection to the board lost while uploading big.edgepkg"):
                upload(conn, big, f"{workdir}/packages/big.edgepkg", python=board.python, progress=kill_midway)
        packages = Path(workdir) / "packages"
        assert not (packages / "big.edgepkg").exists()
        (part,) = packages.glob(".big.edgepkg.part")
        assert 0 < part.stat().st_size < big.stat().st_size

        server.start()
        code, out, err = edgesdk(capsys, "remote", "push", url, str(big), "--known-hosts", str(server.known_hosts),
                                 "--sdist", str(board.sdist))
        assert code == 0, err
        assert (packages / "big.edgepkg").read_bytes() == big.read_bytes() and no_part_files(workdir)
    finally:
        server.stop()


# -- no runner left behind -----------------------------------------------------------------------
def test_command_timeout_kills_the_runner(board, package, capsys):
    workdir = board.workdir("timeout")
    started = time.monotonic()
    code, _, err = edgesdk(capsys, "remote", "profile", board.url(workdir), str(package), "--iters", "100000000",
                           "--timeout", "4", "--out", str(Path(workdir) / "report"), *board.options())
    assert code == 2 and "timed out after 4 s; stopped it on the board" in one_error_line(err)
    assert time.monotonic() - started < 15
    assert wait_until(lambda: not runner_processes(workdir), 3), runner_processes(workdir)
    assert not (Path(workdir) / "report").exists(), "no empty report folder"


def test_run_timeout_kills_the_whole_process_group(board):
    """Children of the command die with it (sshd makes the command a process-group leader)."""
    from edgesdk.errors import RemoteCommandError
    from edgesdk.remote.connection import Connection
    from edgesdk.remote.inventory import resolve_targets
    (target,) = resolve_targets([board.url(board.workdir("group"))])
    with Connection.open(target, known_hosts=board.server.known_hosts) as conn:
        with pytest.raises(RemoteCommandError, match="timed out after 1 s"):
            conn.run("sleep 313 & sleep 314; wait", timeout=1, what="sleeping")
    assert wait_until(lambda: subprocess.run(["pgrep", "-f", "sleep 31[34]"]).returncode == 1, 3)


def start_cli_profile(board, package, workdir: str) -> subprocess.Popen:
    """`edgesdk remote profile` (practically endless) in a subprocess, once the runner runs
    (the python process itself, not the shell that is about to exec it)."""
    proc = subprocess.Popen([EDGESDK, "remote", "profile", board.url(workdir), str(package), "--iters", "100000000",
                             "--out", str(Path(workdir) / "report"), *board.options()],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def runner_started() -> bool:
        return any("edgesdk-pgid" not in line for line in runner_processes(workdir))

    if not wait_until(lambda: runner_started() or proc.poll() is not None, 30):
        proc.kill()
        pytest.fail("the runner never started")
    assert proc.poll() is None, proc.communicate()
    return proc


def test_ctrl_c_stops_the_runner(board, package):
    workdir = board.workdir("sigint")
    proc = start_cli_profile(board, package, workdir)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 130 and "interrupted" in err
    assert wait_until(lambda: not runner_processes(workdir), 3), runner_processes(workdir)


def test_killed_host_leaves_no_runner(board, package):
    """The host dies without cleaning up: the runner sees its stdin close and exits."""
    workdir = board.workdir("sigkill")
    proc = start_cli_profile(board, package, workdir)
    proc.kill()
    proc.communicate(timeout=10)
    assert wait_until(lambda: not runner_processes(workdir), 10), runner_processes(workdir)


def test_board_side_never_imports_paramiko_or_matplotlib(package):
    """The runner's info and profile, and the CLI parser, load neither (a board has neither)."""
    code = ("import json, sys, edgesdk.cli, edgesdk.remote.runner as r; edgesdk.cli.build_parser(); "
            "info = r.board_info(); "
            f"run = r.profile(r.build_parser().parse_args(['profile', {str(package)!r}, '--iters', '2'])); "
            "bad = [m for m in ('paramiko', 'matplotlib') if m in sys.modules]; assert not bad, bad; "
            "print(json.dumps([info['cpu']['cores'], run['schema']]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [os.cpu_count(), "edgesdk.profile/1"]
