"""The C++ kernel library (cpu_native/src/kernels) checked by its standalone driver
(cpu_native/tests/kernel_tests.cc) against the scalar references: natively with every ISA level
this CPU runs forced in turn, and cross-compiled for aarch64 under qemu-aarch64 (NEON, the
ARMv8.2-A fp16-arithmetic kernels of the neonfp16 level on emulated CPUs that have FEAT_FP16, and the
dot-product int8 GEMM of the neondot level on those that also have FEAT_DotProd). The int8 (qu8)
families are checked bit for bit against a naive int64 reference at every level, the avx512vnni
level included where this CPU has AVX512_VNNI, the avx512amx level where it also has AMX-TILE and
AMX-INT8 (and the OS enables them), and the avxvnni level where it has AVX-VNNI."""
from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from edgesdk import native

from test_native import INSTALL_HINT, require_tool

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "cpu_native" / "src"
KERNELS = SRC / "kernels"
DRIVER = ROOT / "cpu_native" / "tests" / "kernel_tests.cc"
CACHE = ROOT / "tests" / ".cache" / "kernel_tests"

FAMILIES = {"gemm", "conv", "depthwise", "pool", "eltwise", "activation", "softmax", "clustered", "nnm_gather",
            "nonfinite", "f32_winograd", "f32_spmm", "qu8_requant", "qu8_gemm", "qu8_conv", "qu8_igemm_ukernel", "qu8_depthwise", "qu8_eltwise",
            "qu8_pool", "qu8_lut_concat", "qu8_convert", "dwconv_chw", "gavgpool_chw", "transpose"}
# Levels with fp16-arithmetic kernels (neonfp16) also check these.
F16_FAMILIES = {"f16_gemm", "f16_conv", "f16_depthwise", "f16_nonfinite"}
PORTABLE = ["common.cc", "dispatch.cc", "thread_pool.cc", "operators.cc", "operators_qu8.cc", "operators_winograd.cc",
            "operators_sparse.cc", "spmm_scalar.cc",
            "gemm_scalar.cc", "reference_scalar.cc", "qu8_scalar.cc", "winograd_scalar.cc", "operators_chw.cc",
            "chw_scalar.cc"]
# Per-file ISA flags, as in CMakeLists.txt: SIMD code only ever runs after runtime dispatch.
_SKX = ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma", "-mf16c"]
X86_SIMD = {
    "gemm_avx2.cc": ["-mavx2", "-mfma", "-mf16c"],
    "vector_kernels_avx2.cc": ["-mavx2", "-mfma", "-mf16c"],
    "qu8_avx2.cc": ["-mavx2", "-mfma", "-mf16c"],
    "winograd_avx2.cc": ["-mavx2", "-mfma", "-mf16c"],
    "spmm_avx2.cc": ["-mavx2", "-mfma", "-mf16c"],
    "gemm_avx512.cc": ["-mavx512f", "-mfma", "-mf16c"],  # AVX-512 F alone: f32_igemm_8x32__avx512f
    "winograd_avx512.cc": ["-mavx512f", "-mfma", "-mf16c"],  # AVX-512 F alone, as the GEMM it feeds
    "spmm_avx512.cc": ["-mavx512f", "-mfma", "-mf16c"],  # AVX-512 F alone: f32_spmm_*__avx512f
    "vector_kernels_avx512.cc": _SKX,
    "qu8_avx512skx.cc": _SKX,
    "qu8_avx512vnni.cc": [*_SKX, "-mavx512vnni"],  # the avx512vnni level's vpdpbusd GEMM
    "qu8_avx512amx.cc": [*_SKX, "-mavx512vnni", "-mamx-tile", "-mamx-int8"],  # the avx512amx level's tdpbusd GEMM
    "qu8_avxvnni.cc": ["-mavx2", "-mfma", "-mf16c", "-mavxvnni"],  # the avxvnni level's 256-bit vpdpbusd
}
ARM_SIMD = {"gemm_neon.cc": [], "vector_kernels_neon.cc": [], "qu8_neon.cc": [], "winograd_neon.cc": [],
            "spmm_neon.cc": [],
            # the ARMv8.2-A fp16-arithmetic kernels (neonfp16 level), these files only
            "gemm_neonfp16.cc": ["-march=armv8.2-a+fp16"], "depthwise_neonfp16.cc": ["-march=armv8.2-a+fp16"],
            # the ARMv8.2-A dot-product qu8 GEMM (neondot level)
            "qu8_neondot.cc": ["-march=armv8.2-a+dotprod"]}

X86_LINUX = sys.platform == "linux" and platform.machine() == "x86_64"

