"""Absurd sizes fail fast: a typed one-line ModelTooLargeError naming the tensor and the bytes it
would need, raised from shapes before anything of that size is allocated (issue 12).

Each case builds a small ONNX model whose declared input, attributes or constant folding would
make a huge tensor. ``EDGESDK_MAX_TENSOR_BYTES`` makes some cases small enough that the
unchecked code would really allocate them (and tracemalloc would see it), others are absurd on
any machine (a 112 GiB input, Conv pads of 2**62).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any, Callable

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper
import pytest

import edgesdk
from edgesdk.backends import available_backends
from edgesdk.cli import main as cli_main
from edgesdk.errors import EdgeSDKError, ModelLoadError, ModelTooLargeError, UnsupportedModelError
from edgesdk.graph import Graph
from edgesdk.passes import fold_constants
from edgesdk.runtime.plan import make_plan
from edgesdk.runtime.shapes import MAX_BYTES_ENV, check_element_counts, format_bytes, max_tensor_bytes
from onnx_builders import single_node_model

BACKENDS = [b for b in ("reference", "cpu", "opencl") if b in available_backends()] + ["auto"]
EDGESDK = str(Path(sys.executable).with_name("edgesdk"))
HUGE = (1, 3, 1000000, 1000000)  # 10.9 TiB of float32: more than any machine running these tests (a
# 112 GiB input fit a 128 GiB GPU host, where the error named the graph's total instead)
MIB = 2**20


def _model(nodes: list[onnx.NodeProto], x_shape: list[Any] | None, inits: dict[str, np.ndarray] | None = None,
           output: str = "y") -> onnx.ModelProto:
    inputs = [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x_shape)] if x_shape is not None else []
    graph = oh.make_graph(nodes, "sizes", inputs, [oh.make_empty_tensor_value_info(output)],
                          [onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _refused(load: Callable[[], Any], *names: str, budget_mib: float = 16.0) -> ModelTooLargeError:
    """``load()`` raises ModelTooLargeError, in under 2 s and allocating under ``budget_mib``, with a
    one-line message that contains every one of ``names``."""
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(ModelTooLargeError) as info:
            load()
        elapsed = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    message = str(info.value)
    assert "\n" not in message, message
    for name in names:
        assert name in message, f"{name!r} not in {message!r}"
    assert elapsed < 2.0, f"took {elapsed:.2f} s: {message}"
    assert peak < budget_mib * MIB, f"allocated {peak / MIB:.1f} MiB before refusing: {message}"
    assert isinstance(info.value, UnsupportedModelError)  # what backend="auto" and callers catch
    return info.value


@pytest.fixture
def small_limit(monkeypatch: pytest.MonkeyPatch) -> int:
    """1 MiB per tensor: cases the unchecked code would allocate for real (tens of MiB)."""
    monkeypatch.setenv(MAX_BYTES_ENV, "1M")
    return MIB


# -- the three cases of the issue, on every backend ----------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_huge_declared_input(backend: str) -> None:
    error = _refused(lambda: edgesdk.Session(single_node_model("Relu", HUGE), backend=backend),
                     "'x'", "1x3x1000000x1000000", "float32", "10.9 TiB", "input_shapes", "--input-shape")
    assert error.tensor == "x" and error.nbytes == 4 * 3 * 10**12 and error.limit == max_tensor_bytes()


@pytest.mark.parametrize("backend", BACKENDS)
def test_huge_input_shapes_override(backend: str) -> None:
    model = single_node_model("Relu", ("N", 3, "H", "W"))
    edgesdk.Session(model, backend="reference", input_shapes={"x": (1, 3, 8, 8)}).close()  # sane: loads
    _refused(lambda: edgesdk.Session(model, backend=backend, input_shapes={"x": HUGE}),
             "'x'", "1x3x1000000x1000000", "10.9 TiB")


@pytest.mark.parametrize("backend", BACKENDS)
def test_conv_pads_2_pow_62(backend: str) -> None:
    w = np.ones((4, 3, 3, 3), np.float32)
    model = single_node_model("Conv", (1, 3, 8, 8), {"w": w}, kernel_shape=[3, 3], pads=[2**62] * 4)
    _refused(lambda: edgesdk.Session(model, backend=backend), "'y'", "Conv", "EiB", "float32")


@pytest.mark.parametrize("backend", BACKENDS)
def test_lrn_size_2_pow_62(backend: str) -> None:
    model = single_node_model("LRN", (1, 3, 8, 8), size=2**62)
    error = _refused(lambda: edgesdk.Session(model, backend=backend), "'y'", "LRN", "size", str(2**62),
                     "2147483647")
    assert error.tensor == "y"


def test_lrn_window_wider_than_the_channels_runs_clipped() -> None:
    """The largest size accepted runs on every backend without a window-sized buffer, and equals
    a window of all channels (alpha is divided by the full size)."""
    x = np.random.default_rng(0).random((1, 3, 4, 4), np.float32) * 100
    size = 2**31 - 1
    squares = (x ** 2).sum(axis=1, keepdims=True)
    expected = x / (1.0 + (1.0 / size) * squares) ** 0.75
    for backend in BACKENDS:
        with edgesdk.Session(single_node_model("LRN", x.shape, size=size, alpha=1.0), backend=backend) as sess:
            np.testing.assert_allclose(sess.run({"x": x})["y"], expected, rtol=1e-5, err_msg=backend)


# -- window attributes ------------------------------------------------------------------------
def test_pool_stride_out_of_int32_range() -> None:
    """A stride of 2**62 leaves a 1x1 output (no size is large), but the kernels index with int:
    refused as out of range, naming the node, its output and the attribute."""
    model = single_node_model("MaxPool", (1, 3, 8, 8), kernel_shape=[2, 2], strides=[2**62, 2**62])
    _refused(lambda: edgesdk.Session(model, backend="reference"), "MaxPool", "'y'", "strides", "2147483647")


def test_conv_dilation_needs_a_padded_input_too_large() -> None:
    """Dilation and pads of 2**33 give a sane 8x8 output, but the padded input the kernels sweep
    would be 2**70 bytes: refused, naming it and its bytes."""
    w = np.ones((4, 3, 3, 3), np.float32)
    model = single_node_model("Conv", (1, 3, 8, 8), {"w": w}, kernel_shape=[3, 3], dilations=[2**33, 2**33],
                              pads=[2**33] * 4)
    _refused(lambda: edgesdk.Session(model, backend="reference"), "padded input 'x'", "Conv", "EiB")


def test_pool_kernel_larger_than_int32_with_a_high_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the byte limit out of the way (the env override), a kernel of 2**32 still fails
    the 32-bit range check, not numpy or the native code."""
    monkeypatch.setenv(MAX_BYTES_ENV, str(2**62))
    model = single_node_model("AveragePool", (1, 1, 1, 8), kernel_shape=[1, 2**32], pads=[0, 2**32, 0, 0])
    _refused(lambda: edgesdk.Session(model, backend="reference"), "kernel_shape", "AveragePool")


