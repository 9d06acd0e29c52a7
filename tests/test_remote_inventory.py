"""Remote targets without a board: inventory files, ssh:// URLs, ~/.ssh/config, known_hosts
writing, the source hash that decides when a board is re-provisioned, and CLI usage errors."""
from __future__ import annotations

import getpass
import io
import subprocess
import tarfile
from pathlib import Path

import pytest

from edgesdk.errors import ProvisionError, TargetConfigError
from edgesdk.remote.inventory import Target, parse_ssh_url, resolve_targets

pytest.importorskip("paramiko")


@pytest.fixture(autouse=True)
def no_user_files(tmp_path, monkeypatch):
    """Never read the real ~/.config/edgesdk or ~/.ssh/config."""
    monkeypatch.delenv("EDGESDK_INVENTORY", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_inventory_found_by_option_then_env_then_default(tmp_path, monkeypatch):
    default = write(tmp_path / "config" / "edgesdk" / "targets.yaml", "targets: {pi: {host: default-host}}\n")
    from_env = write(tmp_path / "env.yaml", "targets: {pi: {host: env-host}}\n")
    chosen = write(tmp_path / "chosen.yaml", "targets: {pi: {host: chosen-host}}\n")
    assert resolve_targets(["pi"])[0].host == "default-host"
    monkeypatch.setenv("EDGESDK_INVENTORY", str(from_env))
    assert resolve_targets(["pi"])[0].host == "env-host"
    (target,) = resolve_targets(["pi"], inventory=chosen)
    assert target.host == "chosen-host" and str(chosen) in target.origin
    assert default.exists()


def test_full_entry_and_defaults(tmp_path):
    inventory = write(tmp_path / "t.yaml", """
targets:
  phone:
    host: 10.0.0.7
    port: 8022
    user: u0_a123
    identity: ~/.ssh/phone
    python: /data/data/com.termux/files/usr/bin/python
    workdir: ~/edgesdk-work
    backend: opencl
    thermal: [/sys/class/thermal/thermal_zone0/temp, /sys/class/thermal/thermal_zone5/temp]
    power: {current: /sys/class/power_supply/battery/current_now, voltage: /sys/class/power_supply/battery/voltage_now}
    env: {LD_LIBRARY_PATH: /vendor/lib64}
  pi: {host: raspberrypi.local}
""")
    phone, pi = resolve_targets(["phone", "pi"], inventory=inventory)
    assert phone == Target(
        name="phone", host="10.0.0.7", port=8022, user="u0_a123", identity=str(tmp_path / "home" / ".ssh" / "phone"),
        python="/data/data/com.termux/files/usr/bin/python", workdir="~/edgesdk-work", backend="opencl",
        thermal=("/sys/class/thermal/thermal_zone0/temp", "/sys/class/thermal/thermal_zone5/temp"),
        power={"current": "/sys/class/power_supply/battery/current_now",
               "voltage": "/sys/class/power_supply/battery/voltage_now"},
        env={"LD_LIBRARY_PATH": "/vendor/lib64"}, origin=f"inventory {inventory}")
    assert (pi.port, pi.user, pi.python, pi.workdir, pi.identity, pi.backend) == (
        22, getpass.getuser(), "python3", "~/edgesdk", None, None)
    assert phone.address == "u0_a123@10.0.0.7:8022"


@pytest.mark.parametrize("text, message", [
    ("targets: {pi: {hots: x}}", "target 'pi': unknown key 'hots' (known: host, port,"),
    ("targets: {pi: {user: pi}}", "target 'pi': key 'host' is required"),
    ("targets: {pi: {host: h, port: abc}}", "key 'port' must be an integer 1-65535, got 'abc'"),
    ("targets: {pi: {host: h, port: 70000}}", "key 'port' must be an integer 1-65535, got 70000"),
    ("targets: {pi: {host: h, thermal: temp}}", "key 'thermal' must hold absolute paths on the board, got 'temp'"),
    ("targets: {pi: {host: h, power: {current: /a}}}", "key 'power' must map exactly current and voltage"),
    ("targets: {pi: {host: h, env: {1X: y}}}", "'1X' is not a valid environment variable name"),
    ("targets: {pi: {host: h, backend: gpu}}", "key 'backend' must be one of reference, opencl, cpu, got 'gpu'"),
    ("targets: {pi: [h]}", "target 'pi': expected a mapping with the keys host, port"),
    ("- pi\n- h\n", "expected one top-level key 'targets'"),
    ("targets:\n  pi: {host: h\n", "not valid YAML ("),
])
def test_invalid_inventory_one_line_naming_file_and_key(tmp_path, text, message):
    inventory = write(tmp_path / "bad.yaml", text)
    with pytest.raises(TargetConfigError) as info:
        resolve_targets(["pi"], inventory=inventory)
    assert message in str(info.value) and str(inventory) in str(info.value) and "\n" not in str(info.value)


def test_yaml_error_says_where(tmp_path):
    inventory = write(tmp_path / "bad.yaml", "targets:\n  pi:\n    host: [unclosed\n")
    with pytest.raises(TargetConfigError, match=r"not valid YAML \(.* at line \d+\)"):
        resolve_targets(["pi"], inventory=inventory)


def test_unknown_targets_and_missing_files(tmp_path):
    inventory = write(tmp_path / "t.yaml", "targets: {pi: {host: a}, phone: {host: b}}\n")
    with pytest.raises(TargetConfigError, match=r"unknown target 'nano': not in .*t.yaml \(known: phone, pi\)"):
        resolve_targets(["nano"], inventory=inventory)
    with pytest.raises(TargetConfigError, match=r"no targets in .*targets.yaml .*--inventory FILE.*ssh://"):
        resolve_targets(["nano"])
    with pytest.raises(TargetConfigError, match=r"inventory .*missing.yaml not found"):
        resolve_targets(["pi"], inventory=tmp_path / "missing.yaml")
    with pytest.raises(TargetConfigError, match="target 'pi' is listed twice"):
        resolve_targets(["pi", "pi"], inventory=inventory)
    with pytest.raises(TargetConfigError, match="no target given"):
        resolve_targets([])


def test_ssh_urls():
    entry = parse_ssh_url("ssh://pi@10.1.2.3:2222?python=/usr/bin/python3&workdir=/tmp/w&thermal=/a&thermal=/b")
    assert entry == {"host": "10.1.2.3", "port": 2222, "user": "pi", "python": "/usr/bin/python3",
                     "workdir": "/tmp/w", "thermal": ("/a", "/b")}
    (target,) = resolve_targets(["ssh://pi@10.1.2.3:2222?backend=reference"])
    assert (target.name, target.port, target.backend, target.origin) == ("pi@10.1.2.3:2222", 2222, "reference",
                                                                         "command line")
    for url, message in [("http://h", "expected ssh://user@host:port"), ("ssh://h:99999", "port must be an integer"),
                         ("ssh://h?power=/x", "unknown query key 'power'"), ("ssh://h/path", "expected ssh://")]:
        with pytest.raises(TargetConfigError, match=message):
            resolve_targets([url])


def test_ssh_config_fills_in_but_inventory_wins(tmp_path):
    key = write(tmp_path / "home" / ".ssh" / "board_key", "not really a key")
    write(tmp_path / "home" / ".ssh" / "config", f"Host board\n  HostName 192.168.7.7\n  Port 2200\n  User alarm\n"
                                                 f"  IdentityFile {key}\n  IdentityFile ~/.ssh/missing\n"
                                                 "  UserKnownHostsFile ~/.ssh/boards_known\n"
                                                 "  ProxyCommand ssh -W %h:%p jump\n")
    inventory = write(tmp_path / "t.yaml", "targets: {a: {host: board}, b: {host: board, port: 22, user: root}}\n")
    a, b = resolve_targets(["a", "b"], inventory=inventory)
    assert (a.host, a.port, a.user, a.config_identities) == ("192.168.7.7", 2200, "alarm", (str(key),))
    assert a.known_hosts == str(tmp_path / "home" / ".ssh" / "boards_known")
    assert a.proxy_command == "ssh -W 192.168.7.7:2200 jump"
    assert (b.port, b.user) == (22, "root")
    (url_target,) = resolve_targets(["ssh://board"])
    assert (url_target.host, url_target.port) == ("192.168.7.7", 2200)
    with pytest.raises(TargetConfigError, match="ssh config .*nope not found"):
        resolve_targets(["ssh://board"], ssh_config=tmp_path / "nope")


def test_accepted_host_key_is_appended_atomically(tmp_path):
    from edgesdk.remote.connection import _append_atomically
    known = write(tmp_path / "known_hosts", "# mine\nother ssh-ed25519 AAAA")  # no final newline
    known.chmod(0o644)
    _append_atomically(known, "[h]:2222 ssh-ed25519 BBBB\n")
    assert known.read_text() == "# mine\nother ssh-ed25519 AAAA\n[h]:2222 ssh-ed25519 BBBB\n"
    assert known.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["known_hosts"]


# -- what decides a re-install ---------------------------------------------------------------------
def make_checkout(root: Path) -> Path:
    write(root / "pyproject.toml", '[project]\nname = "edgesdk"\n')
    write(root / "edgesdk" / "__init__.py", "x = 1\n")
    write(root / "cpu_native" / "k.cc", "int k;\n")
    write(root / "tests" / "test_x.py", "")
    return root


def test_source_hash_follows_installed_files_only(tmp_path):
    from edgesdk.remote.provision import source_files, source_hash
    root = make_checkout(tmp_path / "plain")
    before = source_hash(root)
    assert source_files(root) == ["cpu_native/k.cc", "edgesdk/__init__.py", "pyproject.toml"]
    write(root / "tests" / "test_x.py", "changed")
    write(root / "edgesdk" / "__pycache__" / "x.pyc", "bytecode")
    assert source_hash(root) == before
    write(root / "edgesdk" / "__init__.py", "x = 2\n")
    assert source_hash(root) != before


def test_source_files_follow_git_ignore(tmp_path):
    from edgesdk.remote.provision import source_files
    root = make_checkout(tmp_path / "repo")
    write(root / ".gitignore", "*.log\n")
    write(root / "edgesdk" / "debug.log", "noise")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    assert "edgesdk/debug.log" not in source_files(root) and "edgesdk/__init__.py" in source_files(root)


def test_given_sdist_must_be_an_edgesdk_sdist(tmp_path):
    from edgesdk.remote.provision import SdkSource
    from sshd import fake_sdist
    good = SdkSource.from_sdist(fake_sdist(tmp_path / "edgesdk-0.2.0.tar.gz", version="0.2.0"))
    assert good.version == "0.2.0" and len(good.hash) == 64
    other = tmp_path / "other.tar.gz"
    with tarfile.open(other, "w:gz") as tar:
        info = tarfile.TarInfo("other-1.0/PKG-INFO")
        data = b"Name: other\nVersion: 1.0\n"
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    with pytest.raises(ProvisionError, match="not an edgesdk sdist"):
        SdkSource.from_sdist(other)
    with pytest.raises(ProvisionError, match=r"not an sdist \(.tar.gz with a PKG-INFO\)"):
        SdkSource.from_sdist(write(tmp_path / "junk.tar.gz", "junk"))


# -- usage errors before any connection -----------------------------------------------------------
def test_cli_usage_errors(capsys, tmp_path):
    from edgesdk.cli import main
    package = write(tmp_path / "m.edgepkg", "x")
    cases = [(["remote", "info"], "no target given"),
             (["remote", "push", "a", str(package), "--targets", "b"], "give either TARGET or --targets, not both"),
             (["remote", "push", "ssh://h", str(tmp_path / "nope.edgepkg")], "package"),
             (["remote", "run", "ssh://h", str(package), "--input", str(tmp_path / "x.npy")], "input file"),
             (["remote", "run", "ssh://h", str(package), "--threads", "0"], "--threads must be >= 1")]
    for argv, message in cases:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("edgesdk: error: ") and message in err and err.count("\n") == 1, err
