"""One Session run from many Python threads at once (issue 12): every result must equal the
serial result for the same input, on every backend and precision.

Each check runs THREADS threads x RUNS runs, every run with its own input, all threads released
together by a barrier, and compares each output bit for bit with a serial run of the same input
on the same session. The opencl checks run in a child process, so that a crash in the driver
(the SIGSEGV this test found in the buffer mapping) is a failed test and not a dead worker.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper
import pytest

import edgesdk
from edgesdk.backends import available_backends
from edgesdk.models import default_model_path

THREADS = 8
RUNS = 200
TESTS = Path(__file__).resolve().parent
LENET = str(default_model_path())


def conv_model(channels: int = 8, size: int = 32) -> onnx.ModelProto:
    """Conv(3x3, pads 1) -> Relu -> GlobalAveragePool: above the cpu backend's threshold for
    splitting a step over threads (so the native pool gets concurrent callers), yet fast."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((16, channels, 3, 3)).astype(np.float32) * 0.2
    b = rng.standard_normal(16).astype(np.float32)
    nodes = [oh.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             oh.make_node("Relu", ["c"], ["r"]),
             oh.make_node("GlobalAveragePool", ["r"], ["y"])]
    graph = oh.make_graph(nodes, "conv_relu_gap",
                          [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, channels, size, size])],
                          [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 16, 1, 1])],
                          [onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(b, "b")])
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def distinct_inputs(sess: edgesdk.Session, count: int, seed: int = 0) -> list[np.ndarray]:
    shape = sess.input_shapes[sess.input_names[0]]
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(count)]


def hammer(call: Callable[[int], None], threads: int = THREADS) -> list[BaseException]:
    """Run call(thread_index) on ``threads`` threads released together; the exceptions raised."""
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []

    def body(index: int) -> None:
        barrier.wait()
        try:
            call(index)
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            errors.append(exc)

    workers = [threading.Thread(target=body, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return errors


def check_concurrent_runs(sess: edgesdk.Session, runs: int = RUNS, threads: int = THREADS,
                          profile_every: int = 0) -> int:
    """Runs ``threads`` x ``runs`` distinct inputs concurrently; returns how many outputs differ
    from the serial outputs. Every ``profile_every``-th call is a Session.profile instead."""
    name, out = sess.input_names[0], sess.output_names[0]
    inputs = distinct_inputs(sess, threads * runs)
    serial = [sess.run({name: x})[out] for x in inputs]
    wrong = [0] * threads

    def worker(t: int) -> None:
        for i in range(runs):
            k = t * runs + i
            if profile_every and i % profile_every == 0:
                got = sess.profile({name: inputs[k]}).outputs[out]
            else:
                got = sess.run({name: inputs[k]})[out]
            wrong[t] += not np.array_equal(got, serial[k])

    errors = hammer(worker, threads)
    if errors:
        raise errors[0]
    return sum(wrong)


HOST_BACKENDS = [b for b in ("reference", "cpu") if b in available_backends()]


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("backend", HOST_BACKENDS)
@pytest.mark.parametrize("model", ["lenet", "conv"])
def test_concurrent_runs_match_serial(backend: str, precision: str, model: str) -> None:
    source = LENET if model == "lenet" else conv_model()
    sess = edgesdk.Session(source, backend=backend, precision=precision, threads=2)
    assert check_concurrent_runs(sess) == 0


@pytest.mark.parametrize("backend", HOST_BACKENDS)
def test_profile_concurrent_with_run(backend: str) -> None:
    sess = edgesdk.Session(conv_model(), backend=backend, threads=2)
    assert check_concurrent_runs(sess, runs=60, profile_every=3) == 0


# -- opencl, in a child process ---------------------------------------------------------------------
OPENCL_CHILD = """
import sys
sys.path.insert(0, {tests!r})
import edgesdk
from test_concurrency import check_concurrent_runs, conv_model, LENET
model = LENET if {model!r} == "lenet" else conv_model()
sess = edgesdk.Session(model, backend="opencl", precision={precision!r})
wrong = check_concurrent_runs(sess, runs={runs}, profile_every={profile_every})
print("wrong", wrong)
sys.exit(1 if wrong else 0)
"""


def opencl_available() -> bool:
    return "opencl" in available_backends()


@pytest.mark.skipif(not opencl_available(), reason="no OpenCL device")
@pytest.mark.parametrize("memory", ["zero_copy", "copy"])
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_opencl_concurrent_runs_match_serial(precision: str, memory: str, monkeypatch) -> None:
    monkeypatch.setenv("EDGESDK_OPENCL_MEMORY", memory)
    script = OPENCL_CHILD.format(tests=str(TESTS), model="lenet", precision=precision, runs=RUNS, profile_every=0)
    run_child(script)


@pytest.mark.skipif(not opencl_available(), reason="no OpenCL device")
def test_opencl_profile_concurrent_with_run() -> None:
    run_child(OPENCL_CHILD.format(tests=str(TESTS), model="conv", precision="fp32", runs=30, profile_every=3))


def run_child(script: str) -> None:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          timeout=300)
    tail = (done.stdout + done.stderr)[-2000:]
    assert done.returncode == 0, f"child exited with {done.returncode} (negative: killed by that signal): {tail}"


def test_reference_thread_limit_holds_until_the_last_overlapping_run_ends() -> None:
    """threads=1 limits BLAS process-wide during a reference run. threadpoolctl's limit()
    restores what it saw on entry, so with two runs in flight the first one out lifted the
    limit under the second, and the second one out left the process limited for good. The
    runs' limit scopes are entered and left in that overlapping order here, on the main thread
    (this OpenBLAS ignores set_num_threads from other threads)."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    controllers = threadpoolctl.ThreadpoolController().select(user_api="blas").lib_controllers
    if not controllers:
        pytest.skip("numpy uses no BLAS threadpoolctl can see")
    backend = edgesdk.Session(conv_model(), backend="reference", threads=1)._impl

    def blas_threads() -> set[int]:
        return {c.get_num_threads() for c in controllers}

    with threadpoolctl.threadpool_limits(limits=3, user_api="blas"):
        first, second = backend._thread_limit(), backend._thread_limit()
        first.__enter__()
        second.__enter__()
        assert blas_threads() == {1}
        first.__exit__(None, None, None)
        assert blas_threads() == {1}, "the first run out lifted the limit under the second"
        second.__exit__(None, None, None)
        assert blas_threads() == {3}, "the limit from before the runs did not come back"