def test_pad_of_2_pow_62() -> None:
    model = single_node_model("Pad", (1, 3, 8, 8), {"pads": np.array([0, 0, 2**62, 0, 0, 0, 0, 0], np.int64)})
    _refused(lambda: edgesdk.Session(model, backend="reference"), "'y'", "Pad", "EiB")


# -- constant folding: nothing is allocated before the check ------------------------------------
def _folding_model(op: str, inputs: dict[str, np.ndarray], **attrs: Any) -> onnx.ModelProto:
    """y = x + op(*inputs): the op's inputs are initializers, so the importer folds it."""
    nodes = [oh.make_node(op, list(inputs), ["c"], **attrs), oh.make_node("Add", ["x", "c"], ["y"])]
    return _model(nodes, [1], inputs)


FOLDING_CASES = {
    "ConstantOfShape": ({"shape": np.array([64, 1024, 1024], np.int64)}, {}),
    "Expand": ({"v": np.ones((1, 1), np.float32), "shape": np.array([4096, 4096], np.int64)}, {}),
    "Tile": ({"v": np.ones((2, 2), np.float32), "reps": np.array([2048, 2048], np.int64)}, {}),
    "Range": ({"start": np.array(0, np.int64), "limit": np.array(16 * 2**20, np.int64),
               "delta": np.array(1, np.int64)}, {}),
    "Where": ({"cond": np.ones((4096, 1), bool), "a": np.ones((1, 4096), np.float32),
               "b": np.zeros((1, 1), np.float32)}, {}),
    "Gather": ({"data": np.ones((1, 4096), np.float32), "idx": np.zeros((4096,), np.int64)}, {"axis": 0}),
}


@pytest.mark.parametrize("op", sorted(FOLDING_CASES))
def test_folding_to_a_large_constant(op: str, small_limit: int) -> None:
    """Each folds to 64 MiB or more (real allocations the unchecked code made): refused at 1 MiB
    before evaluating, with the folded tensor's name and bytes."""
    inputs, attrs = FOLDING_CASES[op]
    error = _refused(lambda: edgesdk.Session(_folding_model(op, inputs, **attrs), backend="reference"),
                     f"node '{op}_0' ({op})", "constant 'c'", "MiB", MAX_BYTES_ENV, "fix the model")
    assert error.nbytes >= 16 * MIB


