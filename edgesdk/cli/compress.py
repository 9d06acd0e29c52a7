"""``edgesdk pack|finetune``: compress a model into an .edgepkg, with or without fine-tuning."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..errors import InputError
from .inputs import check_output_folder, parse_input_shapes, parse_outputs, percentage_points
from .output import bars, emit_json, format_bytes, format_count, notes, table


def compression_options() -> argparse.ArgumentParser:
    """The options pack and finetune share: -o, --recipe and the recipe flags, --max-drop."""
    compression = argparse.ArgumentParser(add_help=False)
    compression.add_argument("-o", "--output", required=True, help="the .edgepkg to write")
    compression.add_argument("--recipe", help="a JSON or YAML recipe (per-layer settings); flags override its defaults. "
                             "finetune also takes a built-in digits recipe by name, e.g. prune+cluster2-25x")
    compression.add_argument("--prune", type=float, help="per-layer magnitude sparsity, e.g. 0.5")
    compression.add_argument("--global-prune", type=float, help="one magnitude threshold across all layers")
    compression.add_argument("--cluster-bits", type=int, help="k-means codebook of 2^B entries (1..8)")
    compression.add_argument("--per-channel", action="store_true", help="one codebook per output channel")
    compression.add_argument("--init", choices=["linear", "kmeans++"], help="k-means initialisation (default linear)")
    compression.add_argument("--nnm-rate", type=float, help="output-channel clustering: fraction of filters removed")
    compression.add_argument("--nnm-mode", choices=["shared", "per_input_channel"])
    compression.add_argument("--fp16", action="store_true", help="store weights, codebooks and centroids as half")
    compression.add_argument("--huffman", action="store_true",
                             help="Huffman-code pruned / clustered layers in 128x128 blocks (column gaps and codebook "
                                  "indices; kept per layer where smaller); `inspect` shows bits per weight")
    compression.add_argument("--int8", action="store_true",
                             help="quantize to int8 after compression (weights per channel, activations per tensor); "
                                  "needs --calib")
    compression.add_argument("--calib", metavar="DATA",
                             help="calibration inputs for --int8, for a recipe with int8 layers or LQ activations "
                                  "(lq_act_bits), or for the --max-drop search: 'digits' (its training split) or an .npz with array x")
    compression.add_argument("--calib-method", choices=["minmax", "percentile", "mse"],
                             help="how each activation's range is chosen from the calibration data (default: the "
                                  "recipe's, else minmax)")
    compression.add_argument("--int8-weight-bits", type=int, choices=[8, 7], metavar="{8,7}",
                             help="int8 weights' range: 8 ([-127, 127], default) or 7 ([-64, 64], ONNX Runtime's "
                                  "reduce_range: less accurate, 1.4-1.5x faster convolutions on CPUs without VNNI)")
    compression.add_argument("--calib-samples", type=int, metavar="N",
                             help="calibration samples int8 ranges come from, from the start of --calib (default: "
                                  "the recipe's, else 64)")
    compression.add_argument("--strict-recipe", action="store_true",
                             help="a recipe pattern that matches no layer is an error (default: a warning)")
    compression.add_argument("--max-drop", type=percentage_points, metavar="PP",
                             help="with a recipe or flags: refuse to write the package if accuracy fell by more than "
                                  "PP percentage points (needs --eval); pack with --calib and no recipe: search each "
                                  "layer's precision and compression for the smallest (or fastest) package within PP")
    return compression


# -- pack ------------------------------------------------------------------------------------
def _recipe_from_args(args: argparse.Namespace, base=None):
    import dataclasses

    from ..compress.recipe import LayerSettings, Recipe
    recipe = Recipe.load(args.recipe) if args.recipe else base if base is not None else Recipe()
    flags = {"prune": args.prune, "cluster_bits": args.cluster_bits, "per_channel": args.per_channel or None,
             "init": args.init, "nnm_rate": args.nnm_rate, "nnm_mode": args.nnm_mode, "fp16": args.fp16 or None,
             "huffman": args.huffman or None}
    overrides = {k: v for k, v in flags.items() if v is not None}
    default = LayerSettings(**{**dataclasses.asdict(recipe.default), **overrides})
    global_prune = args.global_prune if args.global_prune is not None else recipe.global_prune
    return dataclasses.replace(recipe, default=default, global_prune=global_prune)


RECIPE_FLAGS = ("prune", "global_prune", "cluster_bits", "per_channel", "init", "nnm_rate", "nnm_mode", "fp16",
                "huffman")


def _searches(args: argparse.Namespace) -> bool:
    """pack --max-drop PP --calib DATA without a recipe, flags or --int8: the accuracy budget."""
    return args.max_drop is not None and bool(args.calib) and not args.int8 and not args.recipe and \
        not any(getattr(args, flag) for flag in RECIPE_FLAGS)


def cmd_pack(args: argparse.Namespace) -> int:
    from ..datasets import load_dataset
    from ..pack import AccuracyDropError, pack_model
    from ..progress import Progress
    if _searches(args):
        return _pack_within_budget(args)
    if args.objective:
        raise InputError("--objective is for the accuracy budget search: "
                         "--max-drop PP --calib DATA without --recipe, recipe flags or --int8")
    if args.save_recipe and args.min_sqnr is None:
        raise InputError("--save-recipe writes the plan a search chose: add --min-sqnr DB (with --int8), or use "
                         "--max-drop PP --calib DATA without --recipe, recipe flags or --int8")
    if args.max_drop is not None and not args.eval:
        raise InputError("--max-drop needs --eval DATA: the accuracy drop is measured on that dataset "
                         "(or give --calib DATA without a recipe to search for a plan within the budget)")
    check_output_folder(args.output)
    recipe = _recipe_from_args(args)
    if args.int8:
        recipe = _whole_model_int8(recipe)
    calibration = _calibration(args, recipe)
    recipe_path = None
    if args.min_sqnr is not None:  # pack_model checks the target and that --int8 --calib came with it
        recipe_path = Path(args.save_recipe) if args.save_recipe else Path(args.output).with_suffix(".recipe.json")
        check_output_folder(str(recipe_path))
    if args.int8_weight_bits is not None:
        import dataclasses
        recipe = dataclasses.replace(recipe, calibration={**(recipe.calibration or {}),
                                                          "weight_bits": args.int8_weight_bits})
    data = load_dataset(args.eval) if args.eval else None
    shapes, bar = parse_input_shapes(args.input_shape), Progress("packing", leave=False)
    try:
        result = pack_model(args.model, args.output, recipe, data=data, input_shapes=shapes, progress=bar,
                            outputs=parse_outputs(args.outputs),
                            max_drop=args.max_drop, unmatched="error" if args.strict_recipe else "warn",
                            calibration=calibration, calibration_method=args.calib_method, min_sqnr=args.min_sqnr)
    except AccuracyDropError as exc:
        raise exc.with_hint("try a gentler recipe (lower --prune, higher --cluster-bits), `edgesdk finetune` "
                            "with the same recipe, or a larger --max-drop") from None
    if recipe_path is not None:
        from ..fileio import atomic_write_text
        atomic_write_text(recipe_path, json.dumps(result.recipe, indent=2, sort_keys=True) + "\n")
    if args.json:
        emit_json({**result.to_dict(), **({"recipe_file": str(recipe_path)} if recipe_path else {})})
        return 0
    _print_pack_result(args, result)
    if result.float_fallback is not None:
        _print_float_fallback(args, result.float_fallback, recipe_path)
    return 0


def _print_float_fallback(args: argparse.Namespace, fallback: dict, recipe_path: Path) -> None:
    """What --min-sqnr kept in float and the SQNR it measured."""
    def db(value):
        return "inf" if value is None else f"{value:.1f} dB"
    kept = fallback["tensors"]
    print(f"\nmin-sqnr: all-int8 {db(fallback['int8_sqnr_db'])} -> {db(fallback['sqnr_db'])} against fp32 "
          f"(target {fallback['target_db']:g} dB, {fallback['samples']} inputs, {fallback['evaluations']} plans measured)")
    if kept:
        print(f"kept float: {len(kept)} tensor(s), {len(fallback['keep_float'])} node(s), "
              f"{100 * fallback['float_macs_share']:.1f}% of the multiply-accumulates: "
              f"{', '.join(kept[:4])}{', ...' if len(kept) > 4 else ''}")
    print(f"recipe: {recipe_path} (reproduce: edgesdk pack {args.model} -o {args.output} --recipe {recipe_path} "
          f"--calib {args.calib})")


def _whole_model_int8(recipe):
    """--int8: every layer int8 (recipe settings that cannot go with it are named by RecipeError)."""
    import dataclasses

    from ..compress.recipe import LayerSettings
    return dataclasses.replace(recipe, default=LayerSettings(**{**dataclasses.asdict(recipe.default), "int8": True}))


def _pack_within_budget(args: argparse.Namespace) -> int:
    """pack --max-drop PP --calib DATA [--eval DATA] [--objective size|latency]."""
    from ..compress.budget import pack_within_budget
    from ..datasets import load_calibration, load_dataset
    from ..fileio import atomic_write_text
    from ..pack import AccuracyDropError
    from ..progress import Progress
    if args.int8_weight_bits is not None:
        raise InputError("--int8-weight-bits is not used by the accuracy budget search (its int8 layers have 8-bit "
                         "weights): give --int8 --int8-weight-bits 7 for a whole-model int8 package")
    check_output_folder(args.output)
    recipe_path = Path(args.save_recipe) if args.save_recipe else Path(args.output).with_suffix(".recipe.json")
    check_output_folder(str(recipe_path))
    for flag, value in (("--calib-samples", args.calib_samples), ("--sensitivity-samples", args.sensitivity_samples)):
        if value is not None and value < 1:
            raise InputError(f"{flag} must be at least 1, got {value}")
    calibration = load_calibration(args.calib)
    data = load_dataset(args.eval) if args.eval else None
    bar = Progress("searching", leave=False)
    try:
        result, budget = pack_within_budget(
            args.model, args.output, args.max_drop, calibration, eval_data=data, objective=args.objective or "size",
            method=args.calib_method or "minmax", samples=args.calib_samples or 64,
            sensitivity_samples=args.sensitivity_samples, backend=args.backend,
            input_shapes=parse_input_shapes(args.input_shape), outputs=parse_outputs(args.outputs), progress=bar)
    except AccuracyDropError as exc:
        raise exc.with_hint("the plan held the budget while searching but not once packed (a different batch "
                            "size changes rounding): try a slightly larger --max-drop") from None
    finally:
        bar.close()
    atomic_write_text(recipe_path, json.dumps(budget.recipe.to_dict(), indent=2, sort_keys=True) + "\n")
    if args.json:
        emit_json({**result.to_dict(), "budget": budget.to_dict(), "recipe_file": str(recipe_path)})
        return 0
    rows = [[str(i), r["layer"], r["op"], format_count(r["params"]), r["choice"], format_bytes(r["bytes"]),
             f"{100 * r['damage']:.2f}%"] + ([f"{r['latency_ms']:.3f}"] if budget.objective == "latency" else [])
            for i, r in enumerate(budget.rows())]
    print(table(rows, ["#", "layer", "op", "params", "choice", "weights", "damage"]
                + (["ms"] if budget.objective == "latency" else []), right={0, 3, 5, 6, 7}))
    print(f"\nplan: {budget.evaluations} plans measured in {budget.seconds:.1f} s on {budget.dataset} "
          f"(damage: share of top-1 predictions one layer's choice changes alone, + 0.01 x KL)")
    print(f"recipe: {recipe_path} (reproduce: edgesdk pack {args.model} -o {args.output} --recipe {recipe_path}"
          + (f" --calib {args.calib}" if budget.recipe.calibration else "") + ")")
    _print_pack_result(args, result)
    if budget.objective == "latency":
        _print_latency(args, result)
    return 0


def _print_latency(args: argparse.Namespace, result) -> None:
    """Median latency of the source and the package on --backend (what --objective latency minimised)."""
    import numpy as np

    from ..profile.latency import time_calls
    from ..runtime.session import Session
    shapes = parse_input_shapes(args.input_shape)
    sessions = [Session(model, backend=args.backend, input_shapes=shapes) for model in (args.model, result.output)]
    try:
        calls = [(lambda s, f: lambda: s.run(f))(s, {n: np.zeros(s.input_shapes[n], np.float32) for n in s.input_names})
                 for s in sessions]
        # Blocks of the two in turn, the order reversed each round: a busy machine slows both alike.
        times: list[list[float]] = [[], []]
        for r in range(4):
            for i in ((0, 1) if r % 2 == 0 else (1, 0)):
                times[i] += time_calls(calls[i], warmup=3, min_time_s=0.15)
    finally:
        for s in sessions:
            s.close()
    medians = [1e3 * float(np.median(t)) for t in times]
    print(f"latency: {medians[0]:.3f} ms -> {medians[1]:.3f} ms ({medians[0] / max(medians[1], 1e-9):.2f}x faster) "
          f"on {args.backend}, batch as packed, median of 4 interleaved blocks each")


def _print_pack_result(args: argparse.Namespace, result) -> None:
    rows = [[str(i), r.name, r.op, r.encoding, format_count(r.params), format_bytes(r.bytes_before),
             format_bytes(r.bytes_after), f"{r.ratio:.1f}x", f"{r.error_rms:.3f}"]
            for i, r in enumerate(result.layers)]
    print(table(rows, ["#", "layer", "op", "encoding", "params", "fp32", "stored", "ratio", "rel.err"],
                 right={0, 4, 5, 6, 7, 8}))
    before = sum(r.bytes_before for r in result.layers)
    after = sum(r.bytes_after for r in result.layers)
    print(f"\nweights: {format_bytes(before)} -> {format_bytes(after)} ({before / max(1, after):.1f}x)")
    coded = [r for r in result.layers if r.bytes_before_huffman is not None]
    if coded:
        uncoded, params = sum(r.bytes_before_huffman for r in coded), sum(r.params for r in coded)
        now = sum(r.bytes_after for r in coded)
        print(f"huffman: {len(coded)} layers {format_bytes(uncoded)} -> {format_bytes(now)} "
              f"({100 * (1 - now / max(1, uncoded)):.1f}% smaller), {8 * uncoded / params:.2f} -> "
              f"{8 * now / params:.2f} bits per weight")
    print(f"file:    {args.model} {format_bytes(result.source_bytes)} -> {args.output} "
          f"{format_bytes(result.package_bytes)} ({result.ratio:.1f}x smaller)")
    if result.accuracy is not None:
        print(f"accuracy on {result.dataset}: {100 * result.accuracy:.2f}% "
              f"(uncompressed {100 * result.baseline_accuracy:.2f}%, "
              f"{100 * (result.accuracy - result.baseline_accuracy):+.2f} pp)")


def _calibration(args: argparse.Namespace, recipe):
    """The calibration samples for the recipe's int8 layers and LQ activation bases (None when it
    has neither)."""
    from ..datasets import load_calibration
    int8 = recipe.default.int8 or any(overrides.get("int8") for _, overrides in recipe.layers)
    lq_act = recipe.default.lq_act_bits or any(overrides.get("lq_act_bits") for _, overrides in recipe.layers)
    if int8 and not args.calib:
        what = "--int8 needs" if args.int8 else "the recipe's int8 layers need"
        raise InputError(f"{what} --calib DATA: 'digits' or an .npz with an array x of model inputs")
    if lq_act and not args.calib:
        raise InputError("the recipe quantizes LQ layers' inputs (lq_act_bits): give --calib DATA ('digits' or an .npz "
                         "with an array x of model inputs), or train them with `edgesdk finetune --recipe lq-2w2a`")
    if args.calib and not (int8 or lq_act):
        raise InputError("--calib is for int8 layers, LQ activations (lq_act_bits) or the accuracy budget: add --int8, "
                         "a recipe with int8 or lq_act_bits layers, or --max-drop PP without a recipe")
    if args.int8_weight_bits is not None and not int8:
        raise InputError("--int8-weight-bits sets the range of int8 weights: add --int8 or a recipe with int8 layers")
    if not (int8 or lq_act):
        return None
    samples = args.calib_samples or (recipe.calibration or {}).get("samples", 64)
    if samples < 1:
        raise InputError(f"--calib-samples must be at least 1, got {samples}")
    return load_calibration(args.calib)[:samples]


# -- finetune --------------------------------------------------------------------------------
def cmd_finetune(args: argparse.Namespace) -> int:
    from ..pack import AccuracyDropError, compress_model, pack_model
    from ..progress import Progress

    if args.int8_weight_bits is not None and not args.int8:
        raise InputError("--int8-weight-bits sets the range of int8 weights: add --int8")
    model, recipe, train, test = _finetune_inputs(args)
    from ..compress.lq_train import uses_lq
    if args.int8 and uses_lq(recipe):
        raise InputError("finetune --int8 trains int8 weights and ranges, but the recipe stores learned binary codes "
                         "(lq_bits): drop --int8, or use a recipe without lq settings")
    if args.int8:
        recipe, graph = _finetune_int8(model, recipe, train, test, args)
    elif uses_lq(recipe):  # already encoded (LQ codes + LQQuantize nodes): packed as it stands
        graph = _finetune_lq(model, recipe, train, test, args)
    else:
        finetuned = _finetune(model, recipe, train, test, args)
        graph, _ = compress_model(finetuned, recipe, unmatched="ignore")  # reported before training
    try:
        result = pack_model(model, args.output, recipe, data=test, graph=graph,
                            input_shapes=parse_input_shapes(args.input_shape), max_drop=args.max_drop,
                            progress=Progress("packing", leave=False))
    except AccuracyDropError as exc:
        raise exc.with_hint("try more --epochs, a gentler recipe (lower --prune, higher --cluster-bits) "
                            "or a larger --max-drop") from None
    report = result.to_dict()
    if args.json:
        emit_json(report)
        return 0
    print(f"packed {args.output}: {format_bytes(result.package_bytes)}, {result.ratio:.1f}x smaller than "
          f"{Path(model).name} ({format_bytes(result.source_bytes)})")
    if result.accuracy is not None:
        print(f"accuracy on {result.dataset}: {100 * result.accuracy:.2f}% (uncompressed "
              f"{100 * result.baseline_accuracy:.2f}%, {100 * (result.accuracy - result.baseline_accuracy):+.2f} pp)")
    return 0


def _finetune_int8(model: str, recipe, train, test, args: argparse.Namespace):
    """finetune --int8: quantization-aware training (edgesdk.quant.qat) from --calib's ranges (default:
    the first 256 training samples). Returns the recipe to record and the int8 graph."""
    from ..compress.recipe import LayerSettings, Recipe
    from ..progress import Progress
    from ..quant.qat import quantization_aware_finetune
    if recipe.compresses_any() or args.beta is not None or args.prune_ramp is not None:
        raise InputError("finetune --int8 trains int8 weights and ranges: it does not combine with codebook, "
                         "pruning, NNM or fp16 settings (--recipe, --prune, --cluster-bits, --beta, ...)")
    calibration, graph, options = _training_start(model, args)
    bar = Progress("int8 fine-tuning")
    try:
        qgraph, _ = quantization_aware_finetune(graph, train, calibration=calibration, test=test,
                                                method=args.calib_method or "minmax", progress=bar, log=notes(args),
                                                weight_bits=args.int8_weight_bits or 8, **options)
    finally:
        bar.close()
    settings = {"method": args.calib_method or "minmax"}
    if args.int8_weight_bits is not None:
        settings["weight_bits"] = args.int8_weight_bits
    return Recipe(LayerSettings(int8=True), calibration=settings), qgraph


def _training_start(model: str, args: argparse.Namespace):
    """What the int8 and LQ fine-tunings start from: --calib's samples (default: the first 256
    training samples, chosen by the training), the optimised graph and the training options."""
    from ..datasets import load_calibration
    from ..loader import load_model
    from ..passes import optimize
    if args.calib_samples is not None and args.calib_samples < 1:
        raise InputError(f"--calib-samples must be at least 1, got {args.calib_samples}")
    calibration = load_calibration(args.calib)[: args.calib_samples or 256] if args.calib else None
    graph = load_model(model, parse_input_shapes(args.input_shape))
    optimize(graph)
    options = {k: v for k, v in {"epochs": args.epochs, "lr": args.lr, "batch_size": args.batch_size}.items()
               if v is not None}
    return calibration, graph, options


def _finetune_lq(model: str, recipe, train, test, args: argparse.Namespace):
    """finetune with an lq recipe: LQ-Nets training (edgesdk.compress.lq_train); --calib (default: the
    first 256 training samples) starts the activation bases. Returns the encoded graph."""
    from ..compress.lq_train import lq_finetune_graph
    if args.beta is not None or args.prune_ramp is not None:
        raise InputError("--beta and --prune-ramp are options of the codebook / NNM fine-tuning: LQ fine-tuning "
                         "(an lq_bits recipe) does not take them")
    if args.calib_method is not None:
        raise InputError("--calib-method chooses int8 ranges: LQ activation bases are fitted by QEM (drop it)")
    calibration, graph, options = _training_start(model, args)
    return lq_finetune_graph(graph, recipe, train, test=test, log=notes(args), progress=bars(),
                             calibration=calibration, unmatched="error" if args.strict_recipe else "warn", **options)


def _finetune_inputs(args: argparse.Namespace) -> tuple[str, Any, Any, Any]:
    """Everything fine-tuning needs, checked before training starts (it takes minutes): the model
    path, the recipe, the datasets, --max-drop's dataset and the output folder."""
    from ..datasets import digits_split, load_dataset
    from ..models import default_model_path
    model = args.model or str(default_model_path())
    if args.max_drop is not None and args.train != "digits" and not args.test:
        raise InputError("--max-drop needs a test dataset: pass --test DATA (with --train digits the digits "
                         "test split is used)")
    if args.beta is not None and not 0 < args.beta <= 1:
        raise InputError(f"--beta must be in (0, 1], got {args.beta}")
    check_output_folder(args.output)
    builtin = _builtin_recipe(args.recipe)
    if builtin is not None:
        args.recipe = None
    recipe = _recipe_from_args(args, builtin)
    train, test = digits_split() if args.train == "digits" else (load_dataset(args.train), None)
    if args.test:
        test = load_dataset(args.test)
    return model, recipe, train, test


def _builtin_recipe(name: str | None):
    """A recipe of edgesdk.compress.finetune.DIGITS_RECIPES named by --recipe (when no such file)."""
    if not name or Path(name).exists():
        return None
    from ..compress.finetune import DIGITS_RECIPES
    from ..compress.recipe import Recipe
    return Recipe.from_dict(DIGITS_RECIPES[name]) if name in DIGITS_RECIPES else None


def _finetune(model: str, recipe, train, test, args: argparse.Namespace):
    from ..compress.finetune import finetune_graph
    from ..loader import load_model
    from ..passes import optimize
    graph = load_model(model, parse_input_shapes(args.input_shape))
    optimize(graph)
    options = {k: v for k, v in {"epochs": args.epochs, "lr": args.lr, "beta": args.beta,
                                 "batch_size": args.batch_size, "prune_ramp": args.prune_ramp}.items()
               if v is not None}
    return finetune_graph(graph, recipe, train, test=test, log=notes(args), progress=bars(),
                          unmatched="error" if args.strict_recipe else "warn", **options)
