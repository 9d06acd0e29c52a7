"""The README's operator table, generated from ``edgesdk.ops.OPS`` and the backends' lowering
tables (one source of truth: a new op shows up here when it is registered).

    python tools/op_table.py            # print the table
    python tools/op_table.py --write    # replace the block between the markers in README.md

tests/test_tools.py fails when README.md is out of date with the registry.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
BEGIN, END = "<!-- op-table:begin (tools/op_table.py --write) -->", "<!-- op-table:end -->"


def rows() -> list[tuple[str, ...]]:
    """(ONNX op, family, cpu, opencl, notes) per op the importer accepts, runtime ops first."""
    from edgesdk.backends.cpu.lower import LOWERINGS
    from edgesdk.backends.cpu.lower.base import REFERENCE_ONLY
    from edgesdk.backends.opencl.kernels import KERNELS, VIEW_OPS
    from edgesdk.ops import OPS
    out = []
    def runs(spec) -> bool:
        target = OPS.get(spec.imports_as) if spec.imports_as else spec
        return target is not None and target.runs

    for name in sorted(OPS, key=lambda n: (not runs(OPS[n]), OPS[n].family, n)):
        spec = OPS[name]
        if spec.importer is None:
            continue
        lowered_as = spec.imports_as or name
        if runs(spec):
            cpu = "native" if lowered_as in LOWERINGS and lowered_as not in REFERENCE_ONLY else "reference"
            cpu = "view" if lowered_as in VIEW_OPS else cpu
            opencl = "view" if lowered_as in VIEW_OPS else ("kernel" if lowered_as in KERNELS else "reference")
        else:
            cpu = opencl = "folded at import"
        notes = "; ".join(x for x in (f"imports as {spec.imports_as}" if spec.imports_as else "", spec.note) if x)
        out.append((name, spec.family, cpu, opencl, notes))
    return out


def table() -> str:
    lines = ["| ONNX op | family | cpu | opencl | notes |", "|---|---|---|---|---|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows()]
    legend = ("Every op runs on the `reference` backend. cpu `native`: lowered to the C++ kernels or "
              "arena copies (a shape a kernel does not cover falls back to the reference kernel, "
              "shown with its reason by `edgesdk profile`); opencl `kernel`: an OpenCL kernel; "
              "`folded at import`: accepted where its inputs are constant once shapes are fixed.")
    return "\n".join([BEGIN, "", legend, "", *lines, "", END])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update README.md in place")
    args = parser.parse_args()
    generated = table()
    if not args.write:
        print(generated)
        return 0
    text = README.read_text()
    if BEGIN not in text or END not in text:
        print(f"README.md has no {BEGIN} ... {END} block", file=sys.stderr)
        return 2
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    tmp = README.with_suffix(".md.tmp")
    tmp.write_text(head + generated + tail)
    tmp.replace(README)
    return 0


if __name__ == "__main__":
    sys.exit(main())
