"""edgesdk: compress, pack and run neural networks on mobile and edge hardware."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

from .errors import (  # noqa: E402
    BackendUnavailableError,
    DatasetError,
    EdgeSDKError,
    InputError,
    MemoryBudgetError,
    ModelLoadError,
    ModelTooLargeError,
    PackageError,
    SessionClosedError,
    UnsupportedModelError,
    UnsupportedOperatorError,
)
from .graph import Graph, Node, Tensor  # noqa: E402
from .runtime.session import Session  # noqa: E402

if TYPE_CHECKING:
    from .onnx_import import supported_operators

__all__ = [
    "Session", "Graph", "Node", "Tensor", "supported_operators", "EdgeSDKError", "ModelLoadError",
    "UnsupportedModelError", "UnsupportedOperatorError", "ModelTooLargeError", "BackendUnavailableError",
    "InputError", "MemoryBudgetError", "PackageError", "SessionClosedError", "DatasetError", "__version__",
]


def __getattr__(name: str) -> Any:
    # supported_operators lives with the ONNX importer, and importing that imports onnx (~55 ms,
    # a third of `import edgesdk`): done on first use, so that importing edgesdk and running an
    # .edgepkg never load onnx.
    if name == "supported_operators":
        from .onnx_import import supported_operators
        return supported_operators
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | {"supported_operators"})