# Microkernel names (cpu_native/src/kernels/ukernels.h): XNNPACK's <datatype>_<op>_<tile>__<isa>.
# The ISA suffixes each level's kernels may carry, its GEMM tile (MR x NR), and the slots its table
# fills (dispatch.h; neonfp16 adds the fp16-arithmetic ones).
KERNEL_SUFFIXES = {"scalar": {"scalar"}, "avx2": {"avx2"}, "avxvnni": {"avx2", "avxvnni"}, "avx512": {"avx512f", "avx512skx"},
                   "avx512vnni": {"avx512f", "avx512skx", "avx512vnni"},
                   "avx512amx": {"avx512f", "avx512skx", "avx512vnni", "avx512amx"}, "neon": {"neon"},
                   "neonfp16": {"neon", "neonfp16"}, "neondot": {"neon", "neonfp16", "neondot"}}
VECTOR_LANES = {"avx2": 8, "avxvnni": 8, "avx512": 16, "avx512vnni": 16, "avx512amx": 16, "neon": 4, "neonfp16": 4,
                "neondot": 4}
GEMM_TILES = {"scalar": "4x4", "avx2": "6x16", "avxvnni": "6x16", "avx512": "8x32", "avx512vnni": "8x32",
              "avx512amx": "8x32", "neon": "8x8", "neonfp16": "8x8", "neondot": "8x8"}
# The qu8 GEMM of each level: the 16-bit widening ones, and the dot-product ones of the int8 levels.
QU8_GEMMS = {"scalar": "qu8_igemm_4x4__scalar", "avx2": "qu8_igemm_4x16c4__avx2",
             "avxvnni": "qu8_igemm_6x16c4__avxvnni",
             "avx512": "qu8_igemm_8x16c4__avx512skx", "avx512vnni": "qu8_igemm_8x16c4__avx512vnni",
             "avx512amx": "qu8_igemm_16x16c4__avx512amx",
             "neon": "qu8_igemm_4x16__neon", "neonfp16": "qu8_igemm_4x16__neon",
             "neondot": "qu8_igemm_4x16c4__neondot"}
# Levels that are a lower level's table plus a few kernels (dispatch.cc): the slots they change.
EXTENDS = {"avxvnni": ("avx2", {"qu8_igemm", "qu8_igemm_narrow", "qu8_depthwise", "qu8_depthwise_narrow"}),
           "avx512vnni": ("avx512", {"qu8_igemm", "qu8_igemm_x2", "qu8_igemm_narrow", "qu8_depthwise"}),
           "avx512amx": ("avx512vnni", {"qu8_igemm", "qu8_igemm_x2"}),
           "neonfp16": ("neon", {"igemm_f16", "depthwise_f16", "convert_f32_f16"}),
           "neondot": ("neonfp16", {"qu8_igemm"})}
FP32_SLOTS = {"igemm_f32w", "igemm_f16w", "activation", "depthwise", "maxpool", "avgpool", "global_avgpool", "binary",
              "softmax", "clustered_gemv", "clustered_decode", "nnm_gather", "row_norm", "log_softmax", "softmax_axis",
              "reduce", "argreduce", "col2im", "resize_nearest", "resize_linear", "winograd_input", "winograd_output",
              "winograd_weights",
              "spmm_f32_nb1", "spmm_f32_nb2", "spmm_f32_nb4", "spmm_f16w_nb1", "spmm_f16w_nb2", "spmm_f16w_nb4",
              "spmm_cbw_nb1", "spmm_cbw_nb2", "spmm_cbw_nb4", "nonfinite_scan",
              "dwconv_chw", "gavgpool_chw", "transpose_x8", "transpose_f32", "transpose_x64"}
# The sparse 1x1 kernels of 8-row blocks (the spmm_*_nb8 slots): the AVX-512 levels only.
SPMM_NB8_SLOTS = {"spmm_f32_nb8", "spmm_f16w_nb8", "spmm_cbw_nb8"}
SPMM_NB8_LEVELS = {"avx512", "avx512vnni", "avx512amx"}
# The specialised CHW depthwise kernels (3x3 / 5x5, stride 1 / 2): every SIMD level; the scalar level
# runs the generic one for every geometry.
CHW_SLOTS = {"dwconv_chw_3x3s1", "dwconv_chw_3x3s2", "dwconv_chw_5x5s1", "dwconv_chw_5x5s2"}
# Slots every level fills with the portable kernel (dispatch.cc, base_table): the generic CHW depthwise
# convolution (odd geometries) and the 1- and 8-byte transposes.
PORTABLE_SLOTS = {"dwconv_chw", "transpose_x8", "transpose_x64"}
F16_SLOTS = {"igemm_f16", "depthwise_f16", "convert_f32_f16"}
QU8_SLOTS = {"qu8_igemm", "qu8_depthwise", "qu8_maxpool", "qu8_avgpool", "qu8_global_avgpool", "qu8_add", "qu8_mul",
             "qu8_requantize", "qu8_lut"}
