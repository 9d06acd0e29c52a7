"""Turn whatever the user passed as a model (path, ONNX proto, Graph) into a Graph.

Files are recognised by their content, not their name: an .edgepkg by its header magic, other
frameworks' formats (TFLite, PyTorch, Keras, SavedModel, NCNN, OpenVINO) by their signatures, each
with a one-line hint on converting it to ONNX; anything else is read as ONNX.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from .errors import ModelLoadError, UnsupportedModelError
from .graph import Graph
from .package.layout import MAGIC as PACKAGE_MAGIC
from .runtime.shapes import infer_shapes

if TYPE_CHECKING:
    from .onnx_import import InputShapes

__all__ = ["load_model", "model_format"]

_SNIFF_BYTES = 1024  # enough for every signature below (HDF5's user block aside)
_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
_TO_ONNX = "edgesdk reads ONNX (.onnx) and .edgepkg files"


def load_model(model: Any, input_shapes: InputShapes | None = None,
               outputs: Sequence[str] | None = None) -> Graph:
    """A private copy of the model as a Graph (the caller's Graph is never modified). ``outputs``
    cuts the graph at these tensors: they become its outputs and what they do not depend on is
    dropped (for ONNX models before import, so ops after the cut need not be supported)."""
    if outputs is not None and (isinstance(outputs, str) or not all(isinstance(o, str) for o in outputs)):
        raise UnsupportedModelError(f"outputs must be a list of tensor names, got {outputs!r}")
    if type(model).__name__ == "ModelProto" or (
            isinstance(model, (str, os.PathLike)) and model_format(Path(model)) == "onnx"):
        from .onnx_import import import_model, load_onnx
        if isinstance(model, (str, os.PathLike)):
            return load_onnx(model, input_shapes, outputs)
        return import_model(model, input_shapes, outputs=outputs)
    graph = _load_graph(model, input_shapes)
    return graph if outputs is None else cut_graph(graph, outputs)


def cut_graph(graph: Graph, outputs: Sequence[str]) -> Graph:
    """``graph`` with ``outputs`` as its outputs and the nodes they do not need removed."""
    from .passes import eliminate_dead_nodes
    unknown = [o for o in outputs if o not in graph.tensors]
    if unknown or not outputs or len(set(outputs)) != len(outputs):
        problem = f"{unknown} are not tensors of the model" if unknown else "must name at least one tensor, each once"
        raise UnsupportedModelError(f"outputs {problem}; `edgesdk inspect MODEL` lists its tensors")
    graph.outputs = list(outputs)
    eliminate_dead_nodes(graph)
    needed = {i for node in graph.nodes for i in node.inputs} | set(graph.outputs)
    graph.inputs = [i for i in graph.inputs if i in needed]
    graph.remove_unused_tensors()
    graph.metadata["cut_at"] = list(outputs)
    return graph


def _load_graph(model: Any, input_shapes: InputShapes | None) -> Graph:
    if isinstance(model, Graph):
        if input_shapes:
            raise ModelLoadError("input_shapes applies to ONNX models; a Graph already has fixed shapes")
        graph = model.copy()
        graph.toposort()  # hand-built graphs may list nodes in any order; also catches cycles
        infer_shapes(graph)
        return graph
    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        if model_format(path) == "edgepkg":
            if input_shapes:
                raise ModelLoadError("input_shapes applies to ONNX models; a package already has fixed shapes")
            from .package import load_package
            return load_package(path)
    raise ModelLoadError(f"cannot load a model from a {type(model).__name__}; pass a path to an .onnx "
                         f"or .edgepkg file, an onnx.ModelProto or an edgesdk Graph")


def model_format(path: str | os.PathLike) -> str:
    """"edgepkg" or "onnx" for a file edgesdk reads, judged by its first bytes (the name does not
    matter: a package renamed to model.onnx is a package). Raises a one-line
    :class:`ModelLoadError` for a missing path, a directory, an empty file or another framework's
    format, saying how to convert it. Files with no known signature are taken to be ONNX (the ONNX
    reader then says whether they are)."""
    path = Path(path)
    if path.is_dir():
        raise ModelLoadError(_directory_hint(path))
    if not path.exists():
        raise ModelLoadError(f"model file {str(path)!r} not found")
    if not path.is_file():  # a FIFO or a device would block or never end; read only regular files
        raise ModelLoadError(f"{str(path)!r} is not a regular file; {_TO_ONNX}")
    try:
        with open(path, "rb") as f:
            head = f.read(_SNIFF_BYTES)
    except OSError as exc:
        raise ModelLoadError(f"cannot read model file {str(path)!r}: {exc.strerror or exc}") from None
    if not head:
        raise ModelLoadError(f"{str(path)!r} is empty, not a model; {_TO_ONNX}")
    if head.startswith(PACKAGE_MAGIC):
        return "edgepkg"
    hint = _foreign_format_hint(path, head)
    if hint:
        raise ModelLoadError(f"{str(path)!r} is {hint}")
    return "onnx"


def _foreign_format_hint(path: Path, head: bytes) -> str | None:
    """What another framework's file is and how to get ONNX from it, or None."""
    if head[4:8] == b"TFL3":
        return ("a TensorFlow Lite model, not ONNX; convert it with "
                f"`python -m tf2onnx.convert --tflite {path.name} --output model.onnx` (pip install tf2onnx)")
    if head.startswith(b"PK\x03\x04"):
        return _zip_hint(path)
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return ("a Python pickle (a legacy torch.save() file or state dict), not ONNX; load the model in "
                "PyTorch and export it with torch.onnx.export(model, example_input, 'model.onnx')")
    if head.startswith(_HDF5_MAGIC):
        return ("an HDF5 file (a Keras .h5 model), not ONNX; convert it with "
                "`python -m tf2onnx.convert --keras model.h5 --output model.onnx` (pip install tf2onnx)")
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text.startswith(b"7767517"):
        return ("an NCNN .param file, not ONNX; export the original model (PyTorch, TensorFlow...) to ONNX "
                "instead: NCNN models do not convert back")
    if text.startswith(b"<?xml") or text.startswith(b"<net"):
        if b"<net" in head:
            return ("an OpenVINO IR .xml file, not ONNX; export the original model to ONNX instead "
                    "(OpenVINO IR does not convert back)")
        return f"an XML file, not a model; {_TO_ONNX}"
    return None


def _zip_hint(path: Path) -> str:
    """PyTorch (TorchScript or torch.save) and Keras 3 files are zip archives; tell them apart."""
    import zipfile  # here: only a zip file needs it, and it cost 7 ms of every first load
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (zipfile.BadZipFile, OSError, ValueError):
        names = []
    if "config.json" in names and any(n.endswith(".weights.h5") or n == "metadata.json" for n in names):
        return ("a Keras 3 .keras archive, not ONNX; convert it with tf2onnx (load it in Keras, then "
                "`tf2onnx.convert.from_keras(model, output_path='model.onnx')`)")
    if any(n.endswith("/constants.pkl") or "/code/" in n for n in names):
        return ("a TorchScript archive, not ONNX; export it with torch.onnx.export(torch.jit.load(...), "
                "example_input, 'model.onnx')")
    if any(n.endswith("/data.pkl") or n == "data.pkl" for n in names):
        return ("a PyTorch torch.save() file (weights or a pickled model), not ONNX; load the model in "
                "PyTorch and export it with torch.onnx.export(model, example_input, 'model.onnx')")
    return f"a zip archive, not a model; {_TO_ONNX}"


def _directory_hint(path: Path) -> str:
    if (path / "saved_model.pb").is_file() or (path / "saved_model.pbtxt").is_file():
        return (f"{str(path)!r} is a TensorFlow SavedModel directory; convert it with "
                f"`python -m tf2onnx.convert --saved-model {path} --output model.onnx` (pip install tf2onnx)")
    return f"{str(path)!r} is a directory, not a model file; {_TO_ONNX}"
