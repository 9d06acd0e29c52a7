"""A real OpenSSH server for the remote-board tests, on 127.0.0.1 with throw-away keys.

Everything lives in one temp folder: host key, user key, authorized_keys, known_hosts, sshd_config,
pid file and log. No system configuration is read or written, with one exception: sshd run as root
insists on its privilege-separation folder ``/run/sshd`` (a compile-time path), which is created
when missing, as the Debian package would.

When the tests run as root the server starts in a private mount namespace (``unshare --mount``)
holding two small tmpfs mounts that only the "board" sees: ``readonly/`` (mounted read-only, for
the read-only work directory test) and ``tiny/`` (a few hundred KiB, for the disk-full test).
They vanish with the server; ``SSHServer.has_private_mounts`` says whether they exist.
"""
from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
SSH_KEYGEN = shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen"
PRIVSEP_DIR = Path("/run/sshd")
TINY_FS_BYTES = 256 * 1024


def sshd_available() -> str | None:
    """None when an OpenSSH server can be started here, else why not (a skip reason)."""
    if not Path(SSHD).exists() or not Path(SSH_KEYGEN).exists():
        return "needs sshd and ssh-keygen (apt install openssh-server openssh-client)"
    return None


def generate_key(path: Path, comment: str = "edgesdk-test") -> Path:
    """An unencrypted ed25519 key pair at ``path`` and ``path.pub``."""
    subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                   check=True, capture_output=True)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc), deepest last."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


