#!/usr/bin/env python3
"""Runs the AVX-512 kernels of the C++ kernel library on an emulated AVX-512 CPU (Bochs).

Neither this machine's CPU nor qemu-user runs AVX-512; Bochs (Debian's bochs package, built with
EVEX support) emulates it, but only as a whole PC. So this boots a minimal Linux under Bochs with
the CPU model corei7_skylake_x (AVX-512 F/CD/BW/DQ/VL: what the avx512 level needs; no VNNI, so the
int8 families run the level's AVX-512BW qu8 kernels, not the avx512vnni level's vpdpbusd GEMM) and
runs the standalone kernel driver (cpu_native/tests/kernel_tests.cc) forced to that level in it:

1. builds a static x86-64 kernel_tests (tests/test_native_kernels.build_driver, tag bochs-x86_64)
   and a static /init (cpu_native/tests/bochs_init.c);
2. takes a Debian kernel bzImage out of its .deb (``apt-get download`` + ``dpkg-deb -x``; nothing
   is installed on the host): the linux-image-6.1.0-NN-cloud-amd64 that linux-image-cloud-amd64
   of this Debian release depends on (the cloud flavour: few drivers to probe, the shortest boot);
3. writes a newc initramfs (/init, /kernel_tests, /dev/console, /dev, /proc) and an El Torito ISO
   with isolinux (xorriso) whose kernel command line passes the driver's arguments to /init;
4. boots it under Bochs (serial console to a file, ``clock: sync=none``: emulated time follows
   the instruction count, so a loaded host only makes the run longer) and follows the serial log:
   /init prints the guest CPU's /proc/cpuinfo flags, the driver's report and the sentinel
   ``EDGESDK-BOCHS-EXIT <status>``, then powers the machine off;
5. exits 0 only when the sentinel says 0, the guest CPU has avx512f/bw/vl/dq and every kernel
   family has a PASS line at avx512 (and no FAIL line); 1 otherwise; 2 for a missing tool.

Everything is cached under tests/.cache/bochs (the kernel by package name, the ISO by a digest of
its contents) and tests/.cache/kernel_tests (the driver by a digest of its sources), so a rerun
with unchanged sources only boots. Usage:

    .venv/bin/python tools/avx512_under_bochs.py [--quick] [--timeout S] [-- DRIVER ARGS]

--quick runs ``kernel_tests --quick`` (every family and activation, GEMM up to M = 17, no thread
pool stress), as tests/test_native_avx512_bochs.py does. Quirks of Bochs 2.7 worked around here:

* Debian's build has its debugger compiled in (it stops at a prompt before the first instruction:
  a command file says "continue") and no nogui display library (rfb, told not to wait for a
  viewer, is just as headless).
* Its CPUID leaf 0xD is wrong for PKRU (sub-leaf 9 reads all zeros: an "#if BX_SUPPPORT_PKEYS"
  typo) and for the compacted XSAVE size (sub-leaf 1 EBX gives the standard-format size), so
  Linux finds the XSAVE layout inconsistent and turns XSAVE (and with it AVX and AVX-512) off.
  ``clearcpuid=pku,xsaves,xsavec`` on the kernel command line keeps PKRU out of the kernel's
  XSAVE set and the kernel on the standard format, which Bochs reports correctly.
* With the tigerlake model the kernel (6.1, cloud) stops booting right after "LSM: Security
  Framework initializing": its first page fault enters a handler that is not kernel code (Bochs'
  debugger shows the #PF vector's target holding data), and it faults forever. corei7_skylake_x
  boots; --cpu tigerlake is there to try again with another Bochs.
"""
from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
CACHE = TESTS / ".cache" / "bochs"
INIT_SOURCE = ROOT / "cpu_native" / "tests" / "bochs_init.c"
BXSHARE = Path(os.environ.get("BXSHARE", "/usr/share/bochs"))
ISOLINUX_BIN = Path("/usr/lib/ISOLINUX/isolinux.bin")
LDLINUX_C32 = Path("/usr/lib/syslinux/modules/bios/ldlinux.c32")

