"""Per-device-family tunables, read from ``device_configs/*.yaml``.

Each file describes one family (Adreno 6xx, Mali Valhall, PoCL CPU, ...) with a ``match`` block of
case-insensitive regular expressions over the device's platform, vendor, name and type, and the
tunables kernels are specialised with. The most specific matching file wins (highest
``priority``); ``generic.yaml`` matches everything with the lowest. A user file (argument or
``EDGESDK_OPENCL_CONFIG``) is merged on top, key by key, so it only needs the values it changes.
"""
from __future__ import annotations

import copy
import functools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ...errors import EdgeSDKError
from ...resources import data_dir
from .device import DeviceInfo

CONFIG_ENV = "EDGESDK_OPENCL_CONFIG"
CONFIG_DIR = data_dir("device_configs")

KERNEL_NAMES = ("conv_gemm", "conv_oc", "conv_direct", "depthwise", "winograd", "winograd_input", "winograd_output",
                "gemm_nt",
                "matmul", "eltwise", "pool", "reduce", "softmax")
MEMORY_MODES = ("zero_copy", "copy")
FP16_ARITHMETIC = ("auto", "never", "emulate")
_TOP_KEYS = {"family", "description", "match", "priority", "memory", "weights_storage", "activation_storage",
             "vector_width", "fp16_arithmetic", "half_vectors", "kernels"}
# Where activations and scratch live: "arena" (sub-buffers of one buffer, planned by offsets: the
# fewest bytes) or "objects" (whole buffers shared by tensors never alive together: no
# sub-buffers, for drivers where they are slow). runtime/arena.py plans both.
ACTIVATION_STORAGE = ("arena", "objects")
HALF_VECTORS = ("vector", "scalar")
_KERNEL_KEYS = {"rows", "vectors", "local", "min_k", "min_tiles", "max_scratch_mb"}


class DeviceConfigError(EdgeSDKError):
    """A device configuration file is missing, unreadable or holds an invalid value."""


@dataclass(frozen=True)
class KernelTuning:
    rows: int = 4  # output rows (channels) per work-item
    vectors: int = 1  # vectors of ``vector_width`` pixels per work-item
    local: tuple[int, ...] | None = None  # work-group size; None lets the driver choose
    min_k: int | None = None  # conv_oc, winograd: least reduction C*KH*KW (see ops_linear, ops_winograd)
    min_tiles: int | None = None  # winograd: least 2x2 output tiles; None: no Winograd (ops_winograd)
    max_scratch_mb: int | None = None  # winograd: most MiB of scratch (transformed tiles) per layer


@dataclass(frozen=True)
class DeviceConfig:
    family: str
    source: str  # the file(s) it came from
    memory: str = "zero_copy"
    weights_storage: str = "buffer"
    activation_storage: str = "arena"
    vector_width: int = 4
    fp16_arithmetic: str = "auto"
    half_vectors: str = "vector"  # "scalar": the driver's vload_halfN needs alignment it may not get
    kernels: dict[str, KernelTuning] = field(default_factory=dict)

    def tuning(self, kernel: str) -> KernelTuning:
        return self.kernels.get(kernel, KernelTuning())


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: 20x faster


