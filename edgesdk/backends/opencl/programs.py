"""Kernel sources, build options and the program cache (in memory, then on disk).

A program is one ``cl_kernels/<file>.cl`` (with ``common.cl`` in front) built with ``-D``
constants. Built programs are kept per device in memory and their binaries on disk under
``$EDGESDK_CACHE_DIR/cl`` (default ``~/.cache/edgesdk/cl``), keyed by device name, driver
version, the source hash and the options, so the next process skips the compiler. Files are
written to a temporary name and renamed, so a crash never leaves a truncated binary behind. Each
entry carries a magic, the binary's length and its SHA-256, checked before the binary reaches the
driver: drivers abort or segfault on damaged binaries (PoCL crashed on 5 of 10 truncated entries)
instead of reporting an error, so a damaged entry must never be handed to them. An entry that fails
the check, or that the driver refuses, is removed, rebuilt from source and replaced.
"""
from __future__ import annotations

import hashlib
import logging
import os
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from ...errors import BackendUnavailableError
from ...fileio import atomic_write_bytes
from ...resources import data_dir
from .device import Device, _cl

log = logging.getLogger("edgesdk.opencl")

KERNEL_DIR = data_dir("cl_kernels")
CACHE_ENV = "EDGESDK_CACHE_DIR"
_COMMON = "common.cl"
# -cl-mad-enable lets the compiler fuse a*b+c; fast-relaxed-math is *not* used: it changes
# exp/tanh/division accuracy beyond what the parity tests accept.
BASE_OPTIONS = ("-cl-std=CL1.2", "-cl-mad-enable")


def cache_root() -> Path:
    base = os.environ.get(CACHE_ENV)
    return (Path(base) if base else Path.home() / ".cache" / "edgesdk") / "cl"


def format_define(name: str, value: Any) -> str:
    """One ``-D`` option; floats are written as exact hex literals so nothing is rounded twice."""
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, float):
        if value != value:
            raise ValueError(f"{name} is NaN")
        if value in (float("inf"), float("-inf")):
            return f"-D{name}={'-' if value < 0 else ''}INFINITY"
        return f"-D{name}={value.hex()}f"
    return f"-D{name}={value}"


@dataclass
class CacheStats:
    source_builds: int = 0  # compiled by the driver from source
    binary_loads: int = 0  # rebuilt from a cached binary
    memory_hits: int = 0  # already built in this process

    def to_dict(self) -> dict[str, int]:
        return {"source_builds": self.source_builds, "binary_loads": self.binary_loads,
                "memory_hits": self.memory_hits}


