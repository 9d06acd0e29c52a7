"""edgesdk._native CPU feature detection, checked against the kernel's view of this CPU, against
the standalone C++ driver, and on emulated aarch64 CPUs under qemu-user."""
from __future__ import annotations

import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import edgesdk
import edgesdk._native as ext
from edgesdk import native
from edgesdk.errors import EdgeSDKError

ROOT = Path(__file__).resolve().parents[1]
INCLUDE = ROOT / "cpu_native" / "src"
DRIVER_SOURCES = [INCLUDE / "cpu_features.cc", ROOT / "cpu_native" / "tools" / "cpu_features_main.cc"]

X86_FLAGS = {
    "sse4_2", "popcnt", "bmi2", "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512dq",
    "avx512cd", "avx512bw", "avx512vl", "avx512vnni", "avx512vpopcntdq", "amx_tile", "amx_int8",
}
ARM_FLAGS = {"neon", "fp16", "fhm", "dotprod", "i8mm", "bf16", "sve"}
# /proc/cpuinfo "flags" spelling -> ours, where they differ.
CPUINFO_NAMES = {"avx512_vnni": "avx512vnni", "avx512_vpopcntdq": "avx512vpopcntdq"}

X86_LINUX = sys.platform == "linux" and platform.machine() == "x86_64"
INSTALL_HINT = "run `make test`, which installs them, or `apt-get install -y g++-aarch64-linux-gnu qemu-user`"


def run(*cmd: object) -> str:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{proc.stdout}{proc.stderr}"
    return proc.stdout


def require_tool(name: str, hint: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} not found: {hint}")
    return path


def parse_driver(out: str) -> tuple[dict[str, str], dict[str, bool]]:
    """Split the driver's output into its "key: value" header and its "name=0|1" flags."""
    info = dict(re.findall(r"^(\w+): (.*)$", out, re.M))
    flags = {name: bit == "1" for name, bit in re.findall(r"^(\w+)=([01])$", out, re.M)}
    return info, flags


def expected_flag_names(arch: str) -> set[str]:
    return {"x86_64": X86_FLAGS, "aarch64": ARM_FLAGS}.get(arch, set())


def test_cpu_features_has_fixed_keys_for_this_arch():
    raw = ext.cpu_features()
    assert set(raw) == {"arch", "vendor", "model", "flags"}
    assert raw["arch"] == {"arm64": "aarch64"}.get(platform.machine(), platform.machine())
    assert raw["vendor"] and raw["model"]
    assert set(raw["flags"]) == expected_flag_names(raw["arch"])
    assert all(type(v) is bool for v in raw["flags"].values())


def test_build_info_and_version():
    info = native.build_info()
    assert set(info) == {"compiler", "compiler_version", "arch", "cxx_standard"}
    assert info["compiler"] and info["compiler_version"]
    assert info["arch"] == native.cpu_features().arch
    assert info["cxx_standard"] >= 17
    assert ext.__version__ == edgesdk.__version__


@pytest.mark.skipif(not X86_LINUX, reason="/proc/cpuinfo cross-check is for x86-64 Linux")
def test_x86_flags_match_proc_cpuinfo():
    text = Path("/proc/cpuinfo").read_text()
    kernel = {CPUINFO_NAMES.get(f, f) for f in re.search(r"^flags\s*: (.*)$", text, re.M)[1].split()}
    ours = native.cpu_features().flags
    assert {name: name in kernel for name in X86_FLAGS} == dict(ours)


@pytest.mark.parametrize("build", ["g++", "cmake"])
def test_standalone_driver_matches_module(build, tmp_path):
    if build == "g++":
        exe = tmp_path / "cpu_features"
        run(require_tool("g++", "install a C++17 compiler"), "-std=c++17", "-O2", f"-I{INCLUDE}",
            *DRIVER_SOURCES, "-o", exe)
    else:
        cmake = require_tool("cmake", "install cmake")
        run(cmake, "-S", ROOT, "-B", tmp_path, "-DEDGESDK_BUILD_TOOLS=ON", "-DCMAKE_BUILD_TYPE=Release")
        run(cmake, "--build", tmp_path, "--target", "cpu_features")
        exe = tmp_path / "cpu_features"
    info, flags = parse_driver(run(exe))
    ours = native.cpu_features()
    assert info == {"arch": ours.arch, "vendor": ours.vendor, "model": ours.model}
    assert flags == dict(ours.flags)


@pytest.fixture(scope="module")
def aarch64_driver(tmp_path_factory) -> Path:
    cxx = require_tool("aarch64-linux-gnu-g++", INSTALL_HINT)
    exe = tmp_path_factory.mktemp("aarch64") / "cpu_features"
    run(cxx, "-std=c++17", "-static", "-O2", f"-I{INCLUDE}", *DRIVER_SOURCES, "-o", exe)
    return exe


