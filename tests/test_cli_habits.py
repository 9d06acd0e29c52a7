"""The command line as people used to other tools expect it (issue 12, "fast and familiar"):
``python -m edgesdk``, -q/-v, tqdm progress bars only on a terminal, ``finetune --batch-size``,
``--max-drop`` refusals that write nothing, recipes checked before any work, hints that work.

Run as users run it: subprocesses of the console script (and of ``python -m edgesdk``), one of
them inside a pseudo-terminal to see the bars a person would see.
"""
from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import shutil
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper
import pytest

from onnx_builders import single_node_model

EDGESDK = shutil.which("edgesdk", path=os.path.dirname(sys.executable)) or "edgesdk"
# The digits model with its dynamic batch fixed up front: no import note mixed into stderr.
FIXED = ("--input-shape", "input=1x1x8x8")
BAR = re.compile(r"\d+%\|")  # what every tqdm bar line contains: "37%|████"


def cli(*args: str, check: bool = True, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([EDGESDK, *args], capture_output=True, text=True, timeout=300, env=env)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def digits_model() -> str:
    from edgesdk.models import default_model_path
    return str(default_model_path())


def error_line(proc: subprocess.CompletedProcess) -> str:
    """The one line an edgesdk error prints (and asserts it is exactly one line, exit 2)."""
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("edgesdk: error: "), proc.stderr
    return lines[0]


@pytest.fixture(scope="module")
def conv_model(tmp_path_factory) -> Path:
    """One Conv with a dynamic batch: importing it logs a note (what -q hides)."""
    path = tmp_path_factory.mktemp("habits") / "conv.onnx"
    rng = np.random.default_rng(0)
    model = single_node_model("Conv", ("N", 3, 8, 8), {"W": rng.standard_normal((4, 3, 3, 3)).astype(np.float32)},
                              pads=[1, 1, 1, 1])
    path.write_bytes(model.SerializeToString())
    return path


# -- python -m edgesdk -----------------------------------------------------------------------
@pytest.mark.parametrize("args,code", [(["--version"], 0), (["inspect", "missing.onnx"], 2), (["nosuchcommand"], 2),
                                       (["run", "{model}", "--random", "--json"], 0)])
def test_python_dash_m_is_the_edgesdk_command(conv_model, args, code):
    args = [a.format(model=conv_model) for a in args]
    module = subprocess.run([sys.executable, "-m", "edgesdk", *args], capture_output=True, text=True, timeout=120)
    script = cli(*args, check=False)
    assert module.returncode == script.returncode == code, module.stderr
    assert module.stdout == script.stdout
    if code == 0 and args[0] == "--version":
        assert module.stdout.startswith("edgesdk ")


# -- -q and -v -------------------------------------------------------------------------------
def test_quiet_keeps_results_and_errors_only(conv_model):
    plain = cli("run", str(conv_model), "--random")
    assert "is dynamic and was fixed to 1" in plain.stderr  # the note -q is for
    for args in (["run", str(conv_model), "--random", "-q"], ["-q", "run", str(conv_model), "--random"],
                 ["run", str(conv_model), "--random", "--quiet"]):
        quiet = cli(*args)
        assert quiet.stderr == "" and quiet.stdout == plain.stdout
    failed = cli("-q", "inspect", "missing.onnx", check=False)
    assert "not found" in error_line(failed)


def test_verbose_says_which_backend_and_device_were_picked(conv_model):
    plain = cli("run", str(conv_model), "--random", "--backend", "reference")
    assert "backend" not in plain.stderr
    verbose = cli("run", str(conv_model), "--random", "--backend", "reference", "-v")
    assert "edgesdk: backend reference, precision fp32" in verbose.stderr and verbose.stdout == plain.stdout
    # auto: cpu where the native module loads (named with its device), else reference
    auto = cli("-v", "run", str(conv_model), "--random", "--backend", "auto")
    assert re.search(r"edgesdk: backend (cpu on .+|reference), precision fp32 \(asked for auto\)", auto.stderr)


def test_quiet_and_verbose_together_is_a_usage_error(conv_model):
    proc = cli("run", str(conv_model), "--random", "-q", "-v", check=False)
    assert proc.returncode == 2 and "not both" in proc.stderr and proc.stdout == ""


# -- progress bars ---------------------------------------------------------------------------
def run_in_terminal(args: list[str], tmp_path: Path, columns: int = 200, timeout: float = 240
                    ) -> tuple[int, str, str]:
    """Run edgesdk with stderr on a pseudo-terminal ``columns`` wide (stdout to a file); returns
    (exit status, what the terminal showed, stdout)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    # Redraw on every update: a fast CI machine finishes an epoch before tqdm's default 0.1 s
    # interval, and the rate and ETA appear only from the second drawing on.
    env = dict(os.environ, TQDM_MININTERVAL="0")
    out_path = tmp_path / "stdout.txt"
    with open(out_path, "w") as out:
        proc = subprocess.Popen([EDGESDK, *args], stdin=subprocess.DEVNULL, stdout=out, stderr=slave, env=env)
    os.close(slave)
    shown, deadline = bytearray(), time.monotonic() + timeout
    while time.monotonic() < deadline:  # read as it comes: a full pty buffer would block the child
        ready, _, _ = select.select([master], [], [], 1.0)
        try:
            chunk = os.read(master, 65536) if ready else b""
        except OSError:  # EIO: the child closed its side
            break
        if ready and not chunk:
            break
        shown += chunk
    os.close(master)
    code = proc.wait(timeout=30)
    return code, shown.decode("utf-8", "replace"), out_path.read_text()


def screen_lines(terminal: str) -> list[str]:
    """What each redraw put on the terminal: split on carriage returns and newlines, escapes removed."""
    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", terminal)
    return [line for line in re.split(r"[\r\n]", text) if line.strip()]


def test_finetune_bars_per_epoch_with_batches_rate_eta_and_loss_in_80_columns(tmp_path):
    out = tmp_path / "ft.edgepkg"
    code, terminal, stdout = run_in_terminal(["finetune", "--epochs", "2", "--cluster-bits", "4", "--batch-size", "16",
                                              *FIXED, "-o", str(out)], tmp_path)
    assert code == 0 and out.is_file(), terminal
    bars = [line for line in screen_lines(terminal) if BAR.search(line)]
    assert bars and max(len(line) for line in bars) <= 80, max(bars, key=len)
    epochs = [line for line in bars if line.startswith(("epoch 1/2", "epoch 2/2"))]
    # 1437 training images in batches of 16: 90 batches per epoch, each epoch a bar of its own
    assert {line[:9] for line in epochs} == {"epoch 1/2", "epoch 2/2"}
    assert all("/90 [" in line for line in epochs)
    drawn = [line for line in epochs if re.search(r"\d it/s|\dit/s|\ds/it", line)]
    assert drawn and all(re.search(r"<\d\d:\d\d", line) and "loss " in line for line in drawn)  # ETA and loss
    assert [line for line in bars if line.startswith("packing")]  # packing and its evaluations too
    assert "epoch   2/2" in stdout and "%|" not in stdout  # the per-epoch summary lines stay, on stdout


def test_pack_bar_on_a_narrow_terminal_and_none_with_quiet_or_json(tmp_path):
    args = ["pack", digits_model(), *FIXED, "--cluster-bits", "4", "--eval", "digits"]
    code, terminal, _ = run_in_terminal([*args, "-o", str(tmp_path / "a.edgepkg")], tmp_path, columns=60)
    bars = [line for line in screen_lines(terminal) if BAR.search(line)]
    assert code == 0 and bars and max(len(line) for line in bars) <= 60
    # 60 columns leave no room for the stage name after the rate, but count, ETA and rate stay
    assert any(re.search(r"/360 \[\d\d:\d\d<\d\d:\d\d, [\d.]+k?it/s", line) for line in bars), bars
    for flag in ("-q", "--json"):
        code, terminal, stdout = run_in_terminal([*args, flag, "-o", str(tmp_path / "b.edgepkg")], tmp_path)
        assert code == 0 and "%|" not in terminal and "it/s" not in terminal, terminal
        assert ("ratio" in stdout) if flag == "--json" else ("weights:" in stdout)
    piped = cli(*args, "-o", str(tmp_path / "c.edgepkg"))  # stdout and stderr on pipes: no bar at all
    assert piped.stderr == "" and "\r" not in piped.stdout and "it/s" not in piped.stdout


# -- finetune --batch-size -------------------------------------------------------------------
@pytest.mark.parametrize("value", ["0", "-3", "eight", "1.5"])
def test_finetune_batch_size_must_be_a_positive_integer(tmp_path, value):
    proc = cli("finetune", "--batch-size", value, "-o", str(tmp_path / "x.edgepkg"), check=False)
    assert proc.returncode == 2 and "argument --batch-size: expected a positive integer" in proc.stderr
    assert not list(tmp_path.iterdir())


# -- --max-drop ------------------------------------------------------------------------------
def test_pack_max_drop_refuses_in_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "two_bit.edgepkg"
    proc = cli("pack", digits_model(), *FIXED, "--cluster-bits", "2", "--eval", "digits", "--max-drop", "0.5",
               "-o", str(out), check=False)
    line = error_line(proc)
    drop = float(re.search(r"fell by (\d+\.\d+) pp", line).group(1))
    assert drop > 0.5 and "0.5 pp allowed" in line and "not written" in line and "try " in line
    assert list(tmp_path.iterdir()) == []  # no package, no temp file
    kept = json.loads(cli("pack", digits_model(), *FIXED, "--cluster-bits", "2", "--eval", "digits", "--max-drop",
                          "100", "-o", str(out), "--json").stdout)
    assert out.is_file() and 100 * (kept["baseline_accuracy"] - kept["accuracy"]) == pytest.approx(drop, abs=0.01)


@pytest.mark.parametrize("args,words", [
    (["pack", "{model}", "--cluster-bits", "4", "--max-drop", "1"], "--max-drop needs --eval"),
    (["pack", "{model}", "--eval", "digits", "--max-drop", "-1"], "argument --max-drop"),
    (["pack", "{model}", "--eval", "digits", "--max-drop", "lots"], "argument --max-drop"),
    (["finetune", "{model}", "--train", "{data}", "--max-drop", "1"], "--max-drop needs a test dataset"),
])
def test_max_drop_without_a_dataset_or_out_of_range_is_a_usage_error(tmp_path, args, words):
    data = tmp_path / "train.npz"
    np.savez(data, x=np.zeros((4, 1, 8, 8), np.float32), y=np.zeros(4, np.int64))
    proc = cli(*[a.format(model=digits_model(), data=data) for a in args], "-o", str(tmp_path / "x.edgepkg"),
               check=False)
    assert proc.returncode == 2 and words in proc.stderr and "epoch" not in proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.npz"]


def test_finetune_max_drop_refuses_after_measuring_and_writes_nothing(tmp_path):
    out = tmp_path / "one_bit.edgepkg"
    proc = cli("finetune", "--epochs", "1", "--cluster-bits", "1", *FIXED, "--max-drop", "1", "-o", str(out),
               check=False)
    line = error_line(proc)
    assert re.search(r"fell by \d+\.\d+ pp \(99\.\d+% -> \d+\.\d+%\), more than the 1 pp allowed", line)
    assert "--epochs" in line and list(tmp_path.iterdir()) == []


# -- recipes checked before any work ---------------------------------------------------------
@pytest.mark.parametrize("recipe,words", [
    ({"default": {"cluster_bits": "four"}}, "default: cluster_bits must be an integer 1..8 (or null), got 'four'"),
    ({"default": {"nnm_rate": "half"}}, "nnm_rate must be a number in (0, 1)"),
    ({"default": {"fp16": "no"}}, "fp16 must be true or false, got 'no'"),
    ({"default": {"cluster_bit": 4}}, "unknown setting 'cluster_bit' (did you mean 'cluster_bits'?)"),
    ({"layer": [{"match": "*", "prune": 0.5}]}, "unknown key 'layer' (did you mean 'layers'?)"),
    ({"layers": [{"match": "*", "cluser_bits": 4}]},
     "layers[0]: unknown key 'cluser_bits' (did you mean 'cluster_bits'?)"),
    ({"layers": [{"match": "*Gemm", "cluster_bits": 12}]},
     "layers[0] (match '*Gemm'): cluster_bits must be 1..8, got 12"),
    ({"layers": [{"match": "", "prune": 0.5}]}, "layers[0].match is empty"),
    ({"min_params": True}, "min_params must be a non-negative integer, got True"),
])
def test_bad_recipes_are_one_typed_line_before_any_work(tmp_path, recipe, words):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(recipe))
    for command in (["pack", digits_model()], ["finetune"]):
        proc = cli(*command, "--recipe", str(path), "-o", str(tmp_path / "x.edgepkg"), check=False)
        assert words in error_line(proc) and "epoch" not in proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


@pytest.mark.parametrize("value", ["1.5", "-0.1"])
def test_global_prune_flag_out_of_range_is_one_line(tmp_path, value):
    proc = cli("pack", digits_model(), "--cluster-bits", "4", "--global-prune", value,
               "-o", str(tmp_path / "x.edgepkg"), check=False)
    assert f"global_prune must be a number in [0, 1) (or null), got {value}" in error_line(proc)
    assert not list(tmp_path.iterdir())


def test_a_pattern_that_matches_no_layer_is_a_warning_or_with_strict_an_error(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text('default: {cluster_bits: 4}\nlayers:\n  - {match: "/4/Conv", prune: 0.5}\n'
                      '  - {match: "*fc*", prune: 0.9}\n')
    out = tmp_path / "w.edgepkg"
    warned = cli("pack", digits_model(), *FIXED, "--recipe", str(recipe), "-o", str(out))
    lines = warned.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("edgesdk: warning: recipe pattern '*fc*' matches no layer")
    assert "/0/Conv" in lines[0] and out.is_file()
    out.unlink()
    strict = cli("pack", digits_model(), *FIXED, "--recipe", str(recipe), "--strict-recipe", "-o", str(out),
                 check=False)
    assert "'*fc*' matches no layer" in error_line(strict)
    strict = cli("finetune", *FIXED, "--recipe", str(recipe), "--strict-recipe", "-o", str(out), check=False)
    assert "'*fc*' matches no layer" in error_line(strict) and "epoch" not in strict.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.yaml"]


def test_a_two_input_model_is_refused_before_training(tmp_path):
    rng = np.random.default_rng(0)
    graph = oh.make_graph(
        [oh.make_node("Gemm", ["x", "W"], ["h"]), oh.make_node("Add", ["h", "b"], ["y"])], "two_inputs",
        [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 64]),
         oh.make_tensor_value_info("b", onnx.TensorProto.FLOAT, [1, 10])],
        [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 10])],
        [onnx.numpy_helper.from_array(rng.standard_normal((64, 10)).astype(np.float32), "W")])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 8
    path, data = tmp_path / "two.onnx", tmp_path / "d.npz"
    path.write_bytes(model.SerializeToString())
    np.savez(data, x=rng.standard_normal((32, 64)).astype(np.float32), y=rng.integers(0, 10, 32))
    proc = cli("finetune", str(path), "--train", str(data), "--test", str(data), "--cluster-bits", "4",
               "-o", str(tmp_path / "two.edgepkg"), check=False)
    line = error_line(proc)
    assert "has 2 (x, b)" in line and "one model input" in line and "edgesdk pack" in line
    assert "fine-tuning:" not in proc.stdout and not (tmp_path / "two.edgepkg").exists()


def test_finetune_checks_the_dataset_against_the_model_before_training(tmp_path):
    data = tmp_path / "wrong.npz"
    np.savez(data, x=np.zeros((8, 1, 4, 4), np.float32), y=np.zeros(8, np.int64))
    proc = cli("finetune", *FIXED, "--train", str(data), "--test", str(data), "--cluster-bits", "4",
               "-o", str(tmp_path / "x.edgepkg"), check=False)
    assert "samples have shape (1, 4, 4)" in error_line(proc) and "fine-tuning:" not in proc.stdout


# -- hints that work -------------------------------------------------------------------------
def test_remote_without_paramiko_names_an_install_command_that_works():
    code = ("import sys; sys.modules['paramiko'] = None\n"  # as on a machine without paramiko
            "from edgesdk.cli import main\nsys.exit(main(['remote', 'info', 'ssh://nobody@127.0.0.1:1']))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    line = error_line(proc)
    # edgesdk is on no package index: `pip install 'edgesdk[host]'` cannot work
    assert "pip install paramiko" in line and "pip install -e '.[host]'" in line and "edgesdk[" not in line


def test_no_install_hint_names_a_package_index_edgesdk_is_not_on() -> None:
    # `pip install 'edgesdk[...]'` needs edgesdk on an index; hints must name commands that work
    import edgesdk
    root = Path(edgesdk.__file__).parent
    offenders = [f"{path.relative_to(root)}:{n}" for path in root.rglob("*.py")
                 for n, line in enumerate(path.read_text().splitlines(), 1) if "edgesdk[" in line]
    assert not offenders, offenders


def test_accuracy_drop_error_is_public_and_typed() -> None:
    from edgesdk.compress import AccuracyDropError
    from edgesdk.errors import EdgeSDKError
    assert issubclass(AccuracyDropError, EdgeSDKError)