F16_LEVELS = {"neonfp16", "neondot"}
# The two-panel qu8 GEMM (the qu8_igemm_x2 slot, ukernels.h): filled where a level has one.
QU8_GEMMS_X2 = {"avx512vnni": "qu8_igemm_8x32c4__avx512vnni", "avx512amx": "qu8_igemm_16x32c4__avx512amx"}
# The vpmaddubsw GEMM for weights whose pairs fit int16 (the qu8_igemm_narrow slot, ukernels.h): the
# levels whose qu8_igemm widens to 16 bits.
QU8_GEMMS_NARROW = {"avx2": "qu8_igemm_narrow_4x16c4__avx2", "avx512": "qu8_igemm_narrow_8x16c4__avx512skx"}
# The fp32 GEMM for weights of at most 16 output channels (the igemm_f32w_narrow slot, dispatch.h):
# the AVX-512 levels, whose igemm_f32w tile is 32 wide.
F32_GEMMS_NARROW = {"avx512": "f32_igemm_8x16__avx512f", "avx512vnni": "f32_igemm_8x16__avx512f",
                    "avx512amx": "f32_igemm_8x16__avx512f"}
# The vpmaddubsw depthwise convolution for weights whose kernel-row pairs fit int16 (the
# qu8_depthwise_narrow slot, qu8_ukernels.h): avx2 (avx512's 16-bit pairs already halve its taps).
QU8_DEPTHWISE_NARROW = {"avx2": "qu8_depthwise_narrow_8c__avx2"}
KERNEL_NAME = re.compile(r"^(?:f32|f16|qu8|x8|x64)_[a-z0-9_]+?(?:_(\d+x\d+c\d+|\d+x\d*|\d+c))?__([a-z0-9]+)$")


def assert_kernel_names(names: dict[str, str], isa: str) -> None:
    """``names`` ({slot: kernel}) is what the ``isa`` level's table should hold."""
    assert set(names) == FP32_SLOTS | QU8_SLOTS | (F16_SLOTS if isa in F16_LEVELS else set()) | \
        (SPMM_NB8_SLOTS if isa in SPMM_NB8_LEVELS else set()) | \
        (CHW_SLOTS if isa != "scalar" else set()) | \
        ({"qu8_igemm_x2"} if isa in QU8_GEMMS_X2 else set()) | \
        ({"qu8_igemm_narrow"} if isa in QU8_GEMMS_NARROW else set()) | \
        ({"igemm_f32w_narrow"} if isa in F32_GEMMS_NARROW else set()) | \
        ({"qu8_depthwise_narrow"} if isa in QU8_DEPTHWISE_NARROW else set()), (isa, names)
    assert len(set(names.values())) == len(names), f"a kernel name twice in {isa}: {names}"
    for slot, name in names.items():
        m = KERNEL_NAME.match(name)
        suffixes = KERNEL_SUFFIXES[isa] | ({"scalar"} if slot in PORTABLE_SLOTS else set())
        assert m and m[2] in suffixes, f"{isa} {slot}: {name!r} is not <datatype>_<op>_<tile>__<isa>"
        if slot.startswith("spmm_"):  # MR pixels x NB rows, a register tile like the GEMM's
            assert m[1] is not None and m[1].endswith(f"x{slot[-1]}"), f"{isa} {slot}: {name!r}"
        elif m[1] is not None and "igemm" not in slot and "transpose" not in slot:  # N elements or channels: whole vectors
            assert isa != "scalar" and int(m[1].rstrip("xc")) % VECTOR_LANES[isa] == 0, f"{isa} {slot}: {name!r}"
    assert names["igemm_f32w"].startswith(f"f32_igemm_{GEMM_TILES[isa]}__"), names["igemm_f32w"]
    assert names["igemm_f16w"].startswith(f"f32_f16w_igemm_{GEMM_TILES[isa]}__"), names["igemm_f16w"]
    if isa in F16_LEVELS:
        assert names["igemm_f16"] == "f16_f32acc_igemm_4x16__neonfp16", names
    assert names["qu8_igemm"] == QU8_GEMMS[isa], names
    assert names.get("qu8_igemm_x2") == QU8_GEMMS_X2.get(isa), names
    assert names.get("qu8_igemm_narrow") == QU8_GEMMS_NARROW.get(isa), names
    assert names.get("igemm_f32w_narrow") == F32_GEMMS_NARROW.get(isa), names
    assert names.get("qu8_depthwise_narrow") == QU8_DEPTHWISE_NARROW.get(isa), names
    for slot in QU8_SLOTS:
        assert names[slot].startswith(f"qu8_{slot[4:]}_"), (slot, names[slot])
    assert names["dwconv_chw"] == "f32_dwconv2d_chw__scalar", names  # the generic one, on every level
    for slot in CHW_SLOTS & set(names):
        assert names[slot].startswith(f"f32_dwconv2d_chw_{slot.split('_')[-1]}__"), (slot, names[slot])
    if isa != "scalar":  # W x W register tiles
        lanes = VECTOR_LANES[isa]
        assert names["transpose_f32"].startswith(f"f32_transpose_{lanes}x{lanes}__"), names["transpose_f32"]


def reported_kernel_names(output: str, isa: str) -> dict[str, str]:
    """{slot: kernel} from the driver's "KERNELS <isa> slot=name ..." line."""
    m = re.search(rf"^KERNELS {isa} (.*)$", output, re.M)
    assert m, f"no KERNELS line for {isa}\n{output}"
    return dict(item.split("=", 1) for item in m[1].split())


