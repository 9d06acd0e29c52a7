"""`edgesdk devices` and the ISA the cpu backend reports."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from edgesdk import native
from edgesdk.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_isa_path_is_what_the_kernel_dispatch_picks() -> None:
    best = native.supported_isas()[-1]
    assert native.cpu_features().isa_path() == best
    if not os.environ.get("EDGESDK_CPU_ISA"):
        assert native.active_isa() == best


def test_devices_json_lists_cpu_features_and_isa(capsys) -> None:
    assert main(["devices", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    cpu = report["cpu"]
    assert cpu["isa_path"] == native.active_isa() and cpu["supported_isas"] == native.supported_isas()
    assert set(cpu["features"]) == {k for k, v in native.cpu_features().flags.items() if v}
    assert cpu["physical_cores"] >= 1
    assert isinstance(report["opencl"], list)
    assert (report["opencl_note"] is None) == bool(report["opencl"])  # either devices or the reason


def test_devices_text_follows_the_isa_override() -> None:
    env = {**os.environ, "EDGESDK_CPU_ISA": "scalar"}
    out = subprocess.run([sys.executable, "-m", "edgesdk.cli", "devices"], capture_output=True, text=True,
                         cwd=ROOT, env=env, check=True).stdout
    assert "cpu backend kernels: scalar" in out
    assert "opencl" in out.lower()


def test_devices_reports_the_fp16_arithmetic_path(monkeypatch, capsys) -> None:
    """On an aarch64 CPU with FEAT_FP16 the dispatch picks neonfp16 (neondot with the dot
    product too), and `edgesdk devices` says so (the module here is x86, so the native answers
    are stood in for)."""
    flags = {"neon": True, "fp16": True, "fhm": False, "dotprod": False, "i8mm": False, "bf16": False, "sve": False}
    features = native.CpuFeatures("aarch64", "ARM", "implementer 0x41 part 0xd0b", flags)
    assert features.isa_path() == "neonfp16"
    assert native.CpuFeatures("aarch64", "ARM", "m", {**flags, "dotprod": True}).isa_path() == "neondot"
    assert native.CpuFeatures("aarch64", "ARM", "m", {**flags, "fp16": False}).isa_path() == "neon"
    monkeypatch.setattr(native, "cpu_features", lambda: features)
    monkeypatch.setattr(native, "active_isa", lambda: features.isa_path())
    monkeypatch.setattr(native, "supported_isas", lambda: ["scalar", "neon", "neonfp16"])
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    assert "cpu backend kernels: neonfp16 (this CPU runs: scalar, neon, neonfp16;" in out
    assert "features: fp16 neon" in out
