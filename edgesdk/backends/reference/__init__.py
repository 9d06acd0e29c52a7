"""The numpy reference backend: runs every op on its reference kernel (``edgesdk.ops``, one
module per family), the oracle for the other backends."""
from __future__ import annotations

import contextlib
import functools
import threading
import time
from functools import partial
from typing import Any, Callable, Iterator

import numpy as np

from ...ops import evaluate, runtime_ops
from ...profile.records import MemoryReport, ProfileReport
from ...runtime.plan import ExecutionPlan, Step
from ...runtime.profiling import StepInfo, op_records, timed_runners
from ...runtime.precision import FP32_ONLY_OPS, PRECISIONS, round_constant, round_to_storage
from ..base import Backend


class ReferenceBackend(Backend):
    """Every op in numpy. Runs share only read-only state (the decoded constants), so any
    number may be in flight at once; ``threads`` limits BLAS through :class:`_SharedBlasLimit`."""

    name = "reference"
    precisions = PRECISIONS

    @classmethod
    def supported_ops(cls) -> frozenset[str]:
        return runtime_ops()

    def __init__(self, plan: ExecutionPlan, *, precision: str = "fp32", threads: int | None = None):
        super().__init__(plan, precision=precision, threads=threads)
        graph = plan.graph
        self._constants = {t.name: round_constant(t.data, precision) for t in graph.constants()}
        self.steps = tuple(StepInfo.of_node(step.node, graph, "reference", weight_bytes=sum(
            self._constants[i].nbytes for i in step.node.inputs if i in self._constants)) for step in plan.steps)

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Evaluate the plan node by node in numpy; thread-safe (each run has its own tensors)."""
        env = self._environment(feeds)
        return self._execute(env, self._runners(env))

    def profile(self, feeds: dict[str, np.ndarray]) -> ProfileReport:
        """Run once, timing each node on the host (there is no device: ``device_ms`` is 0)."""
        start = time.perf_counter()
        env = self._environment(feeds)
        runners, seconds, _ = timed_runners(self._runners(env))
        outputs = self._execute(env, runners)
        wall_ms = (time.perf_counter() - start) * 1e3
        return ProfileReport(f"numpy {np.__version__} on the host CPU", self.precision, "numpy", wall_ms,
                             op_records(self.steps, seconds), self._memory_estimate, outputs)

    def _environment(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One run's tensors by name: the constants, then the feeds as stored, then each output."""
        env = dict(self._constants)
        env.update((k, round_to_storage(v, self.precision)) for k, v in feeds.items())
        return env

    def _runners(self, env: dict[str, np.ndarray]) -> list[Callable[[], None]]:
        return [partial(self._run_step, step, env) for step in self.plan.steps]

    def _run_step(self, step: Step, env: dict[str, np.ndarray]) -> None:
        node = step.node
        outputs = evaluate(node, [env[name] if name else None for name in node.inputs])
        keep_fp32 = node.op in FP32_ONLY_OPS
        for name, value in zip(node.outputs, outputs):
            if name:
                env[name] = value if keep_fp32 else round_to_storage(value, self.precision)
        for name in step.release:
            del env[name]

    def _execute(self, env: dict[str, np.ndarray], runners: list[Callable[[], None]]) -> dict[str, np.ndarray]:
        """The run loop over one run's step runners (timed ones when profiling)."""
        with self._thread_limit():
            for runner in runners:
                runner()
        return {name: np.asarray(env[name]) for name in self.plan.graph.outputs}

    @functools.cached_property
    def _memory_estimate(self) -> MemoryReport:
        # numpy allocates per op, so there is no arena: the plan's peak of live activations
        # (graph inputs and outputs included, hence io_bytes 0) stands in for it.
        graph = self.plan.graph
        activations = set(graph.inputs) | {o for step in self.plan.steps for o in step.node.outputs if o}
        return MemoryReport(arena_bytes=self.plan.peak_activation_bytes,
                            unplanned_activation_bytes=sum(graph.tensors[n].nbytes for n in activations),
                            io_bytes=0, weight_bytes=sum(c.nbytes for c in self._constants.values()),
                            zero_copy=False, source="estimate: peak live activations of the plan (numpy "
                            "temporaries inside ops not counted) + decoded weights")

    def _thread_limit(self) -> contextlib.AbstractContextManager:
        if self.threads is None:
            return contextlib.nullcontext()
        return _BLAS_LIMIT.limited(self.threads)


class _SharedBlasLimit:
    """The BLAS thread limit is process-wide state. threadpoolctl's ``limit()`` context saves
    the current limit and restores it on exit, so two runs that overlap in time restore in the
    wrong order and leave the process limited for good. Here the first run in flight sets the
    limit, later ones count themselves in, and the last one out restores the original. While
    runs of sessions with different ``threads`` overlap, the first one's limit holds (a matter
    of speed only: the reference products accumulate in float64, so results do not depend on the
    BLAS thread count; see ``edgesdk/ops/blas.py``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = 0
        self._restore: Any = None  # threadpoolctl's limiter of the first run in flight

    @contextlib.contextmanager
    def limited(self, threads: int) -> Iterator[None]:
        with self._lock:
            if self._active == 0:
                self._restore = _blas_controller().limit(limits=threads)
            self._active += 1
        try:
            yield
        finally:
            with self._lock:
                self._active -= 1
                if self._active == 0:
                    self._restore.restore_original_limits()
                    self._restore = None


_BLAS_LIMIT = _SharedBlasLimit()


@functools.cache
def _blas_controller() -> Any:
    # Scanning the loaded BLAS libraries is slow; do it once per process, not per run.
    from threadpoolctl import ThreadpoolController  # a declared dependency (pyproject.toml)
    return ThreadpoolController()
