"""The public compression API: recipes, compressing a model and writing it as an .edgepkg package.

>>> from edgesdk.compress import LayerSettings, Recipe, pack_model
>>> recipe = Recipe(LayerSettings(cluster_bits=4, per_channel=True, fp16=True))
>>> result = pack_model("model.onnx", "model.edgepkg", recipe)   # a path, an onnx.ModelProto or a Graph
>>> graph, reports = compress_model(model, recipe)               # compress in memory, no file

Importing this module loads neither onnx nor torch: they are imported when a function needs them
(onnx to read an ONNX model, torch only for fine-tuning in ``edgesdk.compress.finetune``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .apply import LayerReport
from .recipe import LayerSettings, Recipe, RecipeError

if TYPE_CHECKING:
    from ..pack import AccuracyDropError, ModelSource, PackResult, compress_model, pack_model

# edgesdk.pack imports this package's modules, so its names are resolved on first use instead of
# here (an import at this point would be circular when edgesdk.pack is imported first).
_FROM_PACK = ("compress_model", "pack_model", "PackResult", "ModelSource", "AccuracyDropError")

__all__ = ["compress_model", "pack_model", "Recipe", "LayerSettings", "RecipeError", "LayerReport",
           "PackResult", "ModelSource", "AccuracyDropError"]


def __getattr__(name: str) -> Any:
    if name in _FROM_PACK:
        from .. import pack
        return getattr(pack, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