@pytest.mark.parametrize("op, inputs", [
    ("ConstantOfShape", {"shape": np.array([10**6, 10**6, 10**6], np.int64)}),
    ("Range", {"start": np.array(0, np.int64), "limit": np.array(2**62, np.int64), "delta": np.array(1, np.int64)}),
    ("Tile", {"v": np.ones((2,), np.float32), "reps": np.array([2**62], np.int64)}),
])
def test_folding_to_an_absurd_constant(op: str, inputs: dict[str, np.ndarray]) -> None:
    """Sizes no machine holds: typed and one line (was a MemoryError or ValueError from numpy)."""
    _refused(lambda: edgesdk.Session(_folding_model(op, inputs), backend="reference"), "'c'", "EiB")


def test_folding_pass_checks_before_evaluating(small_limit: int) -> None:
    """passes.fold_constants on a hand-built graph (no importer involved) refuses a Pad of a
    constant to 64 MiB before numpy pads it."""
    graph = Graph("fold")
    graph.add_constant("c", np.ones((1, 1, 2, 2), np.float32))
    graph.add_node("Pad", ["c"], ["p"], name="pad", pads=(0, 0, 4094, 4094, 0, 0, 0, 0), mode="constant",
                   value=0.0)
    graph.outputs.append("p")
    _refused(lambda: fold_constants(graph), "node 'pad' (Pad)", "'p'", "64.0 MiB")


# -- every tensor, whatever built the graph ----------------------------------------------------
def test_hand_built_graph_with_a_huge_input() -> None:
    graph = Graph("hand")
    graph.add_input("x", HUGE)
    graph.add_node("Relu", ["x"], ["y"], name="relu")
    graph.outputs.append("y")
    _refused(lambda: edgesdk.Session(graph, backend="reference"), "'x'", "10.9 TiB")


def test_plan_checks_a_graph_it_did_not_infer() -> None:
    """make_plan is what every backend is built from: a graph whose activation shapes were set
    by someone else (a package, a pass) is checked there too."""
    with edgesdk.Session(single_node_model("Relu", (1, 3, 8, 8)), backend="reference") as sess:
        graph = sess.graph.copy()
    graph.tensors["y"].shape = (2**40, 2**40)
    _refused(lambda: make_plan(graph), "'y'", "1099511627776x1099511627776")