def _sources_digest(cxx: str, simd: dict[str, list[str]]) -> str:
    h = hashlib.sha256(cxx.encode())
    for path in sorted([*SRC.glob("*.h"), *SRC.glob("*.cc"), *KERNELS.iterdir(), DRIVER]):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    h.update(repr(sorted(simd.items())).encode())
    return h.hexdigest()[:16]


def build_driver(cxx: str, simd: dict[str, list[str]], extra: list[str], tag: str) -> Path:
    """Compiles the driver (objects in parallel, two at a time) into the test cache, keyed by a
    digest of every source so an unchanged tree is not rebuilt. One build per tag at a time: a
    second pytest-xdist worker waits for the first and reuses its binary (two concurrent builds
    wrote the same objects, and a link could still hold the file another worker executed: ETXTBSY)."""
    import fcntl  # POSIX only, like every caller (x86-64 Linux)

    out_dir = CACHE / f"{tag}-{_sources_digest(cxx, simd)}"
    exe = out_dir / "kernel_tests"
    if exe.exists():
        return exe
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{tag}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not exe.exists():
            _build_driver_locked(cxx, simd, extra, tag, out_dir, exe)
    return exe


def _build_driver_locked(cxx: str, simd: dict[str, list[str]], extra: list[str], tag: str, out_dir: Path,
                         exe: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in CACHE.glob(f"{tag}-*"):  # builds of older sources
        if stale != out_dir:
            shutil.rmtree(stale, ignore_errors=True)
    units = [(KERNELS / f, []) for f in PORTABLE] + [(KERNELS / f, flags) for f, flags in simd.items()]
    units += [(SRC / "cpu_features.cc", []), (DRIVER, [])]

    def compile_one(unit: tuple[Path, list[str]]) -> Path:
        src, flags = unit
        obj = out_dir / (src.name + ".o")
        cmd = [cxx, "-std=c++17", "-O2", "-Wall", "-Wextra", f"-I{SRC}", *flags, "-c", str(src), "-o", str(obj)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stderr}"
        return obj

    with ThreadPoolExecutor(max_workers=2) as pool:
        objects = list(pool.map(compile_one, units))
    tmp = out_dir / "kernel_tests.tmp"
    cmd = [cxx, *extra, "-o", str(tmp), *map(str, objects), "-pthread"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stderr}"
    os.replace(tmp, exe)  # atomic: a parallel worker never sees a half-written binary


def run_driver(*cmd: object, env: dict[str, str] | None = None) -> tuple[int, str]:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=600, env=env)
    return proc.returncode, proc.stdout + proc.stderr


def verdicts(output: str) -> dict[tuple[str, str], str]:
    """{(family, isa): "PASS" | "FAIL"} from the driver's report lines."""
    return {(fam, isa): status for status, fam, isa in re.findall(r"^(PASS|FAIL) (\w+) (\S+)", output, re.M)}


def assert_all_families_pass(output: str, isa: str, families: set[str] = FAMILIES) -> None:
    got = verdicts(output)
    failures = [line for line in output.splitlines() if line.startswith("FAIL")]
    assert not failures, "kernel mismatches:\n" + "\n".join(failures)
    missing = {fam for fam in families if got.get((fam, isa)) != "PASS"}
    assert not missing, f"families not reported checked for {isa}: {sorted(missing)}\n{output}"
    assert got.get(("thread_pool", "any")) == "PASS", output
    assert_kernel_names(reported_kernel_names(output, isa), isa)


def expected_x86_isas() -> list[str]:
    flags = native.cpu_features().flags
    isas = ["scalar"]
    if all(flags.get(f) for f in ("avx2", "fma", "f16c")):
        isas.append("avx2")
        if flags.get("avx_vnni"):
            isas.append("avxvnni")
        if all(flags.get(f) for f in ("avx512f", "avx512bw", "avx512vl", "avx512dq")):
            isas.append("avx512")
            if flags.get("avx512vnni"):
                isas.append("avx512vnni")
                # (and Linux grants the process the tile data state: dispatch.cc, amx_permitted)
                if flags.get("amx_tile") and flags.get("amx_int8"):
                    isas.append("avx512amx")
    return isas


@pytest.fixture(scope="module")
def native_driver() -> Path:
    if not X86_LINUX:
        pytest.skip("the native driver build here assumes an x86-64 Linux host")
    return build_driver(require_tool("g++", "install a C++17 compiler"), X86_SIMD, [], "x86_64")


@pytest.mark.skipif(not X86_LINUX, reason="x86-64 Linux host")
def test_native_driver_reports_the_isas_this_cpu_runs(native_driver):
    code, out = run_driver(native_driver, "--isa", "scalar")
    assert code == 0, out
    supported = re.search(r"^supported isas: (.*)$", out, re.M)[1].split()
    assert supported == expected_x86_isas()


