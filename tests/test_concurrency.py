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
    # numpy's conv of the second model is slow: fewer runs there (LeNet keeps 8 x 200)
    assert check_concurrent_runs(sess, runs=RUNS if (backend, model) != ("reference", "conv") else 50) == 0


@pytest.mark.skipif("cpu" not in HOST_BACKENDS, reason="edgesdk._native not built")
def test_cpu_arenas_grow_to_the_runs_in_flight_only() -> None:
    sess = edgesdk.Session(LENET, backend="cpu")
    x = distinct_inputs(sess, 1)[0]
    for _ in range(20):
        sess.run({"input": x})
    assert sess._impl.arena_count == 1  # serial runs reuse one arena
    assert check_concurrent_runs(sess, runs=50) == 0
    assert 1 <= sess._impl.arena_count <= THREADS


@pytest.mark.skipif("cpu" not in HOST_BACKENDS, reason="edgesdk._native not built")
def test_native_pool_with_concurrent_sessions_of_different_thread_counts() -> None:
    """The native pool is process-wide and grows (a new pool, the old one retired) when a session
    wants more threads: sessions of 2, 3 and 4 threads run at once, each from two Python threads."""
    sessions = [edgesdk.Session(conv_model(), backend="cpu", threads=n) for n in (2, 3, 4)]
    inputs = distinct_inputs(sessions[0], 6 * 30, seed=2)
    serial = [[sess.run({"x": x})["y"] for x in inputs] for sess in sessions]
    wrong = [0] * 6

    def worker(t: int) -> None:
        sess = sessions[t % 3]
        for i in range(30):
            k = t * 30 + i
            wrong[t] += not np.array_equal(sess.run({"x": inputs[k]})["y"], serial[t % 3][k])

    errors = hammer(worker, threads=6)
    if errors:
        raise errors[0]
    assert sum(wrong) == 0


def check_bindings_beside_runs(sess: edgesdk.Session, runs: int = 50) -> int:
    """Half the threads run through io bindings of their own, half through Session.run; returns
    how many outputs differ from the serial ones."""
    name, out = sess.input_names[0], sess.output_names[0]
    inputs = distinct_inputs(sess, THREADS * runs, seed=1)
    serial = [sess.run({name: x})[out] for x in inputs]
    wrong = [0] * THREADS

    def worker(t: int) -> None:
        binding = sess.io_binding() if t % 2 else None
        for i in range(runs):
            k = t * runs + i
            if binding is None:
                got = sess.run({name: inputs[k]})[out]
            else:
                binding.input(name)[...] = inputs[k]
                binding.run()
                got = binding.output(out)
            wrong[t] += not np.array_equal(got, serial[k])
        if binding is not None:
            binding.close()

    errors = hammer(worker)
    if errors:
        raise errors[0]
    return sum(wrong)


@pytest.mark.parametrize("backend", HOST_BACKENDS)
def test_io_bindings_beside_runs(backend: str) -> None:
    assert check_bindings_beside_runs(edgesdk.Session(LENET, backend=backend)) == 0


def check_sessions_come_and_go(backend: str, rounds: int = 12) -> int:
    """Two long-lived sessions (two models) run on threads while the main thread creates, runs
    and closes other sessions; returns the wrong outputs seen by anyone."""
    lenet = edgesdk.Session(LENET, backend=backend)
    conv = edgesdk.Session(conv_model(), backend=backend, threads=2)
    cases = [(s, distinct_inputs(s, 20, seed=i)) for i, s in enumerate((lenet, conv))]
    expected = [[s.run({s.input_names[0]: x})[s.output_names[0]] for x in xs] for s, xs in cases]
    stop = threading.Event()
    wrong = [0] * 4

    def worker(t: int) -> None:
        if t == 3:  # the churner
            for _ in range(rounds):
                with edgesdk.Session(LENET, backend=backend) as fresh:
                    xs = cases[0][1]
                    wrong[t] += sum(not np.array_equal(fresh.run({"input": x})["logits"], e)
                                    for x, e in zip(xs[:5], expected[0]))
            stop.set()
            return
        sess, xs = cases[t % 2]
        while not stop.is_set():
            for x, e in zip(xs, expected[t % 2]):
                wrong[t] += not np.array_equal(sess.run({sess.input_names[0]: x})[sess.output_names[0]], e)

    errors = hammer(worker, threads=4)
    lenet.close()
    conv.close()
    if errors:
        raise errors[0]
    return sum(wrong)


