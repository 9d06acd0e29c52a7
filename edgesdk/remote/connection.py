"""An SSH connection to one board (paramiko): host-key checks, typed one-line errors, and
remote commands with a deadline that never leave a process behind.

Host keys are checked against a known_hosts file (``--known-hosts``, else the target's
UserKnownHostsFile from ~/.ssh/config, else ``~/.ssh/known_hosts``, plus the system-wide
``/etc/ssh/ssh_known_hosts``). An unknown key is refused with the command that trusts it; with
``accept_new_host`` it is appended to the chosen file (atomically). A changed key is always refused.

Every command runs as ``echo <pgid>; <command>``: sshd makes the command's shell a session and
process-group leader, so on a timeout or an interrupt one ``kill -- -PGID`` on a second channel
ends the command and everything it started.
"""
from __future__ import annotations

import base64
import hashlib
import os
import select
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import paramiko

from ..fileio import atomic_path
from ..errors import (
    AuthenticationError,
    HostKeyError,
    RemoteCommandError,
    RemoteConnectionError,
    RemoteError,
    TargetConfigError,
)
from .inventory import Target

DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
SYSTEM_KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts"
DEFAULT_CONNECT_TIMEOUT = 10.0
KEEPALIVE_S = 15
_PGID_TAG = b"edgesdk-pgid "
_KNOWN_HOSTS_LOCK = threading.Lock()  # several targets may accept new keys at once


class Cancelled(RemoteError):
    """The user interrupted the command (Ctrl-C): the remote side has been cleaned up."""


@dataclass(frozen=True)
class CommandResult:
    exit_status: int
    stdout: bytes
    stderr: bytes

    @property
    def status_text(self) -> str:
        # paramiko reports -1 when the command ended without a status: killed by a signal
        return "killed by a signal" if self.exit_status < 0 else f"exit status {self.exit_status}"

    def last_error_line(self) -> str:
        """The line that says what went wrong: the last non-empty stderr (else stdout) line."""
        for stream in (self.stderr, self.stdout):
            lines = [line.strip() for line in stream.decode(errors="replace").splitlines() if line.strip()]
            if lines:
                return lines[-1]
        return "(no output)"


def host_key_name(host: str, port: int) -> str:
    """How OpenSSH names a host in known_hosts."""
    return host if port == 22 else f"[{host}]:{port}"


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's SHA256 fingerprint, as `ssh-keygen -l` prints it."""
    digest = base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")
    return f"{key.get_name()} SHA256:{digest}"