@pytest.mark.skipif(not X86_LINUX, reason="x86-64 Linux host")
@pytest.mark.parametrize("isa", ["scalar", "avx2", "avxvnni", "avx512", "avx512vnni", "avx512amx"])
def test_native_kernels_match_scalar_reference(native_driver, isa):
    if isa not in expected_x86_isas():
        pytest.skip(f"this CPU cannot run the {isa} kernels (they are compiled, not executed)")
    code, out = run_driver(native_driver, "--isa", isa)
    assert code == 0, out
    assert_all_families_pass(out, isa)
    assert re.search(rf"^checked isas: {isa}$", out, re.M), out


@pytest.mark.skipif(not X86_LINUX, reason="x86-64 Linux host")
def test_forcing_an_isa_the_cpu_lacks_fails_cleanly(native_driver):
    missing = [isa for isa in ("avx512", "neon") if isa not in expected_x86_isas()]
    env = {**os.environ, "EDGESDK_CPU_ISA": missing[0]}
    code, out = run_driver(native_driver, env=env)
    assert code == 2 and f"FAIL setup {missing[0]}" in out, out


@pytest.fixture(scope="module")
def aarch64_driver() -> Path:
    if not X86_LINUX:
        pytest.skip("cross-compiles from an x86-64 Linux host")
    cxx = require_tool("aarch64-linux-gnu-g++", INSTALL_HINT)
    return build_driver(cxx, ARM_SIMD, ["-static"], "aarch64")


def require_qemu_cpu(cpu: str) -> str:
    qemu = require_tool("qemu-aarch64", INSTALL_HINT)
    listed = subprocess.run([qemu, "-cpu", "help"], capture_output=True, text=True).stdout.split()
    assert cpu in listed, f"this qemu-aarch64 does not emulate {cpu}: {INSTALL_HINT}"
    return qemu


@pytest.mark.skipif(not X86_LINUX, reason="cross-compiles from an x86-64 Linux host")
@pytest.mark.parametrize(("cpu", "isas"), [
    # FEAT_FP16, FHM and DotProd: every level, neonfp16 and neondot (the sdot qu8 GEMM) included.
    ("max", ["scalar", "neon", "neonfp16", "neondot"]),
    # Plain ARMv8.0: no fp16 arithmetic and no dot product, so no neonfp16 or neondot level and no
    # f16 family run; the qu8 families run the 16-bit widening NEON GEMM.
    ("cortex-a53", ["scalar", "neon"]),
])
def test_neon_kernels_under_qemu(aarch64_driver, cpu, isas):
    qemu = require_qemu_cpu(cpu)
    code, out = run_driver(qemu, "-cpu", cpu, aarch64_driver)
    assert code == 0, out
    assert re.search(rf"^supported isas: {' '.join(isas)}$", out, re.M), out
    assert re.search(rf"^checked isas: {' '.join(isas)}$", out, re.M), out
    for isa in isas:
        assert_all_families_pass(out, isa, FAMILIES | (F16_FAMILIES if isa in F16_LEVELS else set()))
    f16_checked = {isa for (fam, isa) in verdicts(out) if fam in F16_FAMILIES}
    assert f16_checked == (F16_LEVELS & set(isas)), out
    if "neondot" in isas:  # the sdot kernel, not the widening one, ran the qu8 families there
        assert reported_kernel_names(out, "neondot")["qu8_igemm"] == "qu8_igemm_4x16c4__neondot", out
    for level in ("neonfp16", "neondot"):
        if level not in isas:  # forcing it fails cleanly instead of running into SIGILL
            env = {**os.environ, "EDGESDK_CPU_ISA": level}
            code, out = run_driver(qemu, "-cpu", cpu, aarch64_driver, env=env)
            assert code == 2 and f"FAIL setup {level} this CPU cannot run the {level} kernels" in out, out


@pytest.mark.skipif(not X86_LINUX, reason="cross-compiles from an x86-64 Linux host")
def test_neonfp16_kernels_need_no_fhm(aarch64_driver):
    """Cortex-A76 (as Neoverse N1, A55, A75, A77, A78) has FEAT_FP16 but not FEAT_FHM (FMLAL): the
    neonfp16 level must be chosen there and its kernels must not use FHM instructions (qemu raises
    SIGILL on an instruction the emulated CPU lacks)."""
    qemu = require_qemu_cpu("cortex-a76")
    # (Cortex-A76 has FEAT_DotProd too: the neondot level, neonfp16 plus the sdot qu8 GEMM.)
    for level in ("neonfp16", "neondot"):
        env = {**os.environ, "EDGESDK_CPU_ISA": level}
        code, out = run_driver(qemu, "-cpu", "cortex-a76", aarch64_driver, env=env)
        assert code == 0, out
        assert re.search(r"^supported isas: scalar neon neonfp16 neondot$", out, re.M), out
        assert re.search(rf"^checked isas: {level}$", out, re.M), out
        assert_all_families_pass(out, level, FAMILIES | F16_FAMILIES)


# ---- the Python bindings (edgesdk._native.kernels) ------------------------------------------------

@pytest.fixture(scope="module")
def kernels():
    import edgesdk._native as ext

    return ext.kernels


