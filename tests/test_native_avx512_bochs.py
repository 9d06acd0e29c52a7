"""The AVX-512 kernels (cpu_native/src/kernels/*_avx512*.cc), which this machine's CPU and qemu-user
may not run, checked against the scalar references on an emulated AVX-512 CPU: a minimal Linux
booted under Bochs (corei7_skylake_x) runs the standalone driver forced to the avx512 level
(tools/avx512_under_bochs.py, its --quick case set: about 35 s on two cores, 17 of them booting;
the first run also builds the static driver and downloads a Debian kernel package). Skylake-X has
AVX-512 F/BW/VL/DQ but no VNNI: the int8 (qu8) families run the avx512 level's AVX-512BW GEMM
(qu8_igemm_8x16c4__avx512skx, 16-bit widening), and the avx512vnni level is not offered there."""
from __future__ import annotations

import importlib.util
import platform
import re
import sys
from pathlib import Path

import pytest

from test_native_kernels import FAMILIES, assert_kernel_names, reported_kernel_names

ROOT = Path(__file__).resolve().parents[1]
X86_LINUX = sys.platform == "linux" and platform.machine() == "x86_64"


def load_harness():
    spec = importlib.util.spec_from_file_location("avx512_under_bochs", ROOT / "tools" / "avx512_under_bochs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.skipif(not X86_LINUX, reason="builds a static x86-64 driver and boots it under Bochs")
def test_avx512_kernels_under_bochs():
    harness = load_harness()
    problems = harness.environment_problems()
    if problems:  # missing tools fail (with the fix), they do not skip: CI must run this
        pytest.fail(f"{problems[0]}: run `make test`, which installs them, or "
                    f"`apt-get install -y {harness.APT_PACKAGES}`")
    result = harness.run(["--quick"], timeout=480, echo=False)
    log = f"serial console:\n{result.serial[-6000:]}"
    assert not result.timed_out, f"Bochs did not finish in {result.seconds:.0f} s\n{log}"
    assert {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= result.cpu_flags, \
        f"the emulated CPU does not report AVX-512: {sorted(result.cpu_flags)}\n{log}"
    failures = [ln for ln in result.serial.splitlines() if ln.startswith("FAIL")]
    assert not failures, "AVX-512 kernel mismatches under Bochs:\n" + "\n".join(failures)
    verdicts = result.verdicts
    missing = sorted(fam for fam in FAMILIES if verdicts.get((fam, "avx512")) != "PASS")
    assert not missing, f"families not reported checked at avx512: {missing}\n{log}"
    assert verdicts.get(("thread_pool", "any")) == "PASS", log
    assert re.search(r"^supported isas: scalar avx2 avx512$", result.serial, re.M), log
    names = reported_kernel_names(result.serial, "avx512")
    assert_kernel_names(names, "avx512")
    assert names["qu8_igemm"] == "qu8_igemm_8x16c4__avx512skx", names  # no vpdpbusd on Skylake-X
    assert not {"avx512_vnni", "avx512vnni"} & result.cpu_flags, sorted(result.cpu_flags)  # /proc/cpuinfo spelling
    assert result.exit_status == 0, f"kernel_tests exit status {result.exit_status}\n{log}"
    assert not result.problems(set(FAMILIES)), result.problems(set(FAMILIES))