@pytest.mark.parametrize("backend", HOST_BACKENDS)
def test_sessions_created_and_closed_while_others_run(backend: str) -> None:
    assert check_sessions_come_and_go(backend) == 0


def check_close_while_running(sess: edgesdk.Session) -> int:
    """Threads run until the session is closed under them: each call either returns the right
    output or raises SessionClosedError; returns the wrong outputs."""
    from edgesdk.errors import SessionClosedError
    name, out = sess.input_names[0], sess.output_names[0]
    inputs = distinct_inputs(sess, 16)
    serial = [sess.run({name: x})[out] for x in inputs]
    wrong = [0] * THREADS
    started = threading.Barrier(THREADS + 1)

    def worker(t: int) -> None:
        started.wait()
        i = 0
        while True:
            try:
                got = sess.run({name: inputs[i % 16]})[out]
            except SessionClosedError:
                return
            wrong[t] += not np.array_equal(got, serial[i % 16])
            i += 1

    workers = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for w in workers:
        w.start()
    started.wait()
    sess.close()
    for w in workers:
        w.join(timeout=60)
    assert not any(w.is_alive() for w in workers)
    return sum(wrong)


@pytest.mark.parametrize("backend", HOST_BACKENDS)
def test_close_while_runs_are_in_flight(backend: str) -> None:
    assert check_close_while_running(edgesdk.Session(conv_model(), backend=backend, threads=2)) == 0


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


OPENCL_LIFECYCLE_CHILD = """
import sys
sys.path.insert(0, {tests!r})
import edgesdk
from test_concurrency import LENET, check_bindings_beside_runs, check_close_while_running, check_sessions_come_and_go
wrong = {{
    "bindings": check_bindings_beside_runs(edgesdk.Session(LENET, backend="opencl")),
    "come_and_go": check_sessions_come_and_go("opencl", rounds=4),
    "close": check_close_while_running(edgesdk.Session(LENET, backend="opencl")),
}}
print("wrong", wrong)
sys.exit(1 if any(wrong.values()) else 0)
"""


@pytest.mark.skipif(not opencl_available(), reason="no OpenCL device")
@pytest.mark.parametrize("memory", ["zero_copy", "copy"])
def test_opencl_bindings_and_session_lifecycle_under_threads(memory: str, monkeypatch) -> None:
    monkeypatch.setenv("EDGESDK_OPENCL_MEMORY", memory)
    run_child(OPENCL_LIFECYCLE_CHILD.format(tests=str(TESTS)))


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


@pytest.mark.parametrize("backend", HOST_BACKENDS)
def test_int8_concurrent_runs_match_serial(backend: str) -> None:
    """An int8 session (QLinearConv plans with their indirection buffers, per arena) under threads."""
    from edgesdk.quant.ptq import quantize_graph
    graph = edgesdk.Session(conv_model(), backend="reference").graph
    rng = np.random.default_rng(0)
    shape = graph.tensors[graph.inputs[0]].shape
    qgraph, report = quantize_graph(graph, rng.standard_normal((8,) + shape[1:]).astype(np.float32))
    assert report.integer_ops.get("QLinearConv")
    sess = edgesdk.Session(qgraph, backend=backend, threads=2, optimize=False)
    assert check_concurrent_runs(sess, runs=50) == 0


@pytest.mark.parametrize("model", ["lenet", "conv"])
def test_reference_outputs_do_not_depend_on_the_blas_thread_count(model: str) -> None:
    """OpenBLAS's threaded sgemm sums in another order than its single-threaded path, and a
    limit set from one thread does not hold for calls from another: serial and concurrent runs
    of one reference session differed by an ulp (edgesdk/ops/blas.py). The oracle's products
    now accumulate in float64, so 1 and 2 BLAS threads give the same bits."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    sess = edgesdk.Session(LENET if model == "lenet" else conv_model(), backend="reference")
    name, out = sess.input_names[0], sess.output_names[0]
    inputs = distinct_inputs(sess, 4)
    outputs = {}
    for blas_threads in (1, 2):
        with threadpoolctl.threadpool_limits(limits=blas_threads, user_api="blas"):
            outputs[blas_threads] = [sess.run({name: x})[out] for x in inputs]
    for one, two in zip(outputs[1], outputs[2]):
        np.testing.assert_array_equal(one, two)
