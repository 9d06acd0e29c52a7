"""The memory-budgeted per-stage batch planner (issue 15, seed 004 section 2.8): the DP against
brute force, the cut rule, budgeted sessions against ordinary ones, the measured memory, the
errors and the CLI."""
from __future__ import annotations

import itertools
import os
import threading
import tracemalloc

import numpy as np
import pytest

import edgesdk
from conftest import assert_close
from edgesdk.errors import BackendUnavailableError, InputError, MemoryBudgetError
from edgesdk.graph import Graph
from edgesdk.runtime.batch_plan import (StageCost, divisors, find_stages, rebatch, schedule_cost, solve)
from edgesdk.runtime.sizes import format_bytes

pytest.importorskip("edgesdk._native")
BATCH = 4
SHAPE = (BATCH, 3, 32, 32)


@pytest.fixture(scope="module", autouse=True)
def measurement_cache(tmp_path_factory):
    """Measurements go to a cache of the module's own (shared by its tests: measured once)."""
    old = os.environ.get("EDGESDK_CACHE_DIR")
    os.environ["EDGESDK_CACHE_DIR"] = str(tmp_path_factory.mktemp("planner-cache"))
    yield
    if old is None:
        os.environ.pop("EDGESDK_CACHE_DIR", None)
    else:
        os.environ["EDGESDK_CACHE_DIR"] = old


@pytest.fixture(scope="module")
def mobilenet():
    from zoo import export_onnx
    return str(export_onnx("mobilenet_v2", input_shape=SHAPE))


@pytest.fixture(scope="module")
def unconstrained(mobilenet):
    """(ordinary session, input, its outputs, the unconstrained bytes)."""
    sess = edgesdk.Session(mobilenet, backend="cpu")
    x = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    plan = edgesdk.Session(mobilenet, backend="cpu", memory_budget=10**12).batch_plan
    return sess, x, sess.run({"input": x})["output"], plan.unconstrained_bytes


@pytest.fixture(scope="module")
def minimum(mobilenet):
    """The least memory a budgeted session of the model takes (from the error that names it)."""
    with pytest.raises(MemoryBudgetError) as info:
        edgesdk.Session(mobilenet, backend="cpu", memory_budget=1 << 20)
    return info.value.minimum


@pytest.fixture(scope="module")
def budgeted(mobilenet, unconstrained, minimum):
    """Halfway between the minimum and the unconstrained bytes: at 32x32 the weights (held as
    the graph's constants and packed) are most of the memory, so half the unconstrained peak
    would be below the minimum."""
    budget = (minimum + unconstrained[3]) // 2
    return edgesdk.Session(mobilenet, backend="cpu", memory_budget=budget), budget


# -- the DP ---------------------------------------------------------------------------------------
def _random_table(rng, stages: int, batch: int) -> list[dict[int, StageCost]]:
    table = []
    for k in range(stages):
        row = {}
        for b in divisors(batch):
            if rng.random() < 0.1:
                continue  # not measured (too big alone)
            per_image = int(rng.integers(1, 50)) * 1000
            work = per_image * b + int(rng.integers(0, 5000))
            row[b] = StageCost(ms=float(rng.uniform(0.2, 2.0)) + b * float(rng.uniform(0.1, 1.0)), work=work,
                               work_direct=None if rng.random() < 0.3 else work - per_image * b // 2,
                               input=0 if k == 0 else b * int(rng.integers(1, 30)) * 1000,
                               fixed=int(rng.integers(0, 20000)) + 100 * b, shared=int(rng.integers(0, 3)) * 1000 * b)
        table.append(row)
    return table


def _brute_force(table, batch, budget, base):
    best = smallest = None
    choices = divisors(batch)
    for chain in itertools.product(choices, repeat=len(table)):
        if any(b not in table[k] for k, b in enumerate(chain)):
            continue
        if any(chain[k + 1] % chain[k] for k in range(len(chain) - 1)):  # non-decreasing, each divides the next
            continue
        s = schedule_cost(table, batch, chain, base)
        if smallest is None or (s.peak, s.ms) < (smallest.peak, smallest.ms):
            smallest = s
        if s.peak <= budget and (best is None or (s.ms, s.peak) < (best.ms, best.peak)):
            best = s
    return best, smallest


@pytest.mark.parametrize("seed", range(40))
def test_dp_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    batch = [4, 6, 8, 12][seed % 4]
    table = _random_table(rng, 1 + seed % 5, batch)
    base = int(rng.integers(0, 10000))
    _, smallest = _brute_force(table, batch, 10**12, base)
    if smallest is None:
        assert solve(table, batch, None, base) == (None, None)
        return
    budget = int(smallest.peak * rng.uniform(0.9, 2.5))
    want, want_smallest = _brute_force(table, batch, budget, base)
    got, _ = solve(table, batch, budget, base)
    assert solve(table, batch, None, base)[1].peak == want_smallest.peak
    if want is None:
        assert got is None
        return
    assert got is not None and got.peak <= budget
    assert got.ms == pytest.approx(want.ms)
    assert got.peak == schedule_cost(table, batch, got.batches, base).peak  # the DP's bytes are the model's
    assert all(got.batches[k + 1] % got.batches[k] == 0 for k in range(len(got.batches) - 1))


