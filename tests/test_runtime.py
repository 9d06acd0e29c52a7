"""The pieces of ``edgesdk/runtime`` every backend shares: the arena planner, the fallback to
reference kernels and the profiling loop."""
from __future__ import annotations

import math

import numpy as np
import pytest

from edgesdk.graph import Node
from edgesdk.loader import load_model
from edgesdk.runtime.arena import (Block, Pool, activation_lifetimes, aligned_host_buffer, plan_arena,
                                   plan_shared_objects)
from edgesdk.runtime.fallback import ReferenceStep
from edgesdk.runtime.plan import make_plan
from edgesdk.runtime.profiling import StepInfo, op_records, timed_runners
from onnx_builders import single_node_model


def random_blocks(rng: np.random.Generator, smallest: int) -> list[Block]:
    """1-24 blocks of smallest..4999 bytes, alive over random spans of steps -1..25 (a tenth to the end)."""
    blocks = []
    for i in range(rng.integers(1, 25)):
        first = int(rng.integers(-1, 20))
        last = math.inf if rng.random() < 0.1 else first + int(rng.integers(0, 6))
        blocks.append(Block(int(rng.integers(smallest, 5000)), first, last, f"b{i}"))
    return blocks


@pytest.mark.parametrize("alignment", [64, 128])
def test_plan_arena_never_overlaps_live_blocks_and_stays_near_the_peak(alignment: int) -> None:
    rng = np.random.default_rng(0)
    for _ in range(50):
        blocks = random_blocks(rng, smallest=0)
        size = plan_arena(blocks, alignment)
        for a in blocks:
            assert a.offset % alignment == 0 and a.offset + a.nbytes <= size
            for b in blocks:
                if a is not b and a.overlaps_in_time(b):
                    assert a.offset + max(a.nbytes, 1) <= b.offset or b.offset + max(b.nbytes, 1) <= a.offset
        aligned = [max(alignment, -(-b.nbytes // alignment) * alignment) for b in blocks]
        peak = max(sum(n for n, b in zip(aligned, blocks) if b.first <= t <= b.last) for t in range(-1, 30))
        assert peak <= size <= sum(aligned)


def test_shared_objects_never_hold_two_live_blocks_and_fit_every_tenant() -> None:
    rng = np.random.default_rng(1)
    for _ in range(50):
        blocks = random_blocks(rng, smallest=1)
        sizes = plan_shared_objects(blocks)
        for a in blocks:
            assert 0 <= a.slot < len(sizes) and a.nbytes <= sizes[a.slot]
            for b in blocks:
                if a is not b and a.overlaps_in_time(b):
                    assert a.slot != b.slot, (a, b)
        assert all(any(b.slot == i for b in blocks) for i in range(len(sizes)))
        peak = max(sum(b.nbytes for b in blocks if b.first <= t <= b.last) for t in range(-1, 30))
        assert peak <= sum(sizes) <= sum(b.nbytes for b in blocks)
    # a chain (each block alive with its neighbours only) needs two objects, not one per block
    chain = [Block(1000 - i, i, i + 1, f"c{i}") for i in range(10)]
    assert plan_shared_objects(chain) == [1000, 999]


def test_blocks_compare_by_identity() -> None:
    a, b = Block(64, 0, 1), Block(64, 0, 1)
    assert a != b and len({id(a), id(b)}) == 2 and a == a


def test_activation_lifetimes_follow_the_plan() -> None:
    graph = load_model(single_node_model("Relu", (1, 4)))
    lifetimes = activation_lifetimes(make_plan(graph))
    assert lifetimes[graph.inputs[0]] == (-1, 0)
    assert lifetimes[graph.outputs[0]] == (0, 0)


def test_aligned_host_buffer() -> None:
    for n in (1, 1000, 4099):
        buf = aligned_host_buffer(n, 64)
        assert buf.nbytes == n and buf.ctypes.data % 64 == 0


def test_pool_grows_to_concurrent_use_and_refuses_after_close() -> None:
    made = []
    pool = Pool(lambda: made.append(object()) or made[-1], lambda: RuntimeError("closed"))
    pool.prime()
    a = pool.take()
    b = pool.take()
    assert a is not b and pool.created == 2
    pool.give_back(a)
    assert pool.take() is a
    pool.close()
    with pytest.raises(RuntimeError, match="closed"):
        pool.take()


def test_reference_step_rounds_constants_and_outputs_to_storage() -> None:
    from edgesdk.graph import Graph
    graph = Graph("g")
    graph.add_input("x", (3,))
    graph.add_constant("w", np.array([1.0001, 2.0, 3.0], np.float32))
    graph.add_tensor("y", (3,), np.float32)
    node = Node("Add", "add", ["x", "w"], ["y"], {})
    step = ReferenceStep.prepare(node, graph, "fp16", "test")
    assert step.runtime_inputs == ("x",)
    (y,) = step([np.array([0.0, 1e-4, 0.5], np.float32)])
    w16 = np.array([1.0001, 2.0, 3.0], np.float32).astype(np.float16).astype(np.float32)
    assert w16[0] != np.float32(1.0001)
    expected = w16 + np.array([0.0, 1e-4, 0.5], np.float32)
    np.testing.assert_array_equal(y, expected.astype(np.float16).astype(np.float32))


def test_timed_runners_record_time_results_and_settle_first() -> None:
    order = []
    runners = [lambda: order.append("a") or 1, lambda: order.append("b") or 2]
    timed, seconds, results = timed_runners(runners, settle=lambda i: order.append(f"settle{i}"))
    for run in timed:
        run()
    assert order == ["settle0", "a", "settle1", "b"] and results == [1, 2] and all(s >= 0 for s in seconds)
    steps = [StepInfo("n0", "Relu", "native"), StepInfo("n1", "Reshape", "view", runs=False),
             StepInfo("", "nchw->nhwc", "numpy", note="layout of x")]
    records = op_records(steps, [0.001, 0.002], [0.5, 0.25])
    assert [(r.node, r.host_ms, r.device_ms) for r in records] == [("n0", 1.0, 0.5), ("n1", 0.0, 0.0),
                                                                   ("layout of x", 2.0, 0.25)]


def test_bytes_moved_counts_activations_and_stored_weights_and_views_move_nothing() -> None:
    from edgesdk.runtime.cost import layer_costs, node_bytes_moved
    graph = load_model(single_node_model("Relu", (2, 8)))
    (relu,) = graph.nodes
    assert node_bytes_moved(relu, graph) == 2 * 2 * 8 * 4
    assert layer_costs(graph)[0].bytes_moved == 2 * 2 * 8 * 4
    from edgesdk.graph import Graph
    g = Graph("g")
    g.add_input("x", (4, 6))
    g.add_constant("s", np.array([6, 4], np.int64))
    g.add_tensor("y", (6, 4), np.float32)
    node = g.add_node("Reshape", ["x"], ["y"], shape=(6, 4))
    assert node_bytes_moved(node, g) == 0
