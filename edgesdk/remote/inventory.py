"""Targets: named boards from an inventory file, or inline ``ssh://user@host:port`` URLs.

The inventory is YAML (or JSON) with one mapping per board under ``targets:``::

    targets:
      pi4:
        host: 192.168.1.20
        user: pi
        identity: ~/.ssh/id_ed25519
        backend: cpu
        thermal: /sys/class/thermal/thermal_zone0/temp

It is found at ``--inventory FILE``, else ``$EDGESDK_INVENTORY``, else
``~/.config/edgesdk/targets.yaml`` (``$XDG_CONFIG_HOME`` honoured). ``~/.ssh/config`` fills in
what a target leaves out (HostName, Port, User, IdentityFile, UserKnownHostsFile, ProxyCommand),
so a target's ``host`` may be an ssh alias. Values given in the inventory or URL win.
"""
from __future__ import annotations

import getpass
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from ..errors import TargetConfigError

DEFAULT_PORT = 22
DEFAULT_PYTHON = "python3"
DEFAULT_WORKDIR = "~/edgesdk"
DEFAULT_SSH_CONFIG = "~/.ssh/config"
INVENTORY_ENV = "EDGESDK_INVENTORY"

TARGET_KEYS = ("host", "port", "user", "identity", "python", "workdir", "backend", "thermal", "power", "env")
POWER_KEYS = ("current", "voltage")
# Keys an ssh:// URL may carry in its query string (the rest need an inventory entry).
URL_QUERY_KEYS = ("identity", "python", "workdir", "backend", "thermal")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Target:
    """One board, fully resolved (inventory or URL, then ~/.ssh/config, then defaults)."""

    name: str
    host: str
    port: int
    user: str
    identity: str | None  # a key file; None: ssh-agent and ~/.ssh/config / default keys
    python: str  # the board's interpreter that creates the SDK's venv
    workdir: str  # on the board; "~/..." is relative to the login directory
    backend: str | None = None  # preferred backend for run/profile
    thermal: tuple[str, ...] = ()  # sysfs files in millidegrees C
    power: Mapping[str, str] | None = None  # {"current": path, "voltage": path}
    env: Mapping[str, str] = field(default_factory=dict)  # exported for every runner command
    origin: str = "command line"  # where the target was defined, for error messages
    config_identities: tuple[str, ...] = ()  # IdentityFile entries of ~/.ssh/config that exist
    known_hosts: str | None = None  # UserKnownHostsFile of ~/.ssh/config
    proxy_command: str | None = None

    @property
    def address(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"


# -- the inventory file ----------------------------------------------------------------------
def inventory_path(explicit: str | os.PathLike | None = None) -> tuple[Path, bool]:
    """The inventory to read and whether the user chose it (a chosen file must exist)."""
    if explicit:
        return Path(explicit).expanduser(), True
    if os.environ.get(INVENTORY_ENV):
        return Path(os.environ[INVENTORY_ENV]).expanduser(), True
    config_home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return config_home / "edgesdk" / "targets.yaml", False


def load_inventory(path: Path) -> dict[str, dict[str, Any]]:
    """name -> validated raw entry (ssh config and defaults are applied later)."""
    import yaml  # also reads JSON, which is YAML

    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise TargetConfigError(f"cannot read inventory {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise TargetConfigError(f"inventory {path}: not valid YAML ({problem}{where})") from None
    if data is None:
        return {}
    if not isinstance(data, dict) or not isinstance(data.get("targets", {}), dict) or set(data) - {"targets"}:
        raise TargetConfigError(f"inventory {path}: expected one top-level key 'targets' mapping names "
                                "to targets, e.g. targets: {pi4: {host: 192.168.1.20, user: pi}}")
    targets = data.get("targets") or {}
    return {str(name): _validate_entry(entry, f"inventory {path}: target {str(name)!r}")
            for name, entry in targets.items()}


def _validate_entry(entry: Any, where: str) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise TargetConfigError(f"{where}: expected a mapping with the keys {', '.join(TARGET_KEYS)}")
    unknown = sorted(set(map(str, entry)) - set(TARGET_KEYS))
    if unknown:
        raise TargetConfigError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(TARGET_KEYS)})")
    if "host" not in entry:
        raise TargetConfigError(f"{where}: key 'host' is required")
    checked: dict[str, Any] = {}
    for key, value in entry.items():
        checked[key] = _VALIDATORS[key](value, f"{where}: key {key!r}")
    return checked


def _text(value: Any, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)) or not str(value).strip():
        raise TargetConfigError(f"{where} must be a non-empty string, got {value!r}")
    return str(value).strip()


def _port(value: Any, where: str) -> int:
    try:
        port = int(value)
    except (TypeError, ValueError):
        port = 0
    if isinstance(value, bool) or not 1 <= port <= 65535 or str(port) != str(value).strip():
        raise TargetConfigError(f"{where} must be an integer 1-65535, got {value!r}")
    return port


def _backend(value: Any, where: str) -> str:
    from ..backends import backend_names
    name = _text(value, where)
    if name not in backend_names():
        raise TargetConfigError(f"{where} must be one of {', '.join(backend_names())}, got {name!r}")
    return name


def _absolute_paths(value: Any, where: str) -> tuple[str, ...]:
    paths = [value] if isinstance(value, str) else value
    if not isinstance(paths, (list, tuple)) or not paths:
        raise TargetConfigError(f"{where} must be a path or a list of paths, got {value!r}")
    for path in paths:
        if not isinstance(path, str) or not path.startswith("/"):
            raise TargetConfigError(f"{where} must hold absolute paths on the board, got {path!r}")
    return tuple(paths)