def test_dp_accumulates_input_buffers():
    """A later stage at a bigger sub-batch reserves its input buffer while the earlier stages run
    (the paper's A): with room for it, stage 1 runs at 4; without, everything at 1."""
    table = [{1: StageCost(1.0, 100, 50, 0, 0), 4: StageCost(4.0, 400, 200, 0, 0)},
             {1: StageCost(10.0, 100, None, 10, 0), 4: StageCost(12.0, 400, None, 1000, 0)}]
    fast, _ = solve(table, 4, 10**6)
    assert fast.batches == (4, 4) or fast.batches == (1, 4)
    assert fast.batches == (1, 4)  # 4 calls of stage 0 at 1 (4 ms) + one of stage 1 at 4 (12 ms)
    # peak: stage 0's arena (100) over the 1000-byte buffer it fills, or stage 1 (400 + 1000)
    assert fast.peak == 1400
    slow, smallest = solve(table, 4, 1399)
    assert slow.batches == (1, 1) and smallest.batches == (1, 1)
    # stage 0 writes straight into stage 1's buffer (same sub-batch): its arena is the 50 bytes
    assert slow.peak == max(50 + 10, 100 + 10) and slow.direct == (True, False)


# -- stages ---------------------------------------------------------------------------------------
def _residual_graph() -> Graph:
    g = Graph("residual")
    g.add_input("x", (2, 4, 8, 8))
    rng = np.random.default_rng(0)
    for name in "abc":
        g.add_constant(f"w{name}", rng.standard_normal((4, 4, 3, 3)).astype(np.float32))
    conv = dict(kernel_shape=(3, 3), strides=(1, 1), dilations=(1, 1), pads=(1, 1, 1, 1), group=1)
    g.add_node("Conv", ["x", "wa"], ["a"], name="conv_a", **conv)
    g.add_node("Conv", ["a", "wb"], ["b"], name="conv_b", **conv)
    g.add_node("Add", ["a", "b"], ["s"], name="add")
    g.add_node("Conv", ["s", "wc"], ["y"], name="conv_c", **conv)
    g.outputs.append("y")
    return g


def test_cuts_only_where_one_activation_is_live():
    sess = edgesdk.Session(_residual_graph(), backend="reference", optimize=False)
    stages = find_stages(sess.graph, max_stages=10)
    # after conv_a only `a` is live; after conv_b both `a` (the shortcut) and `b`: no cut there
    assert [(s.start, s.stop) for s in stages] == [(0, 1), (1, 3), (3, 4)]
    assert [s.inputs for s in stages] == [("x",), ("a",), ("s",)]
    assert [s.outputs for s in stages] == [("a",), ("s",), ("y",)]
    assert len(find_stages(sess.graph, max_stages=2)) == 2


def test_rebatch_follows_the_batch_axis(mobilenet):
    graph = edgesdk.Session(mobilenet, backend="reference").graph
    two = rebatch(graph, 2)
    assert two.tensors["input"].shape == (2, 3, 32, 32) and two.tensors["output"].shape == (2, 1000)


# -- budgeted sessions ----------------------------------------------------------------------------
def test_budgeted_session_matches_the_unconstrained_one(budgeted, unconstrained):
    sess, budget = budgeted
    ordinary, x, want, full = unconstrained
    plan = sess.batch_plan
    assert plan.mode == "staged" and len(plan.stages) > 1 and plan.peak_bytes <= budget < full
    assert [s.sub_batch for s in plan.stages] == sorted(s.sub_batch for s in plan.stages)
    assert all(s.ms > 0 and BATCH % s.sub_batch == 0 for s in plan.stages)
    got = sess.run({"input": x})["output"]
    assert_close(got, want, what="budgeted vs unconstrained")
    logits, = sess.run(None, {"input": x})  # ONNX Runtime's call style too
    np.testing.assert_array_equal(logits, got)
    assert sess.get_inputs()[0].shape == list(SHAPE)
    # NaN and Inf go through as in the ordinary session (the first image only)
    bad = x.copy()
    bad[0, 0, 0, 0], bad[0, 1, 5, 5] = np.nan, np.inf
    np.testing.assert_array_equal(np.isnan(sess.run({"input": bad})["output"]),
                                  np.isnan(ordinary.run({"input": bad})["output"]))


def test_the_memory_held_never_exceeds_the_budget(budgeted, unconstrained):
    """The run buffer is what the plan says; a run allocates nothing but its outputs; the
    whole (constants, packed weights and native state as estimated, run buffer) is within budget."""
    sess, budget = budgeted
    x = unconstrained[1]
    impl = sess._impl
    plan = sess.batch_plan
    assert impl.run_buffer_bytes == plan.run_buffer_bytes
    held = [c.memory.nbytes for c in impl._contexts._idle]
    assert held == [plan.run_buffer_bytes]
    fixed = sum(s.fixed_bytes for s in plan.stages)
    assert plan.base_bytes + fixed + plan.run_buffer_bytes <= plan.peak_bytes <= budget
    sess.run({"input": x})
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        for _ in range(2):
            out = sess.run({"input": x})
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert peak <= out["output"].nbytes * 2 + 64 * 1024, f"a run allocated {peak} bytes"