KERNEL_META_PACKAGE = "linux-image-cloud-amd64"
CPU_MODEL = "corei7_skylake_x"
# Emulated instructions per emulated second. Waits measured in emulated time (the BIOS' IDE
# probe, timer ticks) cost fewer host seconds the lower this is.
IPS = 50_000_000
# The flags the avx512 level needs (cpu_features.cc), as /proc/cpuinfo spells them.
REQUIRED_FLAGS = ("avx512f", "avx512bw", "avx512vl", "avx512dq")
# Serial console, the XSAVE work-around (see above), and no work the test does not need: no crypto
# self-tests (they took 20 of the 50 s the boot took), no KASLR, no speculation mitigations, no
# delay-loop calibration, no TSC watchdog, one CPU.
CMDLINE = ("console=ttyS0,115200 quiet cryptomgr.notests=1 nokaslr mitigations=off lpj=1000000 tsc=reliable "
           "no_timer_check nosmp panic=-1 random.trust_cpu=on clearcpuid=pku,xsaves,xsavec")
SENTINEL = re.compile(r"^EDGESDK-BOCHS-EXIT (-?\d+)\s*$", re.M)
APT_PACKAGES = "bochs bochsbios vgabios xorriso isolinux syslinux-common build-essential"


class EnvironmentProblem(Exception):
    """A tool or file this harness needs is missing (the message names its Debian package)."""


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---- environment ----------------------------------------------------------------------------------

def environment_problems() -> list[str]:
    """One line per missing tool or file, naming its Debian package; empty when all is there."""
    problems = []
    for tool, package in [("bochs-bin", "bochs"), ("xorriso", "xorriso"), ("gcc", "build-essential"),
                          ("g++", "build-essential"), ("apt-get", "apt"), ("apt-cache", "apt"),
                          ("dpkg-deb", "dpkg")]:
        if shutil.which(tool) is None:
            problems.append(f"{tool} not found (Debian package {package})")
    for path, package in [(BXSHARE / "BIOS-bochs-latest", "bochsbios"), (BXSHARE / "VGABIOS-lgpl-latest", "vgabios"),
                          (ISOLINUX_BIN, "isolinux"), (LDLINUX_C32, "syslinux-common")]:
        if not path.is_file():
            problems.append(f"{path} not found (Debian package {package})")
    return problems


