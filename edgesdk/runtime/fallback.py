"""The one fallback mechanism: a node that a backend has no kernel for (or whose variant its
kernel refuses) runs on the op's reference kernel (``edgesdk.ops``), inside that backend's run.

A backend decides *where* the inputs come from and the outputs go (arena views on the cpu,
device buffers read and written around the call on opencl); everything else is here: which
inputs are constants and how they are stored at the session's precision, the call, the dtype of
each output, and the one-line reason the profile and ``fallback_reasons`` show. Fallbacks are
logged once per session at WARNING, so a user sees that a model is not running natively.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..graph import Graph, Node
from ..ops import evaluate
from .precision import FP32_ONLY_OPS, round_constant, round_to_storage

FALLBACK_PLACEMENT = "reference"
log = logging.getLogger("edgesdk.fallback")


class NotLowerable(Exception):
    """Raised by a backend's lowering for a variant its kernel does not cover; the message is
    the reason recorded for the fallback."""


@dataclass(frozen=True)
class ReferenceStep:
    """One node on its reference kernel. ``runtime_inputs`` are the names the backend feeds, in
    order; constants (already rounded to the session's storage precision) fill the rest."""
    node: Node
    reason: str
    precision: str
    runtime_inputs: tuple[str, ...]
    _constants: tuple[np.ndarray | None, ...]  # per node input: its value if constant

    @classmethod
    def prepare(cls, node: Node, graph: Graph, precision: str, reason: str) -> "ReferenceStep":
        constants, runtime = [], []
        for name in node.inputs:
            value = graph.const(name) if name else None
            constants.append(None if value is None else round_constant(np.asarray(value), precision))
            if name and value is None:
                runtime.append(name)
        return cls(node, reason, precision, tuple(runtime), tuple(constants))

    def __call__(self, runtime_values: Sequence[np.ndarray]) -> list[np.ndarray | None]:
        """The node's outputs (None for an unused optional output) for the run-time inputs given
        in :attr:`runtime_inputs` order; float outputs are rounded to the storage precision as
        the reference backend's own run does."""
        values = iter(runtime_values)
        inputs = [c if c is not None or not name else next(values)
                  for name, c in zip(self.node.inputs, self._constants)]
        outputs = evaluate(self.node, inputs)
        keep = self.node.op in FP32_ONLY_OPS
        return [None if not name else (np.asarray(value) if keep else round_to_storage(np.asarray(value),
                                                                                       self.precision))
                for name, value in zip(self.node.outputs, outputs)]


def warn_fallbacks(backend: str, fallbacks: Sequence[tuple[str, str, str]]) -> None:
    """Log the (node, op, reason) triples of one session's fallbacks, one line each."""
    for node, op, reason in fallbacks:
        log.warning("%s backend: node %r (%s) runs on the reference kernel: %s", backend, node, op, reason)
