"""Top-1 accuracy and latency of a Session on a labelled dataset."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .datasets import Dataset
from .errors import DatasetError
from .profile.latency import LatencyStats
from .runtime.session import Session


@dataclass(frozen=True)
class EvalResult:
    dataset: str
    samples: int
    correct: int
    batch: int
    latency: LatencyStats  # per run of one batch
    predictions: np.ndarray | None = field(default=None, compare=False, repr=False)  # top-1 per sample (evaluate(..., keep_predictions=True))

    @property
    def accuracy(self) -> float:
        return self.correct / self.samples

    def to_dict(self) -> dict:
        return {"dataset": self.dataset, "samples": self.samples, "correct": self.correct,
                "accuracy": self.accuracy, "batch": self.batch, "latency": self.latency.to_dict()}


def predictions(session: Session, x: np.ndarray) -> np.ndarray:
    """The top-1 class of every sample of ``x`` (what :func:`evaluate` compares with labels)."""
    return evaluate(session, Dataset("inputs", x, np.zeros(len(x), np.int64)), keep_predictions=True).predictions


def evaluate(session: Session, data: Dataset, limit: int | None = None,
             progress: Callable[[int, int], None] | None = None, keep_predictions: bool = False) -> EvalResult:
    """Classify every sample (batches of the model's batch size) and time each run;
    ``keep_predictions`` keeps the top-1 classes in ``EvalResult.predictions``."""
    if len(session.input_names) != 1 or len(session.output_names) < 1:
        raise DatasetError("eval needs a model with one input and a class-score output")
    name = session.input_names[0]
    shape = session.input_shapes[name]
    x, y = data.x[:limit], data.y[:limit]
    if tuple(x.shape[1:]) != tuple(shape[1:]):
        raise DatasetError(f"dataset {data.name!r} samples have shape {x.shape[1:]} but the model's "
                           f"input {name!r} takes {shape[1:]} (batch {shape[0]})")
    if len(x) == 0:
        raise DatasetError(f"dataset {data.name!r} is empty")
    batch = shape[0]
    correct, times, predicted = 0, [], []
    for start in range(0, len(x), batch):
        chunk = x[start:start + batch]
        real = len(chunk)
        if real < batch:  # the model's batch is fixed: pad, then ignore the padding's outputs
            chunk = np.concatenate([chunk, np.zeros((batch - real,) + chunk.shape[1:], chunk.dtype)])
        t0 = time.perf_counter()
        scores = session.run({name: np.ascontiguousarray(chunk)})[session.output_names[0]]
        times.append(time.perf_counter() - t0)
        top1 = scores.reshape(batch, -1)[:real].argmax(axis=1)
        correct += int((top1 == y[start:start + real]).sum())
        if keep_predictions:
            predicted.append(top1)
        if progress:
            progress(start + real, len(x))
    return EvalResult(data.name, len(x), correct, batch, LatencyStats.from_seconds(times),
                      np.concatenate(predicted) if keep_predictions else None)