def _run(cmd: list[str], what: str, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed ({' '.join(map(str, cmd))}):\n{proc.stdout}{proc.stderr}")
    return proc


def _digest(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for p in parts:
        b = p.encode() if isinstance(p, str) else p
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()[:16]


def _prune(parent: Path, prefix: str, keep: Path) -> None:
    for stale in parent.glob(f"{prefix}*"):
        if stale != keep:
            if stale.is_dir():
                shutil.rmtree(stale, ignore_errors=True)
            else:
                stale.unlink(missing_ok=True)


def _test_module():
    """tests/test_native_kernels (its build_driver, X86_SIMD and FAMILIES)."""
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    import test_native_kernels

    return test_native_kernels


def families() -> set[str]:
    return set(_test_module().FAMILIES)


# ---- the guest's programs -------------------------------------------------------------------------

def build_kernel_tests() -> Path:
    """The static x86-64 driver, built like the native one (objects cached by a source digest).
    Tag bochs-x86_64: build_driver prunes "<tag>-*", so x86_64-... would be removed by the native
    build's pruning and the other way round."""
    tnk = _test_module()
    try:
        return tnk.build_driver(shutil.which("g++") or "g++", tnk.X86_SIMD, ["-static"], "bochs-x86_64")
    except AssertionError as e:  # build_driver reports compiler failures as assertions
        raise RuntimeError(str(e)) from None


def build_init() -> Path:
    out_dir = CACHE / "init"
    cmd = ["gcc", "-static", "-Os", "-Wall", "-Wextra", "-Werror"]
    exe = out_dir / f"init-{_digest(INIT_SOURCE.read_bytes(), ' '.join(cmd))}"
    if not exe.exists():
        out_dir.mkdir(parents=True, exist_ok=True)
        tmp = exe.with_suffix(".tmp")
        _run([*cmd, "-o", str(tmp), str(INIT_SOURCE)], "building the static /init")
        os.replace(tmp, exe)
        _prune(out_dir, "init-", exe)
    return exe


# ---- the Linux kernel -----------------------------------------------------------------------------

def resolve_kernel_package(meta: str = KERNEL_META_PACKAGE) -> str | None:
    """The versioned image package the meta package of this Debian release depends on (from the
    local apt lists, no network); None when apt does not know it."""
    if shutil.which("apt-cache") is None:
        return None
    proc = subprocess.run(["apt-cache", "depends", meta], capture_output=True, text=True)
    m = re.search(r"Depends: (linux-image-\S+)", proc.stdout)
    return m[1] if m else None


def fetch_kernel(package: str | None = None) -> Path:
    """boot/vmlinuz-* of `package` (default: resolved from the meta package), downloaded with
    `apt-get download` and unpacked with `dpkg-deb -x` into the cache; never installed."""
    kernels = CACHE / "kernel"
    name = package or resolve_kernel_package()
    if name is None:  # no apt lists (or not Debian): a kernel fetched before will do
        cached = sorted(kernels.glob("linux-image-*/vmlinuz"))
        if cached:
            return cached[-1]
        raise EnvironmentProblem(f"apt-cache does not know {KERNEL_META_PACKAGE} (Debian package lists: "
                                 "run apt-get update)")
    vmlinuz = kernels / name / "vmlinuz"
    if vmlinuz.exists():
        return vmlinuz
    say(f"downloading {name} (apt-get download; unpacked into {kernels}, not installed)")
    kernels.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=kernels) as tmp:
        _run(["apt-get", "download", "-q", name], f"apt-get download {name}", cwd=tmp)
        deb = next(Path(tmp).glob("*.deb"))
        _run(["dpkg-deb", "-x", str(deb), str(Path(tmp) / "root")], f"dpkg-deb -x {deb.name}")
        found = sorted((Path(tmp) / "root" / "boot").glob("vmlinuz-*"))
        if not found:
            raise RuntimeError(f"{deb.name} has no boot/vmlinuz-*")
        (kernels / name).mkdir(exist_ok=True)
        shutil.copyfile(found[0], vmlinuz.with_suffix(".tmp"))
        os.replace(vmlinuz.with_suffix(".tmp"), vmlinuz)
    _prune(kernels, "linux-image-", kernels / name)  # kernels of older package lists
    return vmlinuz


# ---- initramfs and ISO ----------------------------------------------------------------------------

def newc_cpio(entries: list[tuple[str, int, bytes, tuple[int, int]]]) -> bytes:
    """An uncompressed newc ("070701") cpio archive of (name, mode, data, (rdev major, minor))
    entries, owned by root, mtime 0: the same bytes for the same inputs."""
    out = bytearray()
    for ino, (name, mode, data, (rmajor, rminor)) in enumerate([*entries, ("TRAILER!!!", 0, b"", (0, 0))], 1):
        raw = name.encode() + b"\0"
        nlink = 2 if mode & 0o170000 == 0o040000 else 1
        fields = [0 if name == "TRAILER!!!" else ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rmajor, rminor,
                  len(raw), 0]
        out += b"070701" + b"".join(b"%08X" % f for f in fields) + raw
        out += b"\0" * (-len(out) % 4)
        out += data
        out += b"\0" * (-len(out) % 4)
    return bytes(out)


def initramfs(init: Path, kernel_tests: Path) -> bytes:
    return newc_cpio([
        ("dev", 0o040755, b"", (0, 0)),
        ("dev/console", 0o020600, b"", (5, 1)),
        ("proc", 0o040755, b"", (0, 0)),
        ("init", 0o100755, init.read_bytes(), (0, 0)),
        ("kernel_tests", 0o100755, kernel_tests.read_bytes(), (0, 0)),
    ])


def build_iso(vmlinuz: Path, cpio: bytes, cmdline: str) -> Path:
    """An El Torito (isolinux) ISO booting vmlinuz with the initramfs and cmdline, cached by a
    digest of its contents."""
    isos = CACHE / "iso"
    # initrd= in APPEND, not an INITRD line: isolinux appends that after the "-- ARGS" for /init
    config = ("DEFAULT linux\nPROMPT 0\nTIMEOUT 0\nLABEL linux\n  KERNEL /vmlinuz\n"
              f"  APPEND initrd=/initrd.img {cmdline}\n")
    key = _digest(vmlinuz.read_bytes(), cpio, config, ISOLINUX_BIN.read_bytes(), LDLINUX_C32.read_bytes())
    iso = isos / f"avx512-{key}.iso"
    if iso.exists():
        return iso
    isos.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=isos) as tmp:
        tree = Path(tmp) / "tree"
        (tree / "isolinux").mkdir(parents=True)
        shutil.copyfile(ISOLINUX_BIN, tree / "isolinux" / "isolinux.bin")
        shutil.copyfile(LDLINUX_C32, tree / "isolinux" / "ldlinux.c32")
        (tree / "isolinux" / "isolinux.cfg").write_text(config)
        shutil.copyfile(vmlinuz, tree / "vmlinuz")
        (tree / "initrd.img").write_bytes(cpio)
        tmp_iso = Path(tmp) / "out.iso"
        _run(["xorriso", "-as", "mkisofs", "-quiet", "-o", str(tmp_iso), "-R", "-V", "EDGESDK_AVX512",
              "-b", "isolinux/isolinux.bin", "-c", "isolinux/boot.cat", "-no-emul-boot", "-boot-load-size", "4",
              "-boot-info-table", str(tree)], "xorriso (the boot ISO)")
        os.replace(tmp_iso, iso)
    _prune(isos, "avx512-", iso)
    return iso