def test_bindings_gemm_and_fp16_weights(kernels):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((37, 70), dtype=np.float32)
    w = rng.standard_normal((19, 70), dtype=np.float32)
    b = rng.standard_normal(19, dtype=np.float32)
    out = np.empty((37, 19), np.float32)
    kernels.gemm(a, kernels.pack_gemm(w, b), out, act="relu", threads=2)
    np.testing.assert_allclose(out, np.maximum(a @ w.T + b, 0), rtol=1e-4, atol=1e-4)
    half = kernels.pack_gemm(w.T.copy().astype(np.float16), b, layout="kn", fp16=True)
    assert half.fp16 and (half.n, half.k) == (19, 70)
    kernels.gemm(a, half, out)
    np.testing.assert_allclose(out, a @ w.astype(np.float16).astype(np.float32).T + b, rtol=1e-4, atol=1e-4)


def test_bindings_kernel_names(kernels):
    """kernel_names(isa): the microkernel in every slot of a level's table, for each level compiled in
    here (run or not by this CPU); the GEMM tile in the name is the one the packed weights use. A level
    that extends another (avxvnni, avx512vnni, avx512amx, neonfp16, neondot) differs from it in its own slots only."""
    compiled = ["scalar", "avx2", "avxvnni", "avx512", "avx512vnni", "avx512amx"] \
        if platform.machine() in ("x86_64", "AMD64") else \
        ["scalar", "neon", "neonfp16", "neondot"]
    assert kernels.kernel_names() == kernels.kernel_names(kernels.active_isa())
    for isa in compiled:
        names = kernels.kernel_names(isa)
        assert_kernel_names(names, isa)
        if isa in EXTENDS:
            base, changed = EXTENDS[isa]
            base_names = kernels.kernel_names(base)
            assert {s for s in names | base_names if names.get(s) != base_names.get(s)} == changed, (isa, names, base_names)
        if isa in kernels.supported_isas():
            packed = kernels.pack_gemm(np.ones((40, 4), np.float32), isa=isa)
            assert f"x{packed.nr}__" in names["igemm_f32w"] and packed.isa == isa, (names, packed.nr)
            few = kernels.pack_gemm(np.ones((3, 4), np.float32), isa=isa)  # 3 outputs: the narrow tile if any
            assert f"x{few.nr}__" in names.get("igemm_f32w_narrow", names["igemm_f32w"]), (names, few.nr)
            qpacked = kernels.pack_qu8_conv(np.full((3, 4), 127, np.int8), None, 0, np.full(3, 1 << 30, np.int32),
                                            np.zeros(3, np.int32), 0, isa=isa)
            assert qpacked.kernel_name == names["qu8_igemm"] and f"x{qpacked.nr}" in qpacked.kernel_name, qpacked
    assert kernels.kernel_names("scalar")["igemm_f32w"] == "f32_igemm_4x4__scalar"
    with pytest.raises(ValueError, match="unknown ISA"):
        kernels.kernel_names("sse2")
    other = "neon" if compiled[1] == "avx2" else "avx2"
    with pytest.raises(RuntimeError, match="not compiled in"):
        kernels.kernel_names(other)


def test_bindings_reject_copies(kernels):
    p = kernels.pack_gemm(np.ones((3, 4), np.float32))
    with pytest.raises(TypeError, match="float32"):
        kernels.gemm(np.ones((2, 4)), p, np.empty((2, 3), np.float32))  # float64 would need a copy
    with pytest.raises(ValueError, match="C-contiguous"):
        kernels.gemm(np.ones((4, 2), np.float32).T, p, np.empty((2, 3), np.float32))
    with pytest.raises(ValueError, match="shape"):
        kernels.gemm(np.ones((2, 4), np.float32), p, np.empty((3, 3), np.float32))


def test_bindings_conv_matches_numpy(kernels):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 9, 8, 5), dtype=np.float32)
    w = rng.standard_normal((7, 3, 3, 5), dtype=np.float32)  # OHWI
    b = rng.standard_normal(7, dtype=np.float32)
    plan = kernels.ConvPlan(kernels.pack_gemm(w.reshape(7, -1), b), [2, 9, 8, 5], (3, 3), (2, 2), (1, 1), [1, 1, 1, 1])
    out = np.empty(plan.output_shape, np.float32)
    plan.run(x, out, act="hardswish", threads=2)
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    want = np.empty_like(out)
    for oy in range(out.shape[1]):
        for ox in range(out.shape[2]):
            patch = xp[:, 2 * oy:2 * oy + 3, 2 * ox:2 * ox + 3, :].reshape(2, -1)
            want[:, oy, ox] = patch @ w.reshape(7, -1).T + b
    want = want * np.clip(want / 6 + 0.5, 0, 1)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
    # OIHW filters packed with window=KH*KW: the same plan, the same bits.
    oihw = np.ascontiguousarray(w.transpose(0, 3, 1, 2))
    for isa in kernels.supported_isas():
        want_plan = kernels.ConvPlan(kernels.pack_gemm(w.reshape(7, -1), b, isa=isa), [2, 9, 8, 5], (3, 3), (2, 2),
                                     (1, 1), [1, 1, 1, 1])
        plan = kernels.ConvPlan(kernels.pack_gemm(oihw.reshape(7, -1), b, isa=isa, window=9), [2, 9, 8, 5], (3, 3),
                                (2, 2), (1, 1), [1, 1, 1, 1])
        want_plan.run(x, want, act="none", threads=1)
        plan.run(x, out, act="none", threads=1)
        assert out.tobytes() == want.tobytes(), isa
    for window, layout in ((0, "nk"), (4, "nk"), (9, "kn")):
        with pytest.raises(ValueError, match="window must divide the columns of 'nk' weights"):
            kernels.pack_gemm(oihw.reshape(7, -1), b, layout=layout, window=window)