def test_peak_of_live_activations(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each tensor fits the limit but x, relu(x) and their concatenation live at once do not."""
    monkeypatch.setenv(MAX_BYTES_ENV, str(150_000))
    nodes = [oh.make_node("Relu", ["x"], ["r"]), oh.make_node("Concat", ["x", "r"], ["y"], axis=1)]
    model = _model(nodes, [1, 1, 100, 100])  # 40 kB, 40 kB, 80 kB
    error = _refused(lambda: edgesdk.Session(model, backend="reference"), "live at once", "156.2 KiB",
                     "146.5 KiB", "'y'")
    assert error.nbytes == 160_000
    monkeypatch.setenv(MAX_BYTES_ENV, str(160_000))
    with edgesdk.Session(model, backend="reference") as sess:
        assert sess.plan.peak_activation_bytes == 160_000


def test_normal_model_loads_and_env_override(monkeypatch: pytest.MonkeyPatch) -> None:
    model = single_node_model("Relu", (1, 3, 64, 64))  # 48 KiB
    x = np.full((1, 3, 64, 64), -1.0, np.float32)
    for backend in BACKENDS:
        with edgesdk.Session(model, backend=backend) as sess:
            assert (sess.run({"x": x})["y"] == 0).all()
    monkeypatch.setenv(MAX_BYTES_ENV, "16K")
    _refused(lambda: edgesdk.Session(model, backend="reference"), "48.0 KiB", "16.0 KiB", MAX_BYTES_ENV)
    monkeypatch.setenv(MAX_BYTES_ENV, "lots")
    with pytest.raises(EdgeSDKError, match=f"{MAX_BYTES_ENV}='lots' is not a positive size"):
        edgesdk.Session(model, backend="reference")


def test_huge_initializer_without_data_is_a_load_error() -> None:
    weight = onnx.TensorProto(name="w", data_type=onnx.TensorProto.FLOAT, dims=[100000, 100000, 4])
    model = _model([oh.make_node("Add", ["x", "w"], ["y"])], [1, 4])
    model.graph.initializer.append(weight)
    with pytest.raises(ModelLoadError, match="cannot read initializer 'w'"):
        edgesdk.Session(model, backend="reference")


def test_element_counts_for_32_bit_kernels() -> None:
    """The helper a backend whose kernels index with int (opencl) calls while it builds: decided
    from shapes, so a 2**31-element tensor is refused without existing."""
    graph = Graph("wide")
    graph.add_input("x", (2**31 - 1,))
    graph.add_node("Relu", ["x"], ["y"], name="relu")
    graph.tensors["y"] = graph.tensors["x"].copy()
    graph.tensors["y"].name = "y"
    check_element_counts(graph, 2**31 - 1, "opencl")
    graph.tensors["y"].shape = (2**31,)
    with pytest.raises(ModelTooLargeError, match=r"'y' of shape 2147483648 float32 has 2147483648 elements, "
                                                 r"more than the 2147483647 the opencl backend's kernels index"):
        check_element_counts(graph, 2**31 - 1, "opencl")


def test_format_bytes() -> None:
    assert format_bytes(1023) == "1023 B"
    assert format_bytes(48 * 1024) == "48.0 KiB"
    assert format_bytes(4 * 3 * 10**10) == "111.8 GiB"
    assert format_bytes(2**80) == "1.05e+06 EiB"
    assert format_bytes(2**2000) == "about 2^2000 bytes"


# -- the command line: one line, exit 2 --------------------------------------------------------
@pytest.mark.parametrize("argv", [["inspect"], ["run", "--random", "--backend", "reference"],
                                  ["run", "--random", "--backend", "cpu"]])
def test_cli_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    if argv[-1] not in BACKENDS and argv[0] == "run":
        pytest.skip(f"backend {argv[-1]} unavailable")
    path = tmp_path / "huge.onnx"
    onnx.save(single_node_model("Relu", HUGE), path)
    assert cli_main([argv[0], str(path), *argv[1:]]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("edgesdk: error: input 'x'") and "10.9 TiB" in err, err


def test_cli_subprocess_input_shape(tmp_path: Path) -> None:
    """As users run it: the console script, --input-shape making a dynamic model too large."""
    path = tmp_path / "dynamic.onnx"
    onnx.save(single_node_model("Relu", ("N", 3, "H", "W")), path)
    env = {k: v for k, v in os.environ.items() if k != MAX_BYTES_ENV}
    proc = subprocess.run([EDGESDK, "inspect", str(path), "--input-shape", "x=1x3x1000000x1000000"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "10.9 TiB" in lines[0] and "'x'" in lines[0], proc.stderr


# -- backend limits: the opencl kernels index with int, and one buffer has a driver limit -----------

def _relu_model(shape: tuple[int, ...]) -> onnx.ModelProto:
    return _model([oh.make_node("Relu", ["x"], ["y"])], list(shape))


def _opencl_available() -> bool:
    from edgesdk.backends.opencl import OpenCLBackend
    return OpenCLBackend.unavailable_reason() is None


@pytest.mark.skipif(not _opencl_available(), reason="no OpenCL device")
def test_opencl_refuses_tensors_its_int_indices_cannot_reach() -> None:
    # 2.5e9 elements (10 GB) fits this machine's memory limit below but not a 32-bit index
    model = _relu_model((1, 1, 50000, 50000))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EDGESDK_MAX_TENSOR_BYTES", str(2**40))
        with pytest.raises(ModelTooLargeError) as info:
            edgesdk.Session(model, backend="opencl")
    assert "elements" in str(info.value) and "'x'" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.skipif(not _opencl_available(), reason="no OpenCL device")
def test_opencl_refuses_a_buffer_past_the_drivers_allocation_limit() -> None:
    from edgesdk.backends.opencl.device import open_device
    limit = int(open_device(None).cl_device.max_mem_alloc_size)
    side = int((limit // 4) ** 0.5) + 64  # one float32 plane just past the limit, under 2^31 elements
    if side * side >= 2**31:
        pytest.skip("this device's allocation limit is past the 32-bit element range")
    model = _relu_model((1, 1, side, side))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EDGESDK_MAX_TENSOR_BYTES", str(2**40))
        with pytest.raises(ModelTooLargeError) as info:
            edgesdk.Session(model, backend="opencl")
    assert "CL_DEVICE_MAX_MEM_ALLOC_SIZE" in str(info.value) and "\n" not in str(info.value)