class ProgramCache:
    """Builds and caches programs for one device."""

    def __init__(self, device: Device, directory: Path | None = None) -> None:
        self.device = device
        self.directory = directory
        self.stats = CacheStats()
        self._programs: dict[tuple[str, str], Any] = {}
        self._sources: dict[str, str] = {}
        self._lock = threading.Lock()

    def source(self, file: str) -> str:
        text = self._sources.get(file)
        if text is None:
            try:
                text = (KERNEL_DIR / _COMMON).read_text() + "\n" + (KERNEL_DIR / file).read_text()
            except OSError as exc:
                raise BackendUnavailableError(f"OpenCL kernel source missing: {exc}") from None
            self._sources[file] = text
        return text

    def get(self, file: str, defines: Mapping[str, Any]) -> Any:
        """The built program for ``file`` specialised with ``defines``."""
        options = " ".join(BASE_OPTIONS + tuple(format_define(k, v) for k, v in sorted(defines.items())))
        key = (file, options)
        with self._lock:
            program = self._programs.get(key)
            if program is not None:
                self.stats.memory_hits += 1
                return program
            program = self._build(file, options)
            self._programs[key] = program
            return program

    def clear_memory(self) -> None:
        """Forget the in-process programs (the disk cache stays): the next get() loads binaries."""
        with self._lock:
            self._programs.clear()

    def _disk_path(self, source: str, options: str) -> Path:
        info = self.device.info
        key = "\0".join((info.platform, info.name, info.driver_version, info.version, source, options))
        digest = hashlib.sha256(key.encode()).hexdigest()[:32]
        return (self.directory or cache_root()) / f"{digest}.bin"

    def _build(self, file: str, options: str) -> Any:
        cl = _cl()
        source = self.source(file)
        path = self._disk_path(source, options)
        binary = _read_entry(path)
        if binary is not None:
            try:
                program = self._quiet(file, lambda: cl.Program(self.device.context, [self.device.cl_device],
                                                               [binary]).build(options))
                self.stats.binary_loads += 1
                return program
            except cl.Error as exc:  # driver update or a damaged file: rebuild from source
                log.info("cached OpenCL binary %s rejected (%s); rebuilding", path.name, exc)
        try:
            program = self._quiet(file, lambda: cl.Program(self.device.context, source).build(
                options, devices=[self.device.cl_device]))
        except cl.Error as exc:
            errors = [line.strip() for line in str(exc).splitlines() if "error" in line.lower()]
            raise BackendUnavailableError(
                f"OpenCL compiler failed on {file} for {self.device.label} with {options}: "
                f"{' | '.join(errors[-3:])[:600]}") from None
        self.stats.source_builds += 1
        _write_entry(path, program.get_info(cl.program_info.BINARIES)[0])
        return program

    def _quiet(self, file: str, build: Callable[[], Any]) -> Any:
        """Run a build with pyopencl's CompilerWarning (any non-empty build log) silenced and the
        log sent to the debug log instead (`-vv`): NVIDIA's compiler notes on every kernel
        ("Function conv_gemm is a kernel, so overriding noinline attribute"), which no user can act
        on, were printed for each program built. Errors still raise. catch_warnings swaps the
        process's filters for the build (one device's builds run one at a time under the cache
        lock): a warning another thread raises during a build may go unshown."""
        cl = _cl()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", cl.CompilerWarning)
            program = build()
        if log.isEnabledFor(logging.DEBUG):
            text = program.get_build_info(self.device.cl_device, cl.program_build_info.LOG).strip()
            if text:
                log.debug("OpenCL compiler output for %s: %s", file, text[:2000])
        return program


# A cache entry: magic, binary length (u64 little-endian), SHA-256 of the binary, the binary.
ENTRY_MAGIC = b"EDGECLB1"
_ENTRY_HEADER = len(ENTRY_MAGIC) + 8 + 32


def pack_entry(binary: bytes) -> bytes:
    return ENTRY_MAGIC + len(binary).to_bytes(8, "little") + hashlib.sha256(binary).digest() + binary


def unpack_entry(data: bytes) -> bytes | None:
    """The binary stored in ``data``, or None when the entry is damaged or of another format."""
    if len(data) <= _ENTRY_HEADER or not data.startswith(ENTRY_MAGIC):
        return None
    length = int.from_bytes(data[len(ENTRY_MAGIC):len(ENTRY_MAGIC) + 8], "little")
    digest = data[len(ENTRY_MAGIC) + 8:_ENTRY_HEADER]
    binary = data[_ENTRY_HEADER:]
    if length != len(binary) or hashlib.sha256(binary).digest() != digest:
        return None
    return binary


def _read_entry(path: Path) -> bytes | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    binary = unpack_entry(data)
    if binary is None:
        log.info("cached OpenCL binary %s is damaged (%d bytes, hash or length mismatch); rebuilding",
                 path.name, len(data))
        try:
            path.unlink()
        except OSError:
            pass
    return binary


def _write_entry(path: Path, binary: bytes) -> None:
    """Temp file + rename in the same directory; failures only cost the next start a rebuild."""
    if not binary:
        return
    try:
        atomic_write_bytes(path, pack_entry(binary), fsync=False)  # a lost cache file costs a rebuild
    except OSError as exc:
        log.info("cannot write the OpenCL binary cache %s: %s", path, exc)


_CACHES: dict[int, ProgramCache] = {}


def program_cache(device: Device) -> ProgramCache:
    """The process-wide cache of ``device`` (sessions on one device share built programs)."""
    cache = _CACHES.get(id(device))
    if cache is None:
        cache = _CACHES[id(device)] = ProgramCache(device)
    return cache