# ---- Bochs ----------------------------------------------------------------------------------------

def bochsrc(iso: Path, serial: Path, log: Path, cpu: str, ips: int, megs: int) -> str:
    return f"""\
# written by tools/avx512_under_bochs.py
megs: {megs}
romimage: file={BXSHARE / 'BIOS-bochs-latest'}
vgaromimage: file={BXSHARE / 'VGABIOS-lgpl-latest'}
cpu: model={cpu}, count=1, ips={ips}, reset_on_triple_fault=0
clock: sync=none, time0=946684800
# Debian's bochs has no nogui library: rfb, not waiting for a viewer, is as headless
display_library: rfb, options="timeout=0"
ata0: enabled=1, ioaddr1=0x1f0, ioaddr2=0x3f0, irq=14
ata0-master: type=cdrom, path={iso}, status=inserted
ata1: enabled=0
boot: cdrom
com1: enabled=1, mode=file, dev={serial}
# the default sound set-up's mixer thread aborts (buffer overflow) on a machine without sound
sound: driver=dummy
speaker: enabled=0
mouse: enabled=0
log: {log}
panic: action=fatal
error: action=report
info: action=report
debug: action=ignore
"""


@dataclass
class Result:
    serial: str  # the guest's serial console, whole
    exit_status: int | None  # the driver's, from the sentinel; None: no sentinel
    cpu_flags: set[str] = field(default_factory=set)
    cpu_model: str = ""
    seconds: float = 0.0  # Bochs' wall time
    timed_out: bool = False

    @property
    def verdicts(self) -> dict[tuple[str, str], str]:
        """{(family, isa): "PASS" | "FAIL"} from the driver's report lines."""
        return {(fam, isa): st for st, fam, isa in re.findall(r"^(PASS|FAIL) (\w+) (\S+)", self.serial, re.M)}

    @property
    def driver_lines(self) -> list[str]:
        pattern = re.compile(r"(PASS|FAIL|INFO) |supported isas:|checked isas:")
        return [ln for ln in self.serial.splitlines() if pattern.match(ln)]

    def problems(self, families: set[str]) -> list[str]:
        """Why this run does not show every family passing at the avx512 level; empty if it does."""
        out = []
        if self.timed_out:
            out.append(f"timed out after {self.seconds:.0f} s")
        if self.exit_status is None:
            out.append("no exit sentinel on the serial console (the guest did not finish)")
        elif self.exit_status != 0:
            out.append(f"kernel_tests exited with status {self.exit_status}")
        missing_flags = [f for f in REQUIRED_FLAGS if f not in self.cpu_flags]
        if missing_flags:
            out.append(f"the guest CPU lacks {' '.join(missing_flags)}")
        out += [ln for ln in self.serial.splitlines() if ln.startswith("FAIL")]
        got = self.verdicts
        missing = sorted(f for f in families if got.get((f, "avx512")) != "PASS")
        if missing:
            out.append(f"no PASS line at avx512 for: {' '.join(missing)}")
        if not re.search(r"^checked isas: avx512$", self.serial, re.M):
            out.append("no 'checked isas: avx512' line")
        return out


def _read_serial(path: Path) -> str:
    return path.read_text(errors="replace").replace("\r\n", "\n") if path.exists() else ""


