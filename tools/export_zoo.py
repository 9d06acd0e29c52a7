#!/usr/bin/env python3
"""Export a parity-zoo model (plain PyTorch, tests/zoo) to ONNX, e.g. for tools/bench.py.

    python tools/export_zoo.py mobilenet_v2 --size 224 -o out/mobilenet_v2.onnx
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from zoo import export_onnx, get_spec, model_names  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("name", choices=model_names())
    p.add_argument("--size", type=int, help="square spatial size (default: the model's full-size input)")
    p.add_argument("--exporter", default="torchscript", choices=["torchscript", "dynamo"])
    p.add_argument("-o", "--output", required=True, help="where to write the .onnx file")
    args = p.parse_args(argv)
    shape = get_spec(args.name).input_shape
    if args.size:
        shape = shape[:2] + (args.size, args.size)
    src = export_onnx(args.name, input_shape=shape, exporter=args.exporter)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    shutil.copyfile(src, tmp)
    tmp.replace(out)
    print(f"{args.name} {'x'.join(map(str, shape))} -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
