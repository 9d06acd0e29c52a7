"""The ``edgesdk`` command line (also ``python -m edgesdk``).

Every command takes ``--json`` for machine-readable output, ``-q`` (errors and results only: no
progress bars, notes or warnings) and ``-v`` (also what was chosen: backend, device; ``-vv`` debug
logs). Errors print one line and exit 2; ``--debug`` shows the traceback instead. Progress bars
are drawn on stderr only when it is a terminal.

Layout: :mod:`.output` and :mod:`.inputs` hold what the commands share; one module per command
group (:mod:`.model`, :mod:`.compress`, :mod:`.profile`, :mod:`.remote`), imported when the parser
is built. Importing this package imports nothing heavy.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from .. import __version__
from ..errors import EdgeSDKError
from .output import EXIT_USAGE, configure_output, print_error

__all__ = ["build_parser", "main"]


# -- parser ----------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    from ..backends import backend_choices
    from ..runtime.precision import PRECISIONS
    from .compress import cmd_finetune, cmd_pack, compression_options
    from .inputs import positive_int
    from .model import cmd_devices, cmd_eval, cmd_export, cmd_inspect, cmd_quickstart, cmd_run
    from .profile import add_profile_parser
    from .remote import add_remote_parser

    common = argparse.ArgumentParser(add_help=False, parents=[_verbosity_options(top_level=False)])
    common.add_argument("--json", action="store_true", help="machine-readable output")
    common.add_argument("--debug", action="store_true", help="show tracebacks on errors")

    model_opts = argparse.ArgumentParser(add_help=False)
    model_opts.add_argument("model", help="model file (.onnx or .edgepkg)")
    model_opts.add_argument("--input-shape", action="append", metavar="NAME=DxD...",
                            help="fix a dynamic input shape, e.g. input=1x3x224x224 (repeatable)")
    model_opts.add_argument("--outputs", action="append", metavar="NAME[,NAME...]",
                            help="cut the graph at these tensors, which become its outputs (e.g. a detector's "
                                 "heads before its data-dependent post-processing)")

    backend_opts = argparse.ArgumentParser(add_help=False)
    backend_opts.add_argument("--backend", default="auto",
                              help=f"one of {', '.join(backend_choices())} (auto: the fastest that runs here)")
    backend_opts.add_argument("--precision", default="fp32", choices=PRECISIONS)
    backend_opts.add_argument("--threads", type=int, default=None, help="worker threads (default: backend's)")

    parser = argparse.ArgumentParser(prog="edgesdk", parents=[_verbosity_options(top_level=True)],
                                     description="Compress, pack and run neural networks on edge hardware.")
    parser.add_argument("--version", action="version", version=f"edgesdk {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("inspect", parents=[common, model_opts], help="per-layer table: op, shape, params, MACs")
    p.add_argument("--no-optimize", action="store_true", help="show the graph as imported, before passes")
    p.add_argument("--batch", type=positive_int, metavar="N",
                   help="inspect the model at batch N (the leading dimension of its inputs and outputs)")
    p.add_argument("--memory-budget", metavar="BYTES",
                   help="print the per-stage sub-batch plan that runs the batch fastest within BYTES (64M, 1.5G, ...) "
                        "on the cpu backend: stages, sub-batches, memory, measured times, predicted throughput")
    p.add_argument("--threads", type=int, default=None, help="worker threads the plan is measured with (default: cpu's)")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("run", parents=[common, model_opts, backend_opts], help="run a model once")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--input", help=".npy (single-input models) or .npz with one array per input")
    src.add_argument("--random", action="store_true", help="standard-normal random inputs")
    p.add_argument("--seed", type=int, default=0, help="seed for --random")
    p.add_argument("--output", help="save all outputs to this .npz")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("eval", parents=[common, model_opts, backend_opts], help="top-1 accuracy and latency")
    p.add_argument("--data", required=True, help="'digits' or an .npz with arrays x and y")
    p.add_argument("--limit", type=int, default=None, help="evaluate only the first N samples")
    p.set_defaults(func=cmd_eval)

    compression = compression_options()

    p = sub.add_parser("pack", parents=[common, model_opts, compression], help="compress an ONNX model into an .edgepkg")
    p.add_argument("--eval", metavar="DATA", help="measure accuracy before and after ('digits' or an .npz)")
    budget = p.add_argument_group("accuracy budget (--max-drop PP --calib DATA, no recipe: edgesdk chooses each layer)")
    budget.add_argument("--objective", choices=["size", "latency"],
                        help="what the budget search minimises: the package size (default) or the latency "
                             "measured per layer on --backend")
    budget.add_argument("--backend", default="auto",
                        help="backend the search measures on (latency objective: the one you deploy to; default auto)")
    budget.add_argument("--sensitivity-samples", type=int, default=512, metavar="N",
                        help="calibration samples each layer's damage is measured on (default 512)")
    p.add_argument("--min-sqnr", type=float, metavar="DB",
                   help="with --int8: keep in float the tensors that cost most until the int8 model's SQNR against "
                        "fp32 reaches DB on --eval's inputs (else --calib's), e.g. 30; the choice is saved as a recipe")
    budget.add_argument("--save-recipe", metavar="PATH",
                        help="where the chosen plan (--max-drop or --min-sqnr) is written as a recipe (default: OUTPUT "
                             "with .recipe.json); "
                             "`pack --recipe PATH --calib DATA` reproduces the package")
    p.set_defaults(func=cmd_pack)

    p = sub.add_parser("export", parents=[common, model_opts],
                       help="write a package (or any model) as ONNX: decoded float32 weights, int8 layers as QDQ")
    p.add_argument("-o", "--output", required=True, help="the .onnx file to write")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("finetune", parents=[common, compression],
                       help="fine-tune a compressed model (CPT for NNM, codebook training), then pack it")
    p.add_argument("model", nargs="?", help="an .onnx model (default: the embedded digits model)")
    p.add_argument("--input-shape", action="append", metavar="NAME=DxD...")
    p.add_argument("--train", default="digits", help="'digits' (its training split) or an .npz with x and y")
    p.add_argument("--test", help="held-out .npz with x and y (default: the digits test split with --train digits)")
    p.add_argument("--epochs", type=positive_int, default=None, help="training epochs (default: the fine-tuner's)")
    p.add_argument("--batch-size", type=positive_int, default=None, metavar="N",
                   help="training batch size (default: the fine-tuner's, 64)")
    p.add_argument("--lr", type=float, default=None, help="learning rate (default: the fine-tuner's)")
    p.add_argument("--beta", type=float, default=None, help="CPT pull toward the centroids per step (0, 1]")
    p.add_argument("--prune-ramp", type=float, default=None, metavar="F",
                   help="gradual pruning over this fraction of the retraining epochs (0: one-shot masks)")
    p.set_defaults(func=cmd_finetune)

    add_profile_parser(sub, [common, model_opts])

    p = sub.add_parser("devices", parents=[common], help="CPU features, the cpu backend's kernel path, OpenCL devices")
    p.set_defaults(func=cmd_devices)

    p = sub.add_parser("quickstart", parents=[common], help="the embedded default model end to end")
    p.set_defaults(func=cmd_quickstart)

    add_remote_parser(sub, common)
    return parser


def _verbosity_options(top_level: bool) -> argparse.ArgumentParser:
    """-q/-v, accepted before the command (``top_level``: it sets the defaults) and after it
    (argparse.SUPPRESS there: a subcommand not given them keeps what came before the command)."""
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument("-q", "--quiet", action="store_true", default=False if top_level else argparse.SUPPRESS,
                         help="errors and results only: no progress bars, notes or warnings")
    options.add_argument("-v", "--verbose", action="count", default=0 if top_level else argparse.SUPPRESS,
                         help="also say what was chosen (backend, device); -vv: debug logs")
    return options


# -- main ------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line on ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.quiet and args.verbose:
        parser.error("choose -q (quiet) or -v (verbose), not both")
    restore = configure_output(args)
    try:
        return _run(args)
    finally:
        restore()


def _run(args: argparse.Namespace) -> int:
    """The command, with errors as one line and an exit status."""
    try:
        return args.func(args)
    except EdgeSDKError as exc:
        if args.debug:
            raise
        print_error(str(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("edgesdk: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`edgesdk inspect m.onnx | head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:  # a bug, not bad input: say so briefly, --debug for details
        if args.debug:
            raise
        print(f"edgesdk: internal error: {type(exc).__name__}: {exc} (rerun with --debug for the "
              f"traceback and please report it)", file=sys.stderr)
        return 1