def test_what_a_budgeted_session_keeps_is_within_the_budget(mobilenet, budgeted):
    """tracemalloc's count of the numpy buffers a second budgeted session keeps (made from the
    cached measurements): the run buffer and numpy-held weights, within what the plan counts for
    them; with the graph's constants and the native bytes it estimates, within the budget.
    (Packing makes transient copies, as an ordinary session's does: the budget is what a session
    holds while it runs.)"""
    _, budget = budgeted
    graph = edgesdk.Session(mobilenet, backend="reference").graph
    numpy_data = [tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)]  # array buffers, not Python objects
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot().filter_traces(numpy_data)
        sess = edgesdk.Session(graph, backend="cpu", memory_budget=budget)
        after = tracemalloc.take_snapshot().filter_traces(numpy_data)
    finally:
        tracemalloc.stop()
    kept = sum(s.size for s in after.statistics("filename")) - sum(s.size for s in before.statistics("filename"))
    plan = sess.batch_plan
    fixed = sum(s.fixed_bytes for s in plan.stages)  # packed weights and per-run state, numpy-held ones included
    assert plan.run_buffer_bytes <= kept <= plan.run_buffer_bytes + fixed, (kept, plan.run_buffer_bytes, fixed)
    constants = sum(t.nbytes for t in graph.constants())
    assert constants + fixed + plan.run_buffer_bytes <= plan.peak_bytes <= budget
    sess.close()


def test_concurrent_runs_of_one_budgeted_session(budgeted, unconstrained):
    sess, _ = budgeted
    ordinary = unconstrained[0]
    inputs = [np.random.default_rng(10 + i).standard_normal(SHAPE).astype(np.float32) for i in range(4)]
    wants = [ordinary.run({"input": x})["output"] for x in inputs]
    errors = []

    def work(i: int) -> None:
        try:
            for _ in range(3):
                assert_close(sess.run({"input": inputs[i]})["output"], wants[i], what=f"thread {i}")
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert sess._impl.arena_count >= 1


def test_a_budget_that_holds_the_batch_runs_the_ordinary_path(mobilenet, unconstrained):
    sess = edgesdk.Session(mobilenet, backend="cpu", memory_budget=unconstrained[3])
    assert sess.batch_plan.mode == "ordinary" and type(sess._impl).__name__ == "CPUBackend"
    assert edgesdk.Session(mobilenet, backend="cpu").batch_plan is None


# -- errors ---------------------------------------------------------------------------------------
def test_a_budget_below_the_minimum_names_it(mobilenet):
    with pytest.raises(MemoryBudgetError) as info:
        edgesdk.Session(mobilenet, backend="cpu", memory_budget=1 << 20)
    message = str(info.value)
    assert "\n" not in message and "is below the minimum" in message and "sub-batch 1" in message
    assert info.value.minimum > 1 << 20 and format_bytes(info.value.minimum) in message
    assert isinstance(info.value, InputError)
    # the minimum itself is accepted
    sess = edgesdk.Session(mobilenet, backend="cpu", memory_budget=info.value.minimum)
    assert {s.sub_batch for s in sess.batch_plan.stages} == {1}


@pytest.mark.parametrize("value", [True, 1.5, "64M", 0, -5, [1]])
def test_bad_budget_values(mobilenet, value):
    with pytest.raises(MemoryBudgetError, match="memory_budget must be"):
        edgesdk.Session(mobilenet, memory_budget=value)


def test_budget_needs_the_cpu_backend(mobilenet):
    with pytest.raises(BackendUnavailableError, match="memory_budget"):
        edgesdk.Session(mobilenet, backend="reference", memory_budget=1 << 30)


# -- CLI ------------------------------------------------------------------------------------------
def test_cli_inspect_prints_the_plan(mobilenet, budgeted, capsys):
    from edgesdk.cli import main
    budget = budgeted[1]
    assert main(["inspect", mobilenet, "--memory-budget", str(budget)]) == 0
    out = capsys.readouterr().out
    assert "staged" in out and "sub-batch" in out and "predicted:" in out and "unconstrained batch 4" in out
    assert main(["inspect", mobilenet, "--batch", "2", "--memory-budget", "1G", "--json"]) == 0
    import json
    plan = json.loads(capsys.readouterr().out)["batch_plan"]
    assert plan["batch"] == 2 and plan["mode"] == "ordinary"


@pytest.mark.parametrize("size", ["1M", "12X", "0"])
def test_cli_inspect_bad_budget_is_one_line(mobilenet, size, capsys):
    from edgesdk.cli import main
    assert main(["inspect", mobilenet, "--memory-budget", size]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("edgesdk: error:")
    assert ("minimum" in err) if size == "1M" else ("--memory-budget" in err)
