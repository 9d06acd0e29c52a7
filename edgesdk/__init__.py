"""edgesdk: compress, pack and run neural networks on mobile and edge hardware."""
from __future__ import annotations

__version__ = "0.1.0"

from .errors import (  # noqa: E402
    BackendUnavailableError,
    DatasetError,
    EdgeSDKError,
    InputError,
    ModelLoadError,
    PackageError,
    UnsupportedModelError,
    UnsupportedOperatorError,
)
from .graph import Graph, Node, Tensor  # noqa: E402
from .onnx_import import supported_operators  # noqa: E402
from .runtime.session import Session  # noqa: E402

__all__ = [
    "Session", "Graph", "Node", "Tensor", "supported_operators", "EdgeSDKError", "ModelLoadError",
    "UnsupportedModelError", "UnsupportedOperatorError", "BackendUnavailableError", "InputError", "PackageError",
    "DatasetError", "__version__",
]
