"""LQ-Nets on the default digits model (issue 16): the analogue of seed 002's Tables 2.1 / 2.2.

For fp32 and each LQ recipe of ``edgesdk.compress.finetune.DIGITS_RECIPES`` (lq-3w3a, lq-2w2a,
lq-2w, and a 1-bit lq-1w1a built here): the package size and the digits test accuracy
post-training (``pack_model`` with 64 calibration samples of the training split: QEM on the
weights, activation bases layer by layer) and after LQ fine-tuning
(``edgesdk.compress.lq_train``, the recipe packed with ``graph=``), per seed, with timings::

    .venv/bin/python tools/lq_accuracy.py                 # seeds 0 1 2, default epochs / lr
    .venv/bin/python tools/lq_accuracy.py --seeds 0 --epochs 10 --json out.json

s/run is one fine-tuning plus its packing; PTQ s the post-training pack. Training is deterministic
for a seed at a given torch thread count (float sums change with it): the numbers in the issue were
taken with OMP_NUM_THREADS=1, which is also much faster for this small model on a busy machine.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=None, help="fine-tuning epochs (default: lq_train's)")
    parser.add_argument("--lr", type=float, default=None, help="learning rate (default: lq_train's)")
    parser.add_argument("--recipes", nargs="+", default=["lq-3w3a", "lq-2w2a", "lq-2w", "lq-1w1a"])
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)

    import numpy as np

    import edgesdk
    from edgesdk.compress.finetune import DIGITS_RECIPES
    from edgesdk.compress.lq_train import DEFAULT_LQ_EPOCHS, DEFAULT_LQ_LR, lq_finetune_graph
    from edgesdk.compress.recipe import Recipe
    from edgesdk.datasets import digits_split
    from edgesdk.evaluation import evaluate
    from edgesdk.loader import load_model
    from edgesdk.models import default_model_path
    from edgesdk.pack import pack_model
    from edgesdk.passes import optimize

    epochs = args.epochs or DEFAULT_LQ_EPOCHS
    lr = args.lr or DEFAULT_LQ_LR
    recipes = dict(DIGITS_RECIPES)
    recipes["lq-1w1a"] = {"default": {"lq_bits": 1, "lq_act_bits": 1}, "layers": [{"match": "/0/Conv", "lq_act_bits": None}]}
    model = default_model_path()
    train, test = digits_split()
    graph = load_model(model)
    optimize(graph)
    fp32 = evaluate(edgesdk.Session(graph), test).accuracy
    rows = [{"recipe": "fp32", "bytes": model.stat().st_size, "post_training": fp32, "finetuned": {}, "seconds": {}}]
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.recipes:
            recipe = Recipe.from_dict(recipes[name])
            out = Path(tmp) / f"{name}.edgepkg"
            calibration = train.x[:64]
            t0 = time.perf_counter()
            post = pack_model(model, out, recipe, data=test, calibration=calibration)
            row = {"recipe": name, "bytes": post.package_bytes, "post_training": post.accuracy,
                   "post_training_s": time.perf_counter() - t0, "finetuned": {}, "seconds": {}, "module": {}}
            for seed in args.seeds:
                report: dict = {}
                t0 = time.perf_counter()
                tuned = lq_finetune_graph(graph, recipe, train, test=test, epochs=epochs, lr=lr, seed=seed, log=None,
                                          report=report)
                packed = pack_model(model, out, recipe, graph=tuned, data=test)
                row["seconds"][seed] = time.perf_counter() - t0
                row["finetuned"][seed] = packed.accuracy
                row["module"][seed] = report["accuracy"]
                row["bytes_finetuned"] = packed.package_bytes
                print(f"  {name} seed {seed}: {100 * packed.accuracy:.2f}% (module {100 * report['accuracy']:.2f}%) "
                      f"in {row['seconds'][seed]:.1f}s", file=sys.stderr, flush=True)
            rows.append(row)

    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}")
    print(f"model: {model.name} (fp32 test accuracy {100 * fp32:.2f}%), digits test split {len(test)} samples; "
          f"fine-tuning {epochs} epochs, lr {lr:g}, seeds {' '.join(map(str, args.seeds))}; post-training: "
          "pack_model with calibration = the first 64 training samples")
    header = f"{'':10s} {'package':>9s} {'post-training':>14s}  " + "  ".join(f"{'seed ' + str(s):>9s}" for s in args.seeds) \
        + f"  {'mean':>7s} {'worst drop':>10s} {'s/run':>6s} {'PTQ s':>6s}"
    print(header)
    for row in rows:
        tuned = [row["finetuned"][s] for s in args.seeds] if row["finetuned"] else []
        cells = "  ".join(f"{100 * a:8.2f}%" for a in tuned) if tuned else "  ".join(f"{'-':>9s}" for _ in args.seeds)
        mean = f"{100 * np.mean(tuned):6.2f}%" if tuned else f"{'-':>7s}"
        drop = f"{100 * (fp32 - min(tuned)):8.2f}pp" if tuned else f"{'-':>10s}"
        secs = f"{np.mean(list(row['seconds'].values())):6.1f}" if row["seconds"] else f"{'-':>6s}"
        ptq = f"{row['post_training_s']:6.1f}" if "post_training_s" in row else f"{'-':>6s}"
        print(f"{row['recipe']:10s} {row['bytes']:8d}B {100 * row['post_training']:13.2f}%  {cells}  {mean} {drop} {secs} {ptq}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
