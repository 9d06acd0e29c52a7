"""Turn whatever the user passed as a model (path, ONNX proto, Graph) into a Graph."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .errors import ModelLoadError
from .graph import Graph
from .onnx_import import InputShapes, import_model, load_onnx
from .package import SUFFIX as PACKAGE_SUFFIX
from .package import load_package
from .runtime.shapes import infer_shapes

MODEL_SUFFIXES = (".onnx", PACKAGE_SUFFIX)


def load_model(model: Any, input_shapes: InputShapes | None = None) -> Graph:
    """A private copy of the model as a Graph (the caller's Graph is never modified)."""
    if isinstance(model, Graph):
        if input_shapes:
            raise ModelLoadError("input_shapes applies to ONNX models; a Graph already has fixed shapes")
        graph = model.copy()
        graph.toposort()  # hand-built graphs may list nodes in any order; also catches cycles
        infer_shapes(graph)
        return graph
    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        if path.suffix.lower() not in MODEL_SUFFIXES:
            raise ModelLoadError(
                f"{str(path)!r}: unknown model type {path.suffix or '(no suffix)'!r}; "
                f"edgesdk reads {', '.join(MODEL_SUFFIXES)} files")
        if path.suffix.lower() == PACKAGE_SUFFIX:
            if input_shapes:
                raise ModelLoadError("input_shapes applies to ONNX models; a package already has fixed shapes")
            return load_package(path)
        return load_onnx(path, input_shapes)
    if type(model).__name__ == "ModelProto":
        return import_model(model, input_shapes)
    raise ModelLoadError(f"cannot load a model from a {type(model).__name__}; pass a path to an .onnx "
                         f"or .edgepkg file, an onnx.ModelProto or an edgesdk Graph")
