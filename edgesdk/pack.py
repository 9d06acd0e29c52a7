"""ONNX -> Graph -> compress -> .edgepkg, the workflow behind ``edgesdk pack`` and ``quickstart``."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .compress.apply import LayerReport, compress
from .compress.recipe import Recipe
from .datasets import Dataset
from .graph import Graph
from .loader import load_model
from .passes import optimize

Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class PackResult:
    source: str
    output: str
    source_bytes: int  # the ONNX file
    package_bytes: int
    layers: list[LayerReport]
    accuracy: float | None
    baseline_accuracy: float | None
    dataset: str | None

    @property
    def ratio(self) -> float:
        return self.source_bytes / max(1, self.package_bytes)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "output": self.output, "source_bytes": self.source_bytes,
                "package_bytes": self.package_bytes, "ratio": self.ratio, "accuracy": self.accuracy,
                "baseline_accuracy": self.baseline_accuracy, "dataset": self.dataset,
                "layers": [r.to_dict() for r in self.layers]}


def compress_model(source: str | os.PathLike | Graph, recipe: Recipe, *, input_shapes=None,
                   progress: Progress | None = None) -> tuple[Graph, list[LayerReport]]:
    """Load, run the graph passes (BatchNorm folds before clustering), then compress."""
    graph = load_model(source, input_shapes)
    optimize(graph)
    return graph, compress(graph, recipe, progress=progress)


def pack_model(source: str | os.PathLike, output: str | os.PathLike, recipe: Recipe, *,
               data: Dataset | None = None, input_shapes=None, graph: Graph | None = None,
               progress: Progress | None = None) -> PackResult:
    """Compress ``source`` with ``recipe`` (or take an already compressed ``graph``), optionally
    measure accuracy on ``data`` before and after, and write the package."""
    from .evaluation import evaluate
    from .package import save_package, sha256_file
    from .runtime.session import Session

    if graph is None:
        graph, reports = compress_model(source, recipe, input_shapes=input_shapes, progress=progress)
    else:
        reports = [LayerReport(**{k: v for k, v in r.items() if k != "ratio"})
                   for r in graph.metadata.get("compression", {}).get("layers", [])]
    accuracy = baseline = None
    if data is not None:
        baseline = evaluate(Session(source, input_shapes=input_shapes), data).accuracy
        accuracy = evaluate(Session(graph), data).accuracy
    metadata = {"source_sha256": sha256_file(source), "recipe": recipe.to_json(),
                "layers": [r.summary() for r in reports]}
    # The recipe and per-layer stats travel once, as package metadata; the graph keeps the rest.
    graph.metadata["compression"] = {"baseline_accuracy": baseline}
    if accuracy is not None:
        metadata.update(accuracy=accuracy, accuracy_dataset=data.name)
    save_package(graph, output, metadata=metadata,
                 progress=(lambda done, total: progress(done, total, "writing")) if progress else None)
    return PackResult(str(source), str(output), Path(source).stat().st_size, Path(output).stat().st_size,
                      reports, accuracy, baseline, data.name if data is not None else None)
