"""The numpy reference backend: every op, straightforward code, the oracle for other backends."""
from __future__ import annotations

import contextlib
import functools

import numpy as np

from ...runtime.plan import ExecutionPlan
from ...runtime.precision import FP32_ONLY_OPS, PRECISIONS, round_to_storage
from ..base import Backend
from . import constant_ops, conv, elementwise, linear, normalization, pool, tensor  # noqa: F401 (register)
from .constant_ops import CONSTANT_ONLY_OPS
from .kernels import KERNELS, evaluate


class ReferenceBackend(Backend):
    name = "reference"
    precisions = PRECISIONS

    @classmethod
    def supported_ops(cls) -> frozenset[str]:
        return frozenset(KERNELS) - CONSTANT_ONLY_OPS

    def __init__(self, plan: ExecutionPlan, *, precision: str = "fp32", threads: int | None = None):
        super().__init__(plan, precision=precision, threads=threads)
        graph = plan.graph
        self._constants = {t.name: round_to_storage(t.data, precision) for t in graph.constants()}

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        env = dict(self._constants)
        env.update((k, round_to_storage(v, self.precision)) for k, v in feeds.items())
        with self._thread_limit():
            for step in self.plan.steps:
                node = step.node
                outputs = evaluate(node, [env[name] if name else None for name in node.inputs])
                keep_fp32 = node.op in FP32_ONLY_OPS
                for name, value in zip(node.outputs, outputs):
                    if name:
                        env[name] = value if keep_fp32 else round_to_storage(value, self.precision)
                for name in step.release:
                    del env[name]
        return {name: np.asarray(env[name]) for name in self.plan.graph.outputs}

    def _thread_limit(self):
        if self.threads is None:
            return contextlib.nullcontext()
        return _blas_controller().limit(limits=self.threads)


@functools.cache
def _blas_controller():
    # Scanning the loaded BLAS libraries is slow; do it once per process, not per run.
    from threadpoolctl import ThreadpoolController  # comes with scikit-learn
    return ThreadpoolController()