def _append_atomically(path: Path, line: str) -> None:
    """Add a line to a file by writing a full copy and renaming it over the original: a crash
    leaves either the old or the new file, never half a known_hosts."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    old = path.read_bytes() if path.exists() else b""
    if old and not old.endswith(b"\n"):
        old += b"\n"
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o600
    with atomic_path(path) as tmp:
        tmp.write_bytes(old + line.encode())
        os.chmod(tmp, mode)


class _RefuseUnknownHost(paramiko.MissingHostKeyPolicy):
    def __init__(self, host: str, port: int, known_hosts: Path) -> None:
        self.host, self.port, self.known_hosts = host, port, known_hosts

    def missing_host_key(self, client, hostname, key) -> None:
        raise HostKeyError(
            f"unknown host key for {hostname} ({fingerprint(key)}); if that is the board's key, trust it "
            f"with `ssh-keyscan -p {self.port} {self.host} >> {self.known_hosts}` or rerun with --accept-new-host")


class _AcceptNewHost(paramiko.MissingHostKeyPolicy):
    """Trust a host seen for the first time, and remember it in the chosen known_hosts file."""

    def __init__(self, known_hosts: Path) -> None:
        self.known_hosts = known_hosts

    def missing_host_key(self, client, hostname, key) -> None:
        with _KNOWN_HOSTS_LOCK:
            _append_atomically(self.known_hosts, f"{hostname} {key.get_name()} {key.get_base64()}\n")
        client.get_host_keys().add(hostname, key.get_name(), key)


def known_hosts_file(target: Target, chosen: str | os.PathLike | None) -> Path:
    return Path(chosen or target.known_hosts or DEFAULT_KNOWN_HOSTS).expanduser()


class Connection:
    """An open SSH connection to ``target``. Use :meth:`open`; close it (or use ``with``)."""

    def __init__(self, target: Target, client: paramiko.SSHClient, cancel: threading.Event | None = None) -> None:
        self.target = target
        self._client = client
        self._cancel = cancel or threading.Event()
        self._sftp: paramiko.SFTPClient | None = None
        self._home: str | None = None

    # -- opening ---------------------------------------------------------------------------
    @classmethod
    def open(cls, target: Target, *, known_hosts: str | os.PathLike | None = None, accept_new_host: bool = False,
             timeout: float = DEFAULT_CONNECT_TIMEOUT, cancel: threading.Event | None = None) -> "Connection":
        hosts_file = known_hosts_file(target, known_hosts)
        client = paramiko.SSHClient()
        try:
            if hosts_file.is_file():
                client.load_host_keys(str(hosts_file))
            if not known_hosts and Path(SYSTEM_KNOWN_HOSTS).is_file():
                client.load_system_host_keys(SYSTEM_KNOWN_HOSTS)
        except (OSError, paramiko.SSHException) as exc:
            raise HostKeyError(f"cannot read known_hosts {hosts_file}: {exc}") from None
        client.set_missing_host_key_policy(
            _AcceptNewHost(hosts_file) if accept_new_host else _RefuseUnknownHost(target.host, target.port, hosts_file))
        try:
            client.connect(**_connect_options(target, timeout))
        except BaseException as exc:
            transport = client.get_transport()
            spoke_ssh = transport is not None and bool(transport.remote_version)
            client.close()
            if isinstance(exc, (KeyboardInterrupt, RemoteError)):
                raise
            raise _connect_error(exc, target, timeout, hosts_file, spoke_ssh) from None
        transport = client.get_transport()
        if transport is not None:
            transport.set_keepalive(KEEPALIVE_S)
        return cls(target, client, cancel)

    def close(self) -> None:
        if self._sftp is not None:
            try:
                self._sftp.close()
            except Exception:  # closing a dead connection: nothing left to release
                pass
        self._client.close()

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    @property
    def alive(self) -> bool:
        transport = self._client.get_transport()
        return transport is not None and transport.is_active()

    def check_cancelled(self) -> None:
        if self._cancel.is_set():
            raise Cancelled("interrupted")

    # -- files -----------------------------------------------------------------------------
    @property
    def sftp(self) -> paramiko.SFTPClient:
        if self._sftp is None:
            try:
                self._sftp = self._client.open_sftp()
            except (paramiko.SSHException, EOFError, OSError) as exc:
                raise RemoteConnectionError(f"cannot open SFTP on {self.target.address}: {exc} "
                                            "(is the sftp Subsystem enabled in sshd_config?)") from None
        return self._sftp

    @property
    def home(self) -> str:
        """The login directory (SFTP starts there)."""
        if self._home is None:
            self._home = self.sftp.normalize(".")
        return self._home

    def resolve(self, path: str) -> str:
        """An absolute board path: ``~`` and relative paths are taken from the login directory."""
        if path == "~":
            return self.home
        if path.startswith("~/"):
            return f"{self.home.rstrip('/')}/{path[2:]}"
        if not path.startswith("/"):
            return f"{self.home.rstrip('/')}/{path}"
        return path

    # -- commands --------------------------------------------------------------------------
    def run(self, command: str, *, timeout: float, what: str, check: bool = True,
            cleanup: bool = False) -> CommandResult:
        """Run a shell command on the board and wait at most ``timeout`` seconds.

        On a non-zero exit (with ``check``) raises RemoteCommandError naming ``what`` and the
        command's last error line; on the deadline or an interrupt, kills the command's whole
        process group first. stdin stays open while the command runs: the runner exits when it
        closes, which covers a host that dies without killing anything. ``cleanup`` commands run
        even after an interrupt (they are what an interrupt needs)."""
        if not cleanup:
            self.check_cancelled()
        try:
            channel = self._client.get_transport().open_session(timeout=DEFAULT_CONNECT_TIMEOUT)
            channel.exec_command(f"echo {_PGID_TAG.decode()}$$; {command}")
        except (paramiko.SSHException, EOFError, OSError, AttributeError) as exc:
            raise RemoteConnectionError(f"lost the connection to {self.target.address} "
                                        f"({exc or type(exc).__name__})") from None
        started = _Started()
        try:
            result = self._collect(channel, timeout, started, None if cleanup else self._cancel)
        except BaseException as exc:
            channel.close()
            if started.pgid is not None:
                self._kill_group(started.pgid)
            if isinstance(exc, _Deadline):
                raise RemoteCommandError(f"{what} timed out after {timeout:g} s; stopped it on the board") from None
            if isinstance(exc, _Interrupted):
                raise Cancelled(f"{what} interrupted; stopped it on the board") from None
            if isinstance(exc, (paramiko.SSHException, EOFError, OSError)):
                raise RemoteConnectionError(f"lost the connection to {self.target.address} during {what}") from None
            raise
        channel.close()
        if check and result.exit_status != 0:
            raise RemoteCommandError(f"{what} failed on the board ({result.status_text}): {result.last_error_line()}")
        return result

    def _collect(self, channel: paramiko.Channel, timeout: float, started: "_Started",
                 cancel: threading.Event | None) -> CommandResult:
        deadline = time.monotonic() + timeout
        stdout, stderr = bytearray(), bytearray()
        while True:
            if cancel is not None and cancel.is_set():
                raise _Interrupted()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _Deadline()
            select.select([channel], [], [], min(remaining, 0.05))  # exit-status wakes no select
            while channel.recv_ready():
                stdout += channel.recv(1 << 16)
            while channel.recv_stderr_ready():
                stderr += channel.recv_stderr(1 << 16)
            if started.pgid is None:
                stdout = started.take_pgid(stdout)
            if channel.exit_status_ready() and not channel.recv_ready() and not channel.recv_stderr_ready():
                if channel.eof_received or channel.closed:
                    break
        return CommandResult(channel.recv_exit_status(), bytes(stdout), bytes(stderr))

    def _kill_group(self, pgid: int) -> None:
        """TERM the process group, KILL it if still there after a second; best effort (the
        connection may be gone, in which case the runner's stdin watchdog ends it)."""
        script = (f"kill -TERM -- -{pgid} 2>/dev/null || exit 0; i=0; while [ $i -lt 10 ]; do "
                  f"kill -0 -- -{pgid} 2>/dev/null || exit 0; sleep 0.1; i=$((i+1)); done; "
                  f"kill -KILL -- -{pgid} 2>/dev/null; exit 0")
        try:
            channel = self._client.get_transport().open_session(timeout=5)
            channel.settimeout(5)
            channel.exec_command(script)
            channel.recv_exit_status()
            channel.close()
        except Exception:
            pass


class _Deadline(Exception):
    """The command ran past its timeout."""


class _Interrupted(Exception):
    """The cancel event was set while the command ran."""


class _Started:
    """The command's process group, read from the ``echo`` line in front of its output (which
    may follow lines a login script printed)."""

    pgid: int | None = None

    def take_pgid(self, stdout: bytearray) -> bytearray:
        start = stdout.find(_PGID_TAG)
        end = stdout.find(b"\n", start)
        if start < 0 or end < 0:
            return stdout
        self.pgid = int(stdout[start + len(_PGID_TAG):end])
        return stdout[:start] + stdout[end + 1:]


def _connect_options(target: Target, timeout: float) -> dict:
    if target.identity is not None and not Path(target.identity).is_file():
        raise TargetConfigError(f"identity file {target.identity} not found (target {target.name!r}, {target.origin})")
    options = dict(hostname=target.host, port=target.port, username=target.user, timeout=timeout,
                   banner_timeout=timeout, auth_timeout=timeout, channel_timeout=timeout)
    if target.identity is not None:  # a chosen key is the only one offered, like IdentitiesOnly
        options.update(key_filename=target.identity, allow_agent=False, look_for_keys=False)
    else:
        options.update(key_filename=list(target.config_identities) or None, allow_agent=True, look_for_keys=True)
    if target.proxy_command:
        options["sock"] = paramiko.ProxyCommand(target.proxy_command)
    return options


def _connect_error(exc: BaseException, target: Target, timeout: float, hosts_file: Path,
                   spoke_ssh: bool) -> RemoteError:
    where = f"{target.host}:{target.port}"
    keys = target.identity or "ssh-agent and the default keys"
    if isinstance(exc, paramiko.BadHostKeyException):
        name = host_key_name(target.host, target.port)
        return HostKeyError(
            f"host key for {name} changed: got {fingerprint(exc.key)}, {hosts_file} has "
            f"{fingerprint(exc.expected_key)}; refusing to connect (it could be an attack). If the board "
            f"was reinstalled, remove the old key with `ssh-keygen -R '{name}' -f {hosts_file}` and rerun "
            "with --accept-new-host")
    if isinstance(exc, paramiko.PasswordRequiredException):
        return AuthenticationError(f"identity {keys} is passphrase-protected: load it into ssh-agent "
                                   f"(`ssh-add {keys}`) and drop `identity` from the target")
    if isinstance(exc, paramiko.AuthenticationException):
        return AuthenticationError(f"authentication failed for {target.address} with {keys}: add the public "
                                   f"key to ~/.ssh/authorized_keys on the board (ssh-copy-id -p {target.port} "
                                   f"{target.user}@{target.host})")
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError) or isinstance(exc, ConnectionRefusedError):
        return RemoteConnectionError(f"cannot connect to {where}: connection refused (is sshd running there? "
                                     "Termux: run `sshd`, port 8022)")
    if isinstance(exc, socket.gaierror):
        return RemoteConnectionError(f"cannot resolve host name {target.host!r}")
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return RemoteConnectionError(f"cannot connect to {where}: no answer within {timeout:g} s")
    if isinstance(exc, paramiko.SSHException) and "private key" in str(exc).lower():
        return TargetConfigError(f"identity {keys} is not a private key paramiko can read ({exc})")
    if isinstance(exc, (paramiko.SSHException, EOFError)) and not spoke_ssh:
        return RemoteConnectionError(f"{where} accepted the connection but sent no SSH banner within {timeout:g} s "
                                     "(is sshd listening on that port?)")
    if isinstance(exc, (paramiko.SSHException, EOFError)):
        return RemoteConnectionError(f"SSH handshake with {where} failed: {exc or type(exc).__name__}")
    if isinstance(exc, OSError):
        return RemoteConnectionError(f"cannot connect to {where}: {exc.strerror or exc}")
    return RemoteConnectionError(f"cannot connect to {where}: {type(exc).__name__}: {exc}")