class SSHServer:
    """One sshd. ``start()``/``stop()``; ``kill_all()`` drops the listener and every live session
    at once, like a board losing power."""

    def __init__(self, root: Path, *, private_mounts: bool = True) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.host = "127.0.0.1"
        self.port = free_port()
        self.user = "root" if os.geteuid() == 0 else os.environ.get("USER", "root")
        self.host_key = generate_key(root / "host_ed25519", "edgesdk-test-host")
        self.identity = generate_key(root / "user_ed25519")
        self.wrong_identity = generate_key(root / "stranger_ed25519")
        (root / "authorized_keys").write_text((root / "user_ed25519.pub").read_text())
        self.known_hosts = root / "known_hosts"
        self.known_hosts.write_text(self.known_hosts_line())
        self.readonly_dir = root / "readonly"
        self.tiny_dir = root / "tiny"
        self.readonly_dir.mkdir(exist_ok=True)
        self.tiny_dir.mkdir(exist_ok=True)
        self.has_private_mounts = private_mounts and os.geteuid() == 0 and shutil.which("unshare") is not None
        self.config = root / "sshd_config"
        self.log = root / "sshd.log"
        self._proc: subprocess.Popen | None = None
        self._write_config()

    # -- what a client needs --------------------------------------------------------------
    def known_hosts_line(self) -> str:
        key_type, key_b64 = (self.root / "host_ed25519.pub").read_text().split()[:2]
        return f"[{self.host}]:{self.port} {key_type} {key_b64}\n"

    def url(self, **query: str) -> str:
        from urllib.parse import urlencode
        suffix = f"?{urlencode(query)}" if query else ""
        return f"ssh://{self.user}@{self.host}:{self.port}{suffix}"

    # -- life cycle -----------------------------------------------------------------------
    def _write_config(self) -> None:
        self.config.write_text("\n".join([
            f"Port {self.port}",
            f"ListenAddress {self.host}",
            f"HostKey {self.host_key}",
            f"PidFile {self.root / 'sshd.pid'}",
            f"AuthorizedKeysFile {self.root / 'authorized_keys'}",
            "StrictModes no",
            "UsePAM no",
            "PermitRootLogin prohibit-password",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PubkeyAuthentication yes",
            "Subsystem sftp internal-sftp",
            "MaxStartups 64",
            "MaxSessions 64",
            "LogLevel ERROR",
            "",
        ]))

    def _command(self) -> list[str]:
        sshd = [SSHD, "-D", "-e", "-f", str(self.config)]
        if not self.has_private_mounts:
            return sshd
        mounts = (f"mount -t tmpfs -o ro,size=64k edgesdk-ro {shlex.quote(str(self.readonly_dir))} && "
                  f"mount -t tmpfs -o size={TINY_FS_BYTES} edgesdk-tiny {shlex.quote(str(self.tiny_dir))} && "
                  f"exec {shlex.join(sshd)}")
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c", mounts]

    def start(self) -> "SSHServer":
        if os.geteuid() == 0:
            PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
        with open(self.log, "ab") as log:
            self._proc = subprocess.Popen(self._command(), stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"sshd exited with {self._proc.returncode}: {self.log.read_text()[-2000:]}")
            if self._banner_ok():
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"sshd did not answer on port {self.port}: {self.log.read_text()[-2000:]}")

    def _banner_ok(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=1) as s:
                return s.recv(64).startswith(b"SSH-")
        except OSError:
            return False

    def kill_all(self) -> None:
        """SIGKILL the listener and every session process under it (sshd's per-connection
        children outlive a stopped listener, so killing the listener alone cuts nothing)."""
        if self._proc is None:
            return
        for pid in [self._proc.pid, *descendants(self._proc.pid)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._proc.wait(timeout=10)
        self._proc = None

    def stop(self) -> None:
        self.kill_all()


# -- a "board": the sshd above, with this interpreter as the board's python ----------------------
def fake_sdist(path: Path, version: str = "0.1.0") -> Path:
    """A minimal edgesdk sdist (just PKG-INFO). With a marker naming its hash, the board counts
    as provisioned without a build; pip cannot install it (for the pip-failure test)."""
    import io
    import tarfile
    data = f"Metadata-Version: 2.1\nName: edgesdk\nVersion: {version}\n".encode()
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo(f"edgesdk-{version}/PKG-INFO")
        info.size, info.mtime = len(data), 0
        tar.addfile(info, io.BytesIO(data))
    return path


class Board:
    """Targets on ``server`` whose SDK is this test interpreter (edgesdk installed editable): each
    work directory gets a marker saying so, for the hash of ``sdist``, so no command installs."""

    def __init__(self, server: SSHServer, root: Path) -> None:
        import sys
        self.server = server
        self.root = root
        self.python = sys.executable
        self.sdist = fake_sdist(root / "edgesdk-0.1.0.tar.gz")

    def marker_text(self) -> str:
        import json
        from edgesdk.remote.provision import SdkSource, marker
        return json.dumps(marker(SdkSource.from_sdist(self.sdist), self.python, self.python))

    def workdir(self, name: str, *, provisioned: bool = True) -> str:
        """A fresh work directory under the temp root (visible to the test and the board)."""
        path = self.root / "boards" / name
        path.mkdir(parents=True)
        if provisioned:
            (path / ".edgesdk").mkdir()
            (path / ".edgesdk" / "install.json").write_text(self.marker_text())
        return str(path)

    def url(self, workdir: str, **query: str) -> str:
        return self.server.url(identity=str(self.server.identity), workdir=workdir, python=self.python, **query)

    def options(self, known_hosts: Path | None = None) -> list[str]:
        """CLI options every test passes: the test known_hosts and the fake sdist."""
        return ["--known-hosts", str(known_hosts or self.server.known_hosts), "--sdist", str(self.sdist)]

    def ssh(self, command: str) -> tuple[int, str, str]:
        """Run a shell command on the board (inside its mount namespace) with plain paramiko."""
        import paramiko
        client = paramiko.SSHClient()
        client.load_host_keys(str(self.server.known_hosts))
        client.connect(self.server.host, self.server.port, username=self.server.user,
                       key_filename=str(self.server.identity), allow_agent=False, look_for_keys=False, timeout=10)
        try:
            _, out, err = client.exec_command(command, timeout=60)
            status = out.channel.recv_exit_status()
            return status, out.read().decode(), err.read().decode()
        finally:
            client.close()

    def board_workdir(self, path: str, *, provisioned: bool = True) -> str:
        """A work directory created on the board side (for the tmpfs mounts only the board sees)."""
        marker = shlex.quote(self.marker_text())
        command = f"mkdir -p {shlex.quote(path)}"
        if provisioned:
            command += f" && mkdir -p {shlex.quote(path)}/.edgesdk && printf %s {marker} > {shlex.quote(path)}/.edgesdk/install.json"
        status, _, err = self.ssh(command)
        assert status == 0, err
        return path
