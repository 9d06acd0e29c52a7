#!/usr/bin/env python3
"""Compression results on the embedded digits model: package size against the fp32 ONNX file and
held-out accuracy, for recipes without and with fine-tuning, plus the NNM rate table with and
without CPT (seed 003's experiment).

    python tools/bench_compress.py            # everything (several minutes: NNM x CPT fine-tunes)
    python tools/bench_compress.py --quick    # skip the NNM table
    python tools/bench_compress.py --json

Sizes are file sizes: the ONNX file shipped in edgesdk/models against the .edgepkg written here.
Accuracy is top-1 on the held-out digits split (360 images) on the reference backend, after the
package is written and read back.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import edgesdk  # noqa: E402
from edgesdk.compress.finetune import DIGITS_FINETUNE_OPTIONS  # noqa: E402
from edgesdk.compress.recipe import Recipe  # noqa: E402
from edgesdk.datasets import digits_split  # noqa: E402
from edgesdk.evaluation import evaluate  # noqa: E402
from edgesdk.models import default_model_path, default_recipe_path  # noqa: E402
from edgesdk.pack import compress_model, pack_model  # noqa: E402

NO_FINETUNE = {
    "fp16": {"default": {"fp16": True}},
    "4-bit per-layer codebooks": {"default": {"cluster_bits": 4}},
    "tuned recipe (digits_lenet.recipe.json)": None,  # loaded from the package
}
# recipes from edgesdk.compress.finetune.DIGITS_RECIPES, with their fine-tuning options
FINETUNE = {"prune+cluster3-layer-32x": {"prune_ramp": 0.0},
            "prune+cluster2-25x": DIGITS_FINETUNE_OPTIONS}


def measure(name: str, recipe: Recipe, train, test, tmp: Path, finetune: dict | None) -> dict:
    source = default_model_path()
    out = tmp / f"{len(list(tmp.iterdir()))}.edgepkg"
    t0 = time.perf_counter()
    graph = None
    if finetune is not None:
        from edgesdk.compress.finetune import finetune_graph
        from edgesdk.loader import load_model
        from edgesdk.passes import optimize
        base = load_model(source)
        optimize(base)
        graph, _ = compress_model(finetune_graph(base, recipe, train, test=None, log=None, **finetune), recipe)
    result = pack_model(source, out, recipe, data=test, graph=graph)
    reloaded = evaluate(edgesdk.Session(out), test).accuracy
    return {"name": name, "recipe": recipe.to_dict(), "onnx_bytes": result.source_bytes,
            "package_bytes": result.package_bytes, "ratio": result.ratio, "accuracy": reloaded,
            "baseline": result.baseline_accuracy, "loss_pp": 100 * (result.baseline_accuracy - reloaded),
            "seconds": time.perf_counter() - t0}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="skip the NNM x CPT table")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    train, test = digits_split()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, spec in NO_FINETUNE.items():
            recipe = Recipe.load(default_recipe_path()) if spec is None else Recipe.from_dict(spec)
            rows.append({**measure(name, recipe, train, test, Path(tmp), None), "finetuned": False})
        from edgesdk.compress.finetune import DIGITS_RECIPES
        for name, options in FINETUNE.items():
            recipe = Recipe.from_dict(DIGITS_RECIPES[name])
            rows.append({**measure(name, recipe, train, test, Path(tmp), options), "finetuned": True,
                         "finetune_options": options})
    nnm = [] if args.quick else nnm_table(train, test)
    if args.json:
        print(json.dumps({"packages": rows, "nnm": nnm}, indent=2))
        return 0
    print(f"digits model: {rows[0]['onnx_bytes']:,} B ONNX, baseline {100 * rows[0]['baseline']:.2f}% "
          f"on {len(test)} held-out images\n")
    print("| recipe | fine-tuned | .edgepkg | smaller | accuracy | loss |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['name']} | {'yes' if r['finetuned'] else 'no'} | {r['package_bytes']:,} B | "
              f"{r['ratio']:.1f}x | {100 * r['accuracy']:.2f}% | {r['loss_pp']:.2f} pp |")
    if nnm:
        print("\nNNM (output-channel clustering) on every layer but the classifier, accuracy after packing:\n")
        print("| mode | rate | without CPT | with CPT |")
        print("|---|---|---|---|")
        for r in nnm:
            print(f"| {r['mode']} | {100 * r['rate']:.0f}% | {100 * r['no_cpt']:.2f}% ({-r['loss_no_cpt_pp']:+.2f} pp) "
                  f"| {100 * r['cpt']:.2f}% ({-r['loss_cpt_pp']:+.2f} pp) |")
    return 0


def nnm_table(train, test) -> list[dict]:
    from edgesdk.compress.finetune import nnm_cpt_table
    from edgesdk.loader import load_model
    from edgesdk.passes import optimize
    graph = load_model(default_model_path())
    optimize(graph)
    return nnm_cpt_table(graph, train, test, log=lambda line: print(line, file=sys.stderr))


if __name__ == "__main__":
    sys.exit(main())