@pytest.mark.parametrize("n", [7, 16, 19, 70])  # the narrow 16-wide tile, tails, several panels
@pytest.mark.parametrize("fp16", [False, True])
def test_hardswish_in_the_gemm_epilogue_is_the_post_pass_bit_for_bit(kernels, n, fp16):
    """Levels whose GEMM kernels apply HardSwish themselves (kGemmHardSwish) give the bits the
    activation kernel gives after a plain GEMM, NaN and infinities included (-inf -> NaN), on the
    plain GEMM (several K blocks: K 600) and the indirect convolution, at every level this CPU runs."""
    rng = np.random.default_rng(n)
    a = rng.standard_normal((45, 600), dtype=np.float32) * 2
    a[3, 5], a[7, :] = np.nan, 0.0
    w = rng.standard_normal((n, 600), dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32) * 4
    b[0], b[-1] = np.inf, -np.inf  # +inf -> inf, -inf -> NaN in their columns
    x = rng.standard_normal((1, 9, 11, 6), dtype=np.float32)
    x[0, 4, 5, 2] = np.inf
    wc = rng.standard_normal((n, 3, 3, 6), dtype=np.float32)
    for isa in kernels.supported_isas():
        kernels.set_isa(isa)
        try:
            packed = kernels.pack_gemm(w.T.copy().astype(np.float16), b, layout="kn", fp16=True) if fp16 \
                else kernels.pack_gemm(w, b)
            fused, plain = np.empty((45, n), np.float32), np.empty((45, n), np.float32)
            kernels.gemm(a, packed, fused, act="hardswish")
            kernels.gemm(a, packed, plain)
            kernels.activation(plain, "hardswish")
            np.testing.assert_array_equal(fused.view(np.uint32), plain.view(np.uint32), err_msg=isa)
            assert np.isnan(fused[:, -1]).all() and np.isposinf(fused[7, 0]), isa
            plan = kernels.ConvPlan(kernels.pack_gemm(wc.reshape(n, -1), b), [1, 9, 11, 6], (3, 3), (1, 1), (1, 1),
                                    [1, 1, 1, 1])
            fused, plain = np.empty(plan.output_shape, np.float32), np.empty(plan.output_shape, np.float32)
            plan.run(x, fused, act="hardswish")
            plan.run(x, plain)
            kernels.activation(plain, "hardswish")
            np.testing.assert_array_equal(fused.view(np.uint32), plain.view(np.uint32), err_msg=isa)
        finally:
            kernels.reset_isa()


def depthwise_reference(x, w, b, stride, pad):
    """NHWC depthwise convolution (multiplier 1, symmetric zero padding) through the reference
    backend's depthwise path, in float64."""
    from edgesdk.ops.conv import _depthwise, pad_spatial

    kh, kw, c = w.shape
    xp = pad_spatial(x.transpose(0, 3, 1, 2).astype(np.float64), [pad] * 4)
    oh, ow = (xp.shape[2] - kh) // stride + 1, (xp.shape[3] - kw) // stride + 1
    out = _depthwise(xp, w.transpose(2, 0, 1)[:, None].astype(np.float64), (stride, stride), (1, 1), (oh, ow))
    return (out + b.reshape(1, c, 1, 1)).transpose(0, 2, 3, 1)


@pytest.mark.parametrize("kernel, stride", [(5, 1), (5, 2), (3, 1), (3, 2)])
def test_depthwise_border_blocks_on_narrow_rows(kernels, kernel, stride):
    """Every row width from 1 to 16 (MobileNetV3's 5x5 layers at 14x14 and 7x7 take the narrow-row
    block and the border blocks filled up with spare pixels), a channel tail, at every level this
    CPU runs."""
    rng = np.random.default_rng(kernel * 10 + stride)
    c = 21
    w = rng.standard_normal((kernel, kernel, c), dtype=np.float32)
    b = rng.standard_normal(c, dtype=np.float32)
    pad = kernel // 2
    for width in range(1, 17):
        x = rng.standard_normal((1, 5, width, c), dtype=np.float32)
        want = depthwise_reference(x, w, b, stride, pad)
        for isa in kernels.supported_isas():
            kernels.set_isa(isa)
            try:
                out = np.empty(want.shape, np.float32)
                kernels.depthwise_conv(x, w, b, out, (stride, stride), (1, 1), [pad] * 4, "none", None, None, 1,
                                       False)
            finally:
                kernels.reset_isa()
            np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5, err_msg=f"{isa} width {width}")


