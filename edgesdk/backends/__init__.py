"""Backend registry: name -> implementation, imported lazily so a missing driver never breaks import."""
from __future__ import annotations

import importlib

from ..errors import BackendUnavailableError
from .base import Backend

# name -> "module:Class". Backends that need optional drivers are imported only when asked for.
_REGISTRY: dict[str, str] = {
    "reference": "edgesdk.backends.reference:ReferenceBackend",
    "opencl": "edgesdk.backends.opencl:OpenCLBackend",
    "cpu": "edgesdk.backends.cpu:CPUBackend",
}


def register_backend(name: str, target: str) -> None:
    """Register ``module:Class`` under ``name`` (plugins and tests may add backends)."""
    _REGISTRY[name] = target


def _load(name: str) -> type[Backend]:
    module_name, class_name = _REGISTRY[name].split(":")
    return getattr(importlib.import_module(module_name), class_name)


def backend_names() -> list[str]:
    return list(_REGISTRY)


def availability() -> dict[str, str | None]:
    """name -> None when usable here, else the reason it is not."""
    result: dict[str, str | None] = {}
    for name in _REGISTRY:
        try:
            result[name] = _load(name).unavailable_reason()
        except ImportError as exc:
            result[name] = f"cannot import: {exc}"
    return result


def available_backends() -> list[str]:
    return [name for name, reason in availability().items() if reason is None]


def get_backend(name: str) -> type[Backend]:
    if name not in _REGISTRY:
        raise BackendUnavailableError(
            f"unknown backend {name!r}; available backends: {', '.join(available_backends())}")
    try:
        cls = _load(name)
        reason = cls.unavailable_reason()
    except ImportError as exc:
        reason = f"cannot import it ({exc})"
    if reason is not None:
        raise BackendUnavailableError(
            f"backend {name!r} is unavailable: {reason}; available backends: {', '.join(available_backends())}")
    return cls