@pytest.mark.skipif(not X86_LINUX, reason="cross-compiles from an x86-64 Linux host")
@pytest.mark.parametrize(
    ("cpu", "expected"),
    [
        ("max", {"neon": True, "fp16": True, "fhm": True, "dotprod": True}),
        # Armv8.2 with FEAT_FP16 but no FEAT_FHM.
        ("cortex-a76", {"neon": True, "fp16": True, "fhm": False}),
        # Armv8.0: Advanced SIMD only.
        ("cortex-a53", {name: name == "neon" for name in ARM_FLAGS}),
    ],
)
def test_aarch64_flags_under_qemu(aarch64_driver, cpu, expected):
    qemu = require_tool("qemu-aarch64", INSTALL_HINT)
    # `-cpu help` exits 1 on qemu 7.2 even though it lists the CPUs.
    listed = subprocess.run([qemu, "-cpu", "help"], capture_output=True, text=True).stdout.split()
    assert cpu in listed, f"this qemu-aarch64 does not emulate {cpu}: {INSTALL_HINT}"
    info, flags = parse_driver(run(qemu, "-cpu", cpu, aarch64_driver))
    assert info["arch"] == "aarch64"
    assert set(flags) == ARM_FLAGS
    assert {name: flags[name] for name in expected} == expected


@pytest.mark.parametrize(
    ("flags", "path"),
    [
        ({"avx512f": True, "avx512bw": True, "avx512vl": True, "avx512dq": True, "avx2": True, "fma": True,
          "f16c": True}, "avx512"),
        ({"avx512f": True, "avx512bw": True, "avx512vl": True, "avx512dq": False, "avx2": True, "fma": True,
          "f16c": True}, "avx2"),
        ({"avx512f": True, "avx512bw": False, "avx512vl": True, "avx2": True, "fma": True, "f16c": True}, "avx2"),
        ({"avx2": True, "fma": True, "f16c": False}, "scalar"),
        ({"avx2": True, "fma": True, "f16c": True, "avx_vnni": True}, "avxvnni"),  # Alder Lake, N100
        ({"avx2": True, "fma": True, "f16c": False, "avx_vnni": True}, "scalar"),  # avxvnni is built on avx2
        ({"avx512f": True, "avx512bw": True, "avx512vl": True, "avx512dq": True, "avx2": True, "fma": True,
          "f16c": True, "avx512vnni": True, "avx_vnni": True}, "avx512vnni"),  # Ice Lake server-like, with AVX-VNNI
        ({"avx512f": True, "avx512bw": True, "avx512vl": True, "avx512dq": True, "avx2": True, "fma": True,
          "f16c": True, "avx512vnni": True, "avx_vnni": True, "amx_tile": True, "amx_int8": True},
         "avx512amx"),  # Sapphire Rapids: the widest
        ({"avx512f": True, "avx512bw": True, "avx512vl": True, "avx512dq": True, "avx2": True, "fma": True,
          "f16c": True, "avx512vnni": True, "amx_tile": True, "amx_int8": False}, "avx512vnni"),  # AMX-INT8 needed
        ({"avx2": True, "fma": True, "f16c": True, "amx_tile": True, "amx_int8": True}, "avx2"),  # AMX on avx512vnni only
        ({"avx512f": True, "avx512bw": True, "avx512vl": True, "avx512dq": True, "avx2": True, "fma": True,
          "f16c": True, "avx512vnni": True}, "avx512vnni"),
        ({"neon": True, "fp16": True, "dotprod": False}, "neonfp16"),  # fp16 arithmetic (FHM not needed)
        ({"neon": True, "fp16": True, "dotprod": True}, "neondot"),  # plus the sdot int8 GEMM
        ({"neon": True, "fp16": False, "dotprod": True}, "neon"),  # neondot is built on neonfp16
        ({"neon": True, "fp16": False}, "neon"),
        ({}, "scalar"),
    ],
)
def test_isa_path(flags, path):
    assert native.CpuFeatures("x", "v", "m", flags).isa_path() == path


def test_cpu_features_is_cached_read_only_and_hashable():
    first = native.cpu_features()
    assert native.cpu_features() is first
    with pytest.raises(TypeError):
        first.flags["avx2"] = True  # type: ignore[index]
    assert hash(first) == hash(native.cpu_features())


def test_missing_extension_raises_edgesdk_error(monkeypatch):
    native.cpu_features.cache_clear()
    monkeypatch.setitem(sys.modules, "edgesdk._native", None)  # makes the import fail
    try:
        with pytest.raises(EdgeSDKError, match=r"^edgesdk\._native is not built: reinstall with `pip install \.`"):
            native.cpu_features()
    finally:
        native.cpu_features.cache_clear()