def test_bindings_softmax_eltwise_pool(kernels):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 1000), dtype=np.float32) * 20
    out = np.empty_like(x)
    kernels.softmax(x, out)
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(-1, keepdims=True), rtol=1e-4, atol=1e-9)
    a = rng.standard_normal((2, 3, 3, 17), dtype=np.float32)
    ch = rng.standard_normal(17, dtype=np.float32)
    y = np.empty_like(a)
    kernels.binary("sub", a, ch, y, b_first=True, act="relu")
    np.testing.assert_allclose(y, np.maximum(ch - a, 0), rtol=1e-6)
    img = rng.standard_normal((1, 7, 7, 3), dtype=np.float32)
    pooled = np.empty((1, 3, 3, 3), np.float32)
    kernels.max_pool(img, pooled, (3, 3), (2, 2))
    want = np.stack([[img[0, 2 * i:2 * i + 3, 2 * j:2 * j + 3].max((0, 1)) for j in range(3)] for i in range(3)])
    np.testing.assert_allclose(pooled[0], want)


def test_bindings_clustered_and_nnm(kernels):
    from edgesdk.compress.bitpack import pack_bits

    rng = np.random.default_rng(3)
    for bits, rows, cols, per_channel in [(4, 33, 200, False), (3, 5, 77, True), (8, 4, 65, False)]:
        idx = rng.integers(0, 1 << bits, size=(rows, cols))
        book = rng.standard_normal((rows if per_channel else 1, 1 << bits), dtype=np.float32)
        dense = book[np.arange(rows)[:, None] if per_channel else 0, idx]
        packed = kernels.pack_clustered(pack_bits(idx, bits), bits, rows, cols, book)
        for m in (1, 5):
            x = rng.standard_normal((m, cols), dtype=np.float32)
            out = np.empty((m, rows), np.float32)
            kernels.clustered_gemm(x, packed, out, threads=2)
            np.testing.assert_allclose(out, x @ dense.T, rtol=1e-4, atol=1e-4)
    cent = rng.standard_normal((6, 6, 3 * 4), dtype=np.float32)  # 3 groups of K' = 4 centroid maps
    assign = rng.integers(0, 4, size=(3, 10)).astype(np.int32)
    out = np.empty((6, 6, 10), np.float32)
    kernels.nnm_gather(cent, assign, None, out)
    want = sum(cent[..., g * 4 + assign[g]] for g in range(3))
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


def test_bindings_fp16_arith_only_where_the_table_has_it(kernels):
    """pack_gemm(fp16_arith=True) packs for the fp16-arithmetic kernel on levels that have one
    (neonfp16) and falls back to fp16 weights in fp32 arithmetic elsewhere; the same for
    depthwise_conv(fp16_arith=True)."""
    rng = np.random.default_rng(4)
    a = rng.standard_normal((9, 40), dtype=np.float32)
    w = rng.standard_normal((21, 40), dtype=np.float32)
    packed = kernels.pack_gemm(w.astype(np.float16), None, fp16=True, fp16_arith=True)
    arith = kernels.active_isa() == "neonfp16"
    assert packed.fp16 and packed.fp16_arith == arith
    assert not kernels.pack_gemm(w, None, fp16=False, fp16_arith=True).fp16_arith  # fp32 weights: never
    out = np.empty((9, 21), np.float32)
    kernels.gemm(a, packed, out)
    a_used = a.astype(np.float16).astype(np.float32) if arith else a
    want = a_used @ w.astype(np.float16).astype(np.float32).T
    np.testing.assert_allclose(out, want, rtol=2e-2 if arith else 1e-4, atol=2e-2 if arith else 1e-4)
    x = rng.standard_normal((1, 6, 5, 7), dtype=np.float32)
    dw = rng.standard_normal((3, 3, 7), dtype=np.float32).astype(np.float16).astype(np.float32)
    y16, y32 = np.empty((1, 6, 5, 7), np.float32), np.empty((1, 6, 5, 7), np.float32)
    kernels.depthwise_conv(x, dw, None, y16, pads=[1, 1, 1, 1], fp16_arith=True)
    kernels.depthwise_conv(x, dw, None, y32, pads=[1, 1, 1, 1])
    np.testing.assert_allclose(y16, y32, rtol=1e-2 if arith else 0, atol=1e-2 if arith else 0)


def test_bindings_isa_override(kernels):
    assert kernels.active_isa() == kernels.supported_isas()[-1]
    kernels.set_isa("scalar")
    try:
        assert kernels.active_isa() == "scalar"
        assert kernels.pack_gemm(np.ones((3, 4), np.float32)).isa == "scalar"
    finally:
        kernels.reset_isa()
    with pytest.raises(ValueError, match="unknown ISA"):
        kernels.set_isa("sse9")