def _power(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict) or set(map(str, value)) != set(POWER_KEYS):
        raise TargetConfigError(f"{where} must map exactly {' and '.join(POWER_KEYS)} to sysfs files, e.g. "
                                "{current: /sys/class/power_supply/battery/current_now, "
                                "voltage: /sys/class/power_supply/battery/voltage_now}")
    return {key: _absolute_paths(value[key], f"{where}.{key}")[0] for key in POWER_KEYS}


def _env(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise TargetConfigError(f"{where} must map variable names to values, e.g. {{LD_LIBRARY_PATH: /vendor/lib64}}")
    for name in value:
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise TargetConfigError(f"{where}: {name!r} is not a valid environment variable name")
    return {name: _text(v, f"{where}.{name}") for name, v in value.items()}


_VALIDATORS = {"host": _text, "port": _port, "user": _text, "identity": _text, "python": _text,
               "workdir": _text, "backend": _backend, "thermal": _absolute_paths, "power": _power, "env": _env}


# -- inline ssh:// targets -------------------------------------------------------------------
def parse_ssh_url(url: str) -> dict[str, Any]:
    """``ssh://[user@]host[:port][?python=...&workdir=...&identity=...&backend=...&thermal=...]``."""
    where = f"target {url!r}"
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        raise TargetConfigError(f"{where}: the port must be an integer 1-65535") from None
    if parts.scheme != "ssh" or not parts.hostname or parts.path not in ("", "/") or parts.fragment:
        raise TargetConfigError(f"{where}: expected ssh://user@host:port, optionally with "
                                f"?{'=...&'.join(URL_QUERY_KEYS)}=...")
    entry: dict[str, Any] = {"host": parts.hostname}
    if port is not None:
        entry["port"] = port
    if parts.username:
        entry["user"] = unquote(parts.username)
    for key, values in parse_qs(parts.query, keep_blank_values=True, strict_parsing=False).items():
        if key not in URL_QUERY_KEYS:
            raise TargetConfigError(f"{where}: unknown query key {key!r} (known: {', '.join(URL_QUERY_KEYS)}; "
                                    "power and env need an inventory entry)")
        entry[key] = values if key == "thermal" else values[-1]
    return _validate_entry(entry, where)


# -- resolution ------------------------------------------------------------------------------
def _ssh_config_lookup(alias: str, ssh_config: str | os.PathLike | None) -> dict[str, Any]:
    path = Path(ssh_config or DEFAULT_SSH_CONFIG).expanduser()
    if not path.is_file():
        if ssh_config:  # chosen explicitly: a typo should not pass silently
            raise TargetConfigError(f"ssh config {path} not found")
        return {}
    import paramiko
    try:
        return dict(paramiko.SSHConfig.from_path(str(path)).lookup(alias))
    except Exception as exc:  # paramiko raises several types for malformed files
        raise TargetConfigError(f"cannot read ssh config {path}: {exc}") from None


def _build_target(name: str, entry: dict[str, Any], origin: str, ssh_config: str | os.PathLike | None) -> Target:
    config = _ssh_config_lookup(entry["host"], ssh_config)
    try:
        config_port = int(config.get("port", DEFAULT_PORT))
    except ValueError:
        raise TargetConfigError(f"ssh config: Port {config.get('port')!r} of host {entry['host']!r} is not a number") from None
    identities = tuple(p for p in config.get("identityfile", []) if Path(p).expanduser().is_file())
    known_hosts = (config.get("userknownhostsfile") or "").split()
    identity = entry.get("identity")
    return Target(
        name=name,
        host=config.get("hostname") or entry["host"],
        port=entry.get("port", config_port),
        user=entry.get("user") or config.get("user") or getpass.getuser(),
        identity=str(Path(identity).expanduser()) if identity else None,
        python=entry.get("python", DEFAULT_PYTHON),
        workdir=entry.get("workdir", DEFAULT_WORKDIR),
        backend=entry.get("backend"),
        thermal=tuple(entry.get("thermal", ())),
        power=entry.get("power"),
        env=dict(entry.get("env", {})),
        origin=origin,
        config_identities=identities,
        known_hosts=str(Path(known_hosts[0]).expanduser()) if known_hosts else None,
        proxy_command=config.get("proxycommand"),
    )


def resolve_targets(specs: list[str], *, inventory: str | os.PathLike | None = None,
                    ssh_config: str | os.PathLike | None = None) -> list[Target]:
    """Targets for names (looked up in the inventory) and ``ssh://`` URLs, in the order given."""
    if not specs:
        raise TargetConfigError("no target given: name one from the inventory or give ssh://user@host:port")
    duplicates = sorted({s for s in specs if specs.count(s) > 1})
    if duplicates:
        raise TargetConfigError(f"target {duplicates[0]!r} is listed twice")
    path, chosen = inventory_path(inventory)
    entries: dict[str, dict[str, Any]] | None = None
    targets = []
    for spec in specs:
        if "://" in spec:  # a URL (only ssh:// is accepted), never an inventory name
            targets.append(_build_target(spec.split("?", 1)[0].removeprefix("ssh://"), parse_ssh_url(spec),
                                         "command line", ssh_config))
            continue
        if entries is None:
            if chosen and not path.is_file():
                raise TargetConfigError(f"inventory {path} not found")
            entries = load_inventory(path) if path.is_file() else {}
        if spec not in entries:
            raise TargetConfigError(_unknown_target_message(spec, path, entries))
        targets.append(_build_target(spec, entries[spec], f"inventory {path}", ssh_config))
    return targets


def _unknown_target_message(name: str, path: Path, entries: dict[str, Any]) -> str:
    if not entries:
        return (f"unknown target {name!r}: no targets in {path} (write one there, pass --inventory FILE, "
                "or give ssh://user@host:port)")
    return f"unknown target {name!r}: not in {path} (known: {', '.join(sorted(entries))})"
