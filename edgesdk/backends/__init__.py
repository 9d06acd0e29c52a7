"""Backend registry: name -> implementation, imported lazily so a missing driver never breaks import."""
from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING

from ..errors import BackendUnavailableError, UnsupportedModelError
from .base import Backend

if TYPE_CHECKING:
    from ..runtime.plan import ExecutionPlan

log = logging.getLogger("edgesdk.backends")
AUTO = "auto"
# What "auto" tries, fastest first; the last one runs every model the SDK imports.
AUTO_ORDER = ("cpu", "reference")

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
    """The registered backends (not "auto"; see :func:`backend_choices`)."""
    return list(_REGISTRY)


def backend_choices() -> list[str]:
    """What ``Session(backend=...)`` and the CLI accept: "auto" and every registered backend."""
    return [AUTO, *_REGISTRY]


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
    """The registered backends that can run on this machine."""
    return [name for name, reason in availability().items() if reason is None]


def get_backend(name: str) -> type[Backend]:
    """The class registered as ``name``; BackendUnavailableError (one line, with the reason and
    the usable backends) when it is unknown or cannot run here."""
    if name == AUTO:
        raise BackendUnavailableError('"auto" picks a backend per model: pass it to Session() or '
                                      'create_backend(), or name one of ' + ", ".join(available_backends()))
    if name not in _REGISTRY:
        raise BackendUnavailableError(
            f"unknown backend {name!r}; choose auto or one of the available backends: "
            f"{', '.join(available_backends())}")
    try:
        cls = _load(name)
        reason = cls.unavailable_reason()
    except ImportError as exc:
        reason = f"cannot import it ({exc})"
    if reason is not None:
        raise BackendUnavailableError(
            f"backend {name!r} is unavailable: {reason}; available backends: {', '.join(available_backends())}")
    return cls


def check_precision(cls: type[Backend], precision: str) -> None:
    """BackendUnavailableError (one line, with the choices) when ``cls`` lacks ``precision``."""
    if precision not in cls.precisions:
        raise BackendUnavailableError(
            f"precision {precision!r} is not supported by backend {cls.name!r}; choose one of "
            f"{', '.join(cls.precisions)}")


def backend_candidates(name: str, precision: str = "fp32") -> list[type[Backend]]:
    """The classes :func:`create_backend` tries for ``name``, in order, checked (known name,
    usable here, ``precision`` supported) before any model is loaded: one class for a named
    backend; for ``"auto"`` the usable ones of :data:`AUTO_ORDER` (the last one always)."""
    if name != AUTO:
        cls = get_backend(name)
        check_precision(cls, precision)
        return [cls]
    *preferred, last = AUTO_ORDER
    usable = []
    for candidate in preferred:
        try:
            cls = get_backend(candidate)
            check_precision(cls, precision)
            usable.append(cls)
        except BackendUnavailableError as exc:
            log.info("backend auto: not %s (%s)", candidate, exc)
    cls = get_backend(last)
    check_precision(cls, precision)
    return [*usable, cls]


def create_backend(name: str | list[type[Backend]], plan: "ExecutionPlan", *, precision: str = "fp32",
                   threads: int | None = None) -> Backend:
    """An instance of backend ``name`` (or of the first of ``name``'s :func:`backend_candidates`
    that builds) for ``plan``. Under ``"auto"`` a backend that cannot run this model (an
    operator or variant it lacks: UnsupportedModelError) is skipped with a log line; the last
    candidate's error, if any, is raised."""
    candidates = backend_candidates(name, precision) if isinstance(name, str) else list(name)
    for cls in candidates[:-1]:
        try:
            return cls(plan, precision=precision, threads=threads)
        except UnsupportedModelError as exc:
            log.info("backend auto: not %s (%s)", cls.name, exc)
    return candidates[-1](plan, precision=precision, threads=threads)