def boot(iso: Path, work: Path, timeout: float, cpu: str = CPU_MODEL, ips: int = IPS, megs: int = 256,
         echo: bool = True) -> Result:
    """Boots the ISO under Bochs and follows the serial log until the sentinel (or the timeout)."""
    work.mkdir(parents=True, exist_ok=True)
    serial, log, rc = work / "serial.log", work / "bochs.log", work / "bochsrc"
    serial.unlink(missing_ok=True)
    rc.write_text(bochsrc(iso, serial, log, cpu, ips, megs))
    (work / "debugger.rc").write_text("continue\nquit\n")  # Debian's bochs starts in its debugger
    cmd = [shutil.which("bochs-bin") or "bochs-bin", "-q", "-f", str(rc), "-rc", str(work / "debugger.rc")]
    start = last_note = time.monotonic()
    shown, phase, timed_out = 0, "booting Linux", False
    if echo:
        say(f"booting Linux under Bochs ({cpu}); serial console: {serial}")
    with open(work / "bochs.out", "w") as out:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=work)
        try:
            while True:
                exited = proc.poll() is not None
                text = _read_serial(serial)
                lines = text.split("\n")[:-1]  # whole lines only
                for ln in lines[shown:]:
                    if ln.startswith("EDGESDK-BOCHS-RUN"):
                        phase = "running kernel_tests"
                    if echo and (ln.startswith(("EDGESDK-", "PASS", "FAIL", "INFO", "supported isas", "checked isas"))
                                 or "Kernel panic" in ln):
                        say(f"[{time.monotonic() - start:4.0f} s] {ln[:160]}")
                        last_note = time.monotonic()
                shown = len(lines)
                if SENTINEL.search(text):
                    try:  # /init powers off: Bochs exits by itself
                        proc.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        pass
                    break
                if exited:
                    break
                if time.monotonic() - start > timeout:
                    timed_out = True
                    break
                if echo and time.monotonic() - last_note >= 30:
                    say(f"[{time.monotonic() - start:4.0f} s] {phase}...")
                    last_note = time.monotonic()
                time.sleep(0.5)
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    text = _read_serial(serial)
    m = SENTINEL.search(text)
    flags = re.search(r"^EDGESDK-BOCHS-FLAGS\s*(.*)$", text, re.M)
    model = re.search(r"^EDGESDK-BOCHS-MODEL\s*(.*)$", text, re.M)
    return Result(serial=text, exit_status=int(m[1]) if m else None,
                  cpu_flags=set(flags[1].split()) if flags else set(), cpu_model=model[1].strip() if model else "",
                  seconds=time.monotonic() - start, timed_out=timed_out)


def run(driver_args: list[str] | None = None, timeout: float = 1800, kernel_package: str | None = None,
        cpu: str = CPU_MODEL, ips: int = IPS, echo: bool = True) -> Result:
    """Builds (or reuses) everything, boots, returns the result. Raises EnvironmentProblem for a
    missing tool, RuntimeError for a failed build or download. One run at a time per checkout."""
    problems = environment_problems()
    if problems:
        raise EnvironmentProblem(problems[0])
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "run.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        t0 = time.monotonic()
        if echo:
            say("building the static kernel_tests and /init (cached by source digest)")
        kernel_tests = build_kernel_tests()
        init = build_init()
        vmlinuz = fetch_kernel(kernel_package)
        cmdline = CMDLINE + (" -- " + " ".join(driver_args) if driver_args else "")
        iso = build_iso(vmlinuz, initramfs(init, kernel_tests), cmdline)
        if echo:
            say(f"ready in {time.monotonic() - t0:.0f} s: {iso.name} (kernel {vmlinuz.parent.name})")
        return boot(iso, CACHE / "run", timeout, cpu=cpu, ips=ips, echo=echo)


def _terminate(signum, frame):  # SIGTERM: unwind, so that boot() stops Bochs
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="words after -- go to kernel_tests, after --isa avx512")
    parser.add_argument("--quick", action="store_true", help="kernel_tests --quick: the reduced case set")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds for boot and run (default 1800)")
    parser.add_argument("--cpu", default=CPU_MODEL, help=f"Bochs CPU model (default {CPU_MODEL})")
    parser.add_argument("--ips", type=int, default=IPS,
                        help=f"emulated instructions per emulated second (default {IPS})")
    parser.add_argument("--kernel-package",
                        help=f"linux-image package (default: what {KERNEL_META_PACKAGE} depends on)")
    parser.add_argument("driver_args", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    driver_args = (["--quick"] if args.quick else []) + args.driver_args
    t0 = time.monotonic()
    try:
        result = run(driver_args, args.timeout, args.kernel_package, args.cpu, args.ips)
    except EnvironmentProblem as e:
        print(f"avx512_under_bochs: {e}; install: apt-get install -y {APT_PACKAGES}", file=sys.stderr)
        return 2
    except RuntimeError as e:
        print(f"avx512_under_bochs: {e}", file=sys.stderr)
        return 1
    print(f"guest CPU: {result.cpu_model or '?'}; its avx512 flags: "
          f"{' '.join(sorted(f for f in result.cpu_flags if f.startswith('avx512'))) or 'none'}")
    for ln in result.driver_lines:
        print(ln)
    problems = result.problems(families())
    print(f"{'FAILED' if problems else 'OK'}: {result.seconds:.0f} s under Bochs, {time.monotonic() - t0:.0f} s in all"
          f" (serial console: {CACHE / 'run' / 'serial.log'})")
    for p in problems:
        print(f"  {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
