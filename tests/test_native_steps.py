"""Prepared kernel calls (edgesdk._native.kernels.steps, cpu_native/src/bindings_steps.h) and the
native Program that runs a cpu session's steps in one call: a Step computes what the immediate
call computes, checks its operands when it is made, keeps them alive, and a Program runs Steps and
Python callables in order."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import edgesdk
from edgesdk.models import DEFAULT_MODEL

k = pytest.importorskip("edgesdk._native").kernels

RNG = np.random.default_rng(3)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def test_step_computes_what_the_immediate_call_computes() -> None:
    a, b = rand(4, 16), rand(16)
    now, later = np.empty_like(a), np.full_like(a, np.nan)
    k.binary("add", a, b, now, False, "relu")
    step = k.steps.binary("add", a, b, later, False, "relu")
    assert isinstance(step, k.Step)
    assert np.isnan(later).all()  # making a Step runs nothing
    step()
    np.testing.assert_array_equal(now, later)


@pytest.mark.parametrize("case", ["gemm", "max_pool", "conv_plan", "transpose_2d", "activation", "global_avg_pool"])
def test_each_converted_binding_matches_its_step(case: str) -> None:
    x = rand(1, 6, 6, 8)
    if case == "gemm":
        w = k.pack_gemm(rand(8, 5), None, "kn", False)
        a = rand(3, 8)
        run = lambda out: k.gemm(a, w, out, "none", None, None, 1)  # noqa: E731
        prepare = lambda out: k.steps.gemm(a, w, out, "none", None, None, 1)  # noqa: E731
        shape = (3, 5)
    elif case == "max_pool":
        run = lambda out: k.max_pool(x, out, (2, 2), (2, 2))  # noqa: E731
        prepare = lambda out: k.steps.max_pool(x, out, (2, 2), (2, 2))  # noqa: E731
        shape = (1, 3, 3, 8)
    elif case == "conv_plan":
        plan = k.ConvPlan(k.pack_gemm(rand(4, 9 * 8), None, "nk", False), [1, 6, 6, 8], (3, 3))
        run = lambda out: plan.run(x, out, "relu")  # noqa: E731
        prepare = lambda out: plan.step(x, out, "relu")  # noqa: E731
        shape = (1, 4, 4, 4)
    elif case == "transpose_2d":
        src = rand(2, 5, 7)
        run = lambda out: k.transpose_2d(src, out, 1)  # noqa: E731
        prepare = lambda out: k.steps.transpose_2d(src, out, 1)  # noqa: E731
        shape = (2, 7, 5)
    elif case == "activation":
        run = lambda out: (np.copyto(out, x), k.activation(out, "hardswish"))  # noqa: E731
        prepare = lambda out: k.steps.chain([k.steps.copy_bytes(x, out), k.steps.activation(out, "hardswish")])  # noqa: E731
        shape = x.shape
    else:
        run = lambda out: k.global_avg_pool(x, out)  # noqa: E731
        prepare = lambda out: k.steps.global_avg_pool(x, out)  # noqa: E731
        shape = (1, 8)
    now, later = np.zeros(shape, np.float32), np.zeros(shape, np.float32)
    run(now)
    prepare(later)()
    np.testing.assert_array_equal(now, later)


def test_operands_are_checked_when_the_step_is_made() -> None:
    with pytest.raises(ValueError, match="out: expected shape"):
        k.steps.binary("add", rand(4, 16), rand(16), np.empty((4, 15), np.float32))
    with pytest.raises(ValueError, match="must be writable"):
        out = np.empty((1, 3, 3, 8), np.float32)
        out.flags.writeable = False
        k.steps.max_pool(rand(1, 6, 6, 8), out, (2, 2), (2, 2))
    with pytest.raises(ValueError, match="copy_bytes: src has 64 bytes, dst 60"):
        k.steps.copy_bytes(rand(16), np.empty(15, np.float32))


def test_a_step_keeps_its_operands_alive() -> None:
    """The Step holds references to the arrays it took pointers of: dropping the caller's
    references must not free the memory it reads and writes."""
    a, b = rand(64, 32), rand(32)
    expected = a + b
    out = np.empty_like(a)
    step = k.steps.chain([k.steps.binary("add", a, b, out, False)])  # a chain holds its parts
    del a, b
    gc.collect()
    step()
    np.testing.assert_array_equal(out, expected)


def test_program_runs_steps_and_python_callables_in_order() -> None:
    x = rand(8)
    y, z = np.empty_like(x), np.empty_like(x)
    seen = []
    program = k.Program([
        k.steps.copy_bytes(x, y),                           # y = x
        lambda: seen.append(y.copy()),                       # Python in between sees the Step's result
        k.steps.activation(y, "relu"),                       # y = relu(x)
        k.steps.binary("mul", y, np.float32([2.0]), z, False),  # z = 2 relu(x)
        lambda: seen.append(z.copy()),
    ])
    assert len(program) == 5 and program.native_steps == 3
    program.run()
    np.testing.assert_array_equal(seen[0], x)
    np.testing.assert_array_equal(seen[1], 2 * np.maximum(x, 0))


def test_program_propagates_errors_of_python_runners() -> None:
    def fail() -> None:
        raise RuntimeError("from a runner")
    with pytest.raises(RuntimeError, match="from a runner"):
        k.Program([fail]).run()
    with pytest.raises(TypeError, match="runners must be Steps or callables"):
        k.Program([3])
    with pytest.raises(ValueError, match="None is not a Step"):
        k.steps.chain([None])


def test_every_native_step_of_the_default_model_runs_in_the_program() -> None:
    """The cpu backend's binders return Steps for its native kernels, so that a run crosses into
    C++ once: every step the default model places `native` is a Step in the arena's Program."""
    sess = edgesdk.Session(DEFAULT_MODEL, backend="cpu")
    impl = sess._impl
    arena = impl._arenas.take()
    try:
        ran = [s for s in impl.steps if s.placement != "view"]
        assert len(ran) == len(arena.runners) == len(arena.program)
        native = [r for s, r in zip(ran, arena.runners) if s.placement == "native"]
        assert native and all(isinstance(r, k.Step) for r in native)
        assert arena.program.native_steps == len(native)
    finally:
        impl._arenas.give_back(arena)
    x = RNG.standard_normal(sess.input_shapes[sess.input_names[0]]).astype(np.float32)
    ref = edgesdk.Session(DEFAULT_MODEL, backend="reference").run({sess.input_names[0]: x})
    got = sess.run({sess.input_names[0]: x})
    for name in ref:
        np.testing.assert_allclose(got[name], ref[name], rtol=1e-4, atol=1e-5)
