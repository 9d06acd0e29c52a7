"""Parity model zoo: plain-PyTorch models plus a cached ONNX exporter.

Importable as ``zoo`` (with ``tests/`` on ``sys.path``, as the root conftest arranges) or as
``tests.zoo``; only relative imports are used inside the package.
"""
from .models import MODELS, ModelSpec, build, get_spec, model_names
from .export import cache_dir, export_onnx, sample_input, torch_outputs

__all__ = [
    "MODELS",
    "ModelSpec",
    "build",
    "get_spec",
    "model_names",
    "cache_dir",
    "export_onnx",
    "sample_input",
    "torch_outputs",
]
