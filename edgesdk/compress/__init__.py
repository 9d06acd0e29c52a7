"""The public compression API: recipes, compressing a model and writing it as an .edgepkg package.

>>> from edgesdk.compress import LayerSettings, Recipe, pack_model
>>> recipe = Recipe(LayerSettings(cluster_bits=4, per_channel=True, fp16=True))
>>> result = pack_model("model.onnx", "model.edgepkg", recipe)   # a path, an onnx.ModelProto or a Graph
>>> graph, reports = compress_model(model, recipe)               # compress in memory, no file

Importing this module loads neither onnx nor torch: they are imported when a function needs them
(onnx to read an ONNX model, torch only for fine-tuning in ``edgesdk.compress.finetune``).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..pack import AccuracyDropError, ModelSource, PackResult, compress_model, pack_model
    from .apply import LayerReport
    from .recipe import LayerSettings, Recipe, RecipeError

# Every name is resolved on first use. edgesdk.pack imports this package's modules, so importing
# it here would be circular when edgesdk.pack is imported first; and a session's backend imports
# only compress.encodings, which need not pay for apply and recipe (13 ms of a first session).
_LAZY = {"compress_model": "..pack", "pack_model": "..pack", "PackResult": "..pack", "ModelSource": "..pack",
         "AccuracyDropError": "..pack", "LayerReport": ".apply", "LayerSettings": ".recipe", "Recipe": ".recipe",
         "RecipeError": ".recipe"}

__all__ = ["compress_model", "pack_model", "Recipe", "LayerSettings", "RecipeError", "LayerReport",
           "PackResult", "ModelSource", "AccuracyDropError"]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name], __name__), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