def _read(path: Path) -> dict[str, Any]:
    try:
        stat = path.stat()
    except OSError as exc:
        raise DeviceConfigError(f"cannot read device config {str(path)!r}: {exc}") from None
    return copy.deepcopy(_parse(path, stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=64)
def _parse(path: Path, mtime_ns: int, size: int) -> dict[str, Any]:
    """Parsed once per process and file version (session start-up reads every family file)."""
    try:
        data = yaml.load(path.read_text(), Loader=_LOADER)
    except (OSError, yaml.YAMLError) as exc:
        raise DeviceConfigError(f"cannot read device config {str(path)!r}: {exc}") from None
    if not isinstance(data, dict):
        raise DeviceConfigError(f"device config {str(path)!r} must be a mapping of keys to values")
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise DeviceConfigError(f"device config {str(path)!r}: unknown keys {sorted(unknown)}; "
                                f"known: {sorted(_TOP_KEYS)}")
    return data


def family_files(directory: Path = CONFIG_DIR) -> list[Path]:
    return sorted(directory.glob("*.yaml"))


def _matches(rules: dict[str, str], info: DeviceInfo) -> bool:
    fields = {"platform": info.platform, "vendor": info.vendor, "name": info.name, "type": info.type}
    for key, pattern in (rules or {}).items():
        if key not in fields:
            raise DeviceConfigError(f"match key {key!r} is not one of {sorted(fields)}")
        if not re.search(str(pattern), fields[key], re.IGNORECASE):
            return False
    return True


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def load_device_config(info: DeviceInfo, user_file: str | os.PathLike | None = None,
                       directory: Path = CONFIG_DIR) -> DeviceConfig:
    """The matching family profile for ``info``, with ``user_file`` (or the environment) on top."""
    candidates = [(path, _read(path)) for path in family_files(directory)]
    matching = [(p, d) for p, d in candidates if _matches(d.get("match", {}), info)]
    if not matching:
        raise DeviceConfigError(f"no device config in {str(directory)!r} matches {info.label!r} "
                                f"(generic.yaml, which matches everything, is missing)")
    path, data = max(matching, key=lambda pd: int(pd[1].get("priority", 0)))
    sources = [path.name]
    user_file = user_file if user_file is not None else os.environ.get(CONFIG_ENV) or None
    if user_file is not None:
        data = _merge(data, _read(Path(user_file)))
        sources.append(str(user_file))
    return _build(data, " + ".join(sources))


def _build(data: dict[str, Any], source: str) -> DeviceConfig:
    def fail(message: str) -> DeviceConfigError:
        return DeviceConfigError(f"device config {source}: {message}")

    memory = data.get("memory", "zero_copy")
    if memory not in MEMORY_MODES:
        raise fail(f"memory must be one of {MEMORY_MODES}, got {memory!r}")
    storage = data.get("weights_storage", "buffer")
    if storage != "buffer":
        raise fail(f"weights_storage {storage!r} is not implemented; this backend keeps tensors in buffers")
    activations = data.get("activation_storage", "arena")
    if activations not in ACTIVATION_STORAGE:
        raise fail(f"activation_storage must be one of {ACTIVATION_STORAGE}, got {activations!r}")
    width = data.get("vector_width", 4)
    if width not in (1, 2, 4, 8, 16):
        raise fail(f"vector_width must be 1, 2, 4, 8 or 16, got {width!r}")
    arithmetic = data.get("fp16_arithmetic", "auto")
    if arithmetic not in FP16_ARITHMETIC:
        raise fail(f"fp16_arithmetic must be one of {FP16_ARITHMETIC}, got {arithmetic!r}")
    half_vectors = data.get("half_vectors", "vector")
    if half_vectors not in HALF_VECTORS:
        raise fail(f"half_vectors must be one of {HALF_VECTORS}, got {half_vectors!r}")
    kernels = {}
    for name, tuning in (data.get("kernels") or {}).items():
        if name not in KERNEL_NAMES:
            raise fail(f"unknown kernel {name!r}; known: {', '.join(KERNEL_NAMES)}")
        unknown = set(tuning or {}) - _KERNEL_KEYS
        if unknown:
            raise fail(f"kernel {name!r}: unknown tunables {sorted(unknown)}; known: {sorted(_KERNEL_KEYS)}")
        kernels[name] = _tuning(name, tuning or {}, fail)
    return DeviceConfig(family=str(data.get("family", "unnamed")), source=source, memory=memory,
                        weights_storage=storage, activation_storage=activations, vector_width=int(width),
                        fp16_arithmetic=arithmetic, half_vectors=half_vectors, kernels=kernels)


def _tuning(name: str, raw: dict[str, Any], fail) -> KernelTuning:
    rows, vectors, local = raw.get("rows", 4), raw.get("vectors", 1), raw.get("local")
    if not (isinstance(rows, int) and 1 <= rows <= 16):
        raise fail(f"kernel {name!r}: rows must be an integer in 1..16, got {rows!r}")
    if not (isinstance(vectors, int) and 1 <= vectors <= 4):
        raise fail(f"kernel {name!r}: vectors must be an integer in 1..4, got {vectors!r}")
    if local is not None:
        if isinstance(local, int):
            local = [local]
        if not (isinstance(local, list) and 1 <= len(local) <= 3 and all(isinstance(v, int) and v >= 1 for v in local)):
            raise fail(f"kernel {name!r}: local must be null or 1-3 positive integers, got {raw.get('local')!r}")
        local = tuple(local)
    thresholds = {}
    for key in ("min_k", "min_tiles", "max_scratch_mb"):
        value = thresholds[key] = raw.get(key)
        if not (value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1)):
            raise fail(f"kernel {name!r}: {key} must be null or a positive integer, got {value!r}")
    return KernelTuning(rows=rows, vectors=vectors, local=local, **thresholds)
