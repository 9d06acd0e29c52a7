"""Typed face of the compiled ``edgesdk._native`` extension: what this CPU can run.

SIMD kernel dispatch asks :func:`cpu_features` once and follows :meth:`CpuFeatures.isa_path`.
"""
from __future__ import annotations

import functools
import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType, ModuleType
from typing import Any

from edgesdk.errors import EdgeSDKError

_NOT_BUILT = (
    "edgesdk._native is not built: reinstall with `pip install .` "
    "(needs cmake and a C++17 compiler)"
)


@dataclass(frozen=True)
class CpuFeatures:
    arch: str
    vendor: str
    model: str
    # Read-only because the object is cached and shared; left out of the hash (a mapping proxy
    # has none) so a CpuFeatures can still key a cache of dispatch decisions.
    flags: Mapping[str, bool] = field(hash=False)

    def isa_path(self) -> str:
        """The kernel family the native dispatch picks on these features: avx512amx, avx512vnni,
        avx512, avxvnni, avx2, neondot, neonfp16, neon or scalar. Mirrors ``cpu_native/src/kernels/dispatch.cc``:
        AVX-512 needs F, BW, VL and DQ plus FMA and F16C (avx512vnni adds VNNI's ``vpdpbusd``
        int8 GEMM; avx512amx adds AMX's ``tdpbusd`` int8 GEMM, flags ``amx_tile`` and ``amx_int8``:
        Sapphire Rapids and later, where Linux must also grant the process the tile state, which
        the dispatch asks for), AVX2 needs FMA and F16C (avxvnni adds AVX-VNNI's 256-bit ``vpdpbusd`` int8
        GEMM and depthwise convolution: Alder Lake and later cores without AVX-512), NEON is plain AArch64 Advanced SIMD, neonfp16 is
        NEON plus the ARMv8.2-A fp16 arithmetic (flag ``fp16``: HWCAP fphp + asimdhp), whose
        fp16-product / fp32-sum kernels fp16 sessions use for convolutions and GEMMs (fp32
        sessions run the NEON kernels on it), and neondot is neonfp16 plus the ``sdot`` int8
        GEMM (flag ``dotprod``). EDGESDK_CPU_ISA can
        force a lower level; see :func:`active_isa` for what this process actually runs."""
        def has(*names: str) -> bool:
            return all(self.flags.get(name, False) for name in names)

        if has("avx512f", "avx512bw", "avx512vl", "avx512dq", "fma", "f16c"):
            if not has("avx512vnni"):
                return "avx512"
            return "avx512amx" if has("amx_tile", "amx_int8") else "avx512vnni"
        if has("avx2", "fma", "f16c"):
            return "avxvnni" if has("avx_vnni") else "avx2"
        if has("neon", "fp16"):
            return "neondot" if has("dotprod") else "neonfp16"
        if has("neon"):
            return "neon"
        return "scalar"


def _native() -> ModuleType:
    try:
        return importlib.import_module("edgesdk._native")
    except ImportError as exc:
        raise EdgeSDKError(_NOT_BUILT) from exc


@functools.cache
def cpu_features() -> CpuFeatures:
    """Features of the CPU this process runs on, as supported by the OS too (cached)."""
    raw = _native().cpu_features()
    return CpuFeatures(
        arch=raw["arch"],
        vendor=raw["vendor"],
        model=raw["model"],
        flags=MappingProxyType(dict(raw["flags"])),
    )


def build_info() -> dict[str, Any]:
    """How the extension was compiled: compiler, compiler_version, arch, cxx_standard."""
    return dict(_native().build_info())


def active_isa() -> str:
    """The kernel level this process runs: :meth:`CpuFeatures.isa_path` unless EDGESDK_CPU_ISA
    (or a test) forced another supported one."""
    return str(_native().kernels.active_isa())


def supported_isas() -> list[str]:
    """Every kernel level this CPU can run, lowest first (each can be forced with EDGESDK_CPU_ISA)."""
    return [str(isa) for isa in _native().kernels.supported_isas()]


def kernel_names(isa: str | None = None) -> dict[str, str]:
    """The microkernel in each slot of a kernel level's table (default: :func:`active_isa`), named
    as XNNPACK names its kernels, ``<datatype>_<op>_<tile>__<isa>``: e.g. ``{"igemm_f32w":
    "f32_igemm_6x16__avx2", "maxpool": "f32_maxpool_8c__avx2", ...}`` (see
    ``cpu_native/src/kernels/ukernels.h``). Any level compiled in for this arch can be asked."""
    return {str(slot): str(name) for slot, name in _native().kernels.kernel_names(isa).items()}
