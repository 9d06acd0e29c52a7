"""Compression recipes: which pass applies to which layer.

A recipe is JSON or YAML::

    {"default": {"cluster_bits": 4, "per_channel": true, "fp16": true},
     "global_prune": 0.8,
     "layers": [{"match": "*fc*", "prune": 0.9},
                {"match": "/0/Conv", "skip": true}]}

``default`` applies to every compressible layer (Conv and Gemm weights); each entry of ``layers``
whose ``match`` (a shell pattern) matches the layer's node name or weight tensor name overrides
it, in order. ``global_prune`` ranks the weights of all layers that prune together and cuts one
magnitude threshold (per-layer ``prune`` values are then ignored). ``int8: true`` runs a layer in
int8 (mixed precision; it needs calibration data when packing, sampled as ``calibration``
says: ``{"method": "mse", "samples": 64}``). ``edgesdk pack --max-drop PP --calib DATA`` writes
recipes of this form (``edgesdk.compress.budget``).
"""
from __future__ import annotations

import dataclasses
import fnmatch
import json
import math
import numbers
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ..errors import EdgeSDKError

NNM_MODES = ("shared", "per_input_channel")
INITS = ("linear", "kmeans++")
RECIPE_KEYS = ("default", "layers", "global_prune", "min_params", "calibration")
# weight_bits: 8 or 7 (edgesdk.quant.ptq.weight_qmax); keep_float: node names kept in float
# (what `pack --min-sqnr` chose, edgesdk.quant.float_fallback)
CALIBRATION_KEYS = ("method", "samples", "weight_bits", "keep_float")
CALIBRATION_METHODS = ("minmax", "percentile", "mse")  # edgesdk.quant.calibrate.METHODS, without importing numpy code


class RecipeError(EdgeSDKError):
    """A recipe file or option is malformed: one line naming the key, the value and what is allowed."""


def _is_number(value: Any) -> bool:
    # bool is an int subclass, but `prune: true` is a mistake, not 1.0
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _is_integer(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _type_problems(s: dict[str, Any]) -> list[str]:
    """Wrong types, checked before the ranges (a str compared with an int is a TypeError otherwise)."""
    problems = []
    if not _is_number(s["prune"]):
        problems.append(f"prune must be a number in [0, 1), got {s['prune']!r}")
    bits = s["cluster_bits"]
    if bits is not None and not _is_integer(bits):
        problems.append(f"cluster_bits must be an integer 1..8 (or null), got {bits!r}")
    for key in ("lq_bits", "lq_act_bits"):
        if s[key] is not None and not _is_integer(s[key]):
            problems.append(f"{key} must be an integer 1..8 (or null), got {s[key]!r}")
    if s["nnm_rate"] is not None and not _is_number(s["nnm_rate"]):
        problems.append(f"nnm_rate must be a number in (0, 1) (or null), got {s['nnm_rate']!r}")
    for flag in ("per_channel", "fp16", "skip", "int8", "huffman"):
        if not isinstance(s[flag], bool):
            problems.append(f"{flag} must be true or false, got {s[flag]!r}")
    return problems


def _range_problems(s: dict[str, Any]) -> list[str]:
    """Values out of range and settings that cannot go together (types already checked)."""
    problems = []
    if not 0.0 <= s["prune"] < 1.0:
        problems.append(f"prune must be in [0, 1), got {s['prune']}")
    if s["cluster_bits"] is not None and not 1 <= s["cluster_bits"] <= 8:
        problems.append(f"cluster_bits must be 1..8, got {s['cluster_bits']}")
    if s["nnm_rate"] is not None and not 0.0 < s["nnm_rate"] < 1.0:
        problems.append(f"nnm_rate must be in (0, 1), got {s['nnm_rate']}")
    if s["nnm_mode"] not in NNM_MODES:
        problems.append(f"nnm_mode must be one of {', '.join(NNM_MODES)}, got {s['nnm_mode']!r}")
    if s["init"] not in INITS:
        problems.append(f"init must be one of {', '.join(INITS)}, got {s['init']!r}")
    if s["nnm_rate"] is not None and (s["cluster_bits"] is not None or s["prune"]):
        problems.append("nnm_rate cannot be combined with prune or cluster_bits on one layer")
    if s["prune"] and s["cluster_bits"] == 1:
        problems.append("a pruned layer needs cluster_bits >= 2 (entry 0 is reserved for zero)")
    if s["huffman"] and s["int8"]:
        problems.append("huffman codes pruned / clustered float weights; an int8 layer's weights are int8 "
                        "(drop huffman or int8 on that layer)")
    for key in ("lq_bits", "lq_act_bits"):
        if s[key] is not None and not 1 <= s[key] <= 8:
            problems.append(f"{key} must be 1..8, got {s[key]}")
    if s["lq_act_bits"] is not None and s["lq_bits"] is None:
        problems.append("lq_act_bits quantizes the input of a binary-coded layer: set lq_bits too")
    if s["lq_bits"] is not None:
        clash = [k for k in ("cluster_bits", "nnm_rate") if s[k] is not None] + [
            k for k in ("prune", "fp16", "int8", "huffman") if s[k]]
        if clash:
            problems.append(f"lq_bits stores the layer's weights as learned binary codes, so it cannot be combined "
                            f"with {', '.join(clash)} on one layer")
    if s["int8"]:
        clash = [k for k in ("cluster_bits", "nnm_rate") if s[k] is not None] + (["fp16"] if s["fp16"] else [])
        if clash:
            problems.append(f"int8 stores the layer's weights as int8, so it cannot be combined with "
                            f"{', '.join(clash)} on one layer (prune can)")
    return problems


def settings_problems(settings: dict[str, Any]) -> list[str]:
    """Everything wrong with a complete mapping of :class:`LayerSettings` fields (empty: valid)."""
    return _type_problems(settings) or _range_problems(settings)


@dataclass(frozen=True)
class LayerSettings:
    """How one layer's weights are compressed (the fields below); wrong types, values out of range
    and invalid combinations raise :class:`RecipeError`."""
    prune: float = 0.0  # fraction of weights set to zero (magnitude)
    cluster_bits: int | None = None  # k-means codebook of 2^bits entries
    per_channel: bool = False  # one codebook per output channel instead of per layer
    init: str = "linear"  # k-means initialisation: linear (Han et al.) or kmeans++
    nnm_rate: float | None = None  # output-channel clustering: fraction of filters removed
    nnm_mode: str = "shared"  # or per_input_channel (seed 003's two readings)
    fp16: bool = False  # store weights / codebooks / centroids as half
    skip: bool = False  # leave this layer dense fp32
    int8: bool = False  # run the layer in int8 (weights per channel, activations per tensor): needs calibration
    # Huffman-code a pruned or clustered layer's column gaps and indices in blocks (kept where smaller)
    huffman: bool = False
    # LQ-Nets (seed 002): weights as lq_bits-bit learned binary codes (a basis per output channel);
    # lq_act_bits also quantizes the layer's input (a basis per layer: needs calibration or fine-tuning)
    lq_bits: int | None = None
    lq_act_bits: int | None = None

    def __post_init__(self) -> None:
        problems = settings_problems(dataclasses.asdict(self))
        if problems:
            raise RecipeError("invalid layer settings: " + "; ".join(problems))

    @property
    def compresses(self) -> bool:
        """True when these settings change how the layer's weights are stored."""
        return not self.skip and bool(self.prune or self.cluster_bits or self.nnm_rate or self.fp16 or self.lq_bits)

    @property
    def lq_activations(self) -> int | None:
        """The activation bits of an LQ layer whose input is quantized (None: float input)."""
        return None if self.skip else self.lq_act_bits

    @property
    def quantizes(self) -> bool:
        """True when the layer runs in int8 (after compression, from calibration data)."""
        return self.int8 and not self.skip


FIELDS = tuple(f.name for f in dataclasses.fields(LayerSettings))


@dataclass(frozen=True)
class Recipe:
    """Which settings apply to which layer: ``default`` for all, then ``layers`` entries
    ``(shell pattern, {setting: value})`` matched on node or weight names, in order. Checked when
    made (also with :func:`dataclasses.replace`): :class:`RecipeError` names what is wrong."""
    default: LayerSettings = field(default_factory=LayerSettings)
    layers: tuple[tuple[str, dict[str, Any]], ...] = ()
    global_prune: float | None = None
    min_params: int = 0  # layers with fewer weights stay dense (their overhead outweighs the gain)
    # How int8 layers are calibrated: {"method": minmax|percentile|mse, "samples": N} (both optional)
    calibration: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.default, LayerSettings):
            raise RecipeError(f"a recipe's default must be LayerSettings, got {type(self.default).__name__}")
        _check_global_prune(self.global_prune)
        _check_min_params(self.min_params)
        _check_calibration(self.calibration)
        for i, (pattern, overrides) in enumerate(self.layers):
            where = f"layers[{i}]"
            _check_pattern(pattern, where)
            _check_settings({**dataclasses.asdict(self.default), **_known(overrides, where)},
                            f"{where} (match {pattern!r})")

    def settings_for(self, *names: str) -> LayerSettings:
        """The settings of a layer known by ``names`` (node and weight name): the defaults, then
        every ``layers`` entry whose pattern matches one of them, in order."""
        settings = dataclasses.asdict(self.default)
        for pattern, overrides in self.layers:
            if any(fnmatch.fnmatchcase(n, pattern) for n in names if n):
                settings.update(overrides)
        return LayerSettings(**settings)

    def unmatched_patterns(self, layers: Iterable[Iterable[str]]) -> list[str]:
        """The ``layers`` patterns that match none of ``layers`` (each the names one layer is known
        by, as for :meth:`settings_for`): usually a typo or a name from another export."""
        names = [n for layer in layers for n in layer if n]
        patterns = dict.fromkeys(p for p, _ in self.layers)
        return [p for p in patterns if not any(fnmatch.fnmatchcase(n, p) for n in names)]

    def to_dict(self) -> dict[str, Any]:
        """The recipe as a mapping in the file format (only non-default settings)."""
        out: dict[str, Any] = {"default": _non_default(dataclasses.asdict(self.default))}
        if self.layers:
            out["layers"] = [{"match": p, **o} for p, o in self.layers]
        if self.global_prune is not None:
            out["global_prune"] = self.global_prune
        if self.min_params:
            out["min_params"] = self.min_params
        if self.calibration:
            out["calibration"] = dict(self.calibration)
        return out

    def compresses_any(self) -> bool:
        """Whether the defaults or any layer entry change how weights are stored (int8 aside)."""
        return self.default.compresses or self.global_prune is not None or any(
            LayerSettings(**{**dataclasses.asdict(self.default), **o}).compresses for _, o in self.layers)

    def to_json(self) -> str:
        """:meth:`to_dict` as JSON text (what a package stores)."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Recipe":
        """A recipe from a mapping in the file format. Everything is checked before any work
        starts: unknown keys (with a "did you mean"), wrong types, values out of range, missing or
        empty patterns; :class:`RecipeError` says where (``layers[2].cluster_bits``) in one line."""
        if not isinstance(data, dict):
            raise RecipeError(f"a recipe must be a mapping with keys {', '.join(RECIPE_KEYS)}, "
                              f"got {type(data).__name__}")
        _reject_unknown(data, RECIPE_KEYS, "recipe", "key")
        default_settings = _mapping(data.get("default"), "default")
        default = LayerSettings(**_check_settings({**_DEFAULTS, **_known(default_settings, "default")}, "default"))
        entries = data.get("layers") or []
        if not isinstance(entries, list):
            raise RecipeError(f"recipe 'layers' must be a list of {{match: PATTERN, setting: value}} entries, "
                              f"got {type(entries).__name__}")
        layers = tuple(_layer_entry(entry, f"layers[{i}]") for i, entry in enumerate(entries))
        return cls(default, layers, data.get("global_prune"), data.get("min_params", 0), data.get("calibration"))

    @classmethod
    def load(cls, path: str | Path) -> "Recipe":
        """A recipe from a JSON or YAML (.yaml/.yml) file."""
        path = Path(path)
        if not path.is_file():
            raise RecipeError(f"recipe file {str(path)!r} not found")
        text = path.read_text()
        try:
            if path.suffix.lower() in (".yaml", ".yml"):
                import yaml
                data = yaml.safe_load(text)
            else:
                data = json.loads(text)
        except Exception as exc:
            raise RecipeError(f"{path}: not valid {'YAML' if path.suffix in ('.yaml', '.yml') else 'JSON'} "
                              f"({str(exc).splitlines()[0]})") from None
        try:
            return cls.from_dict(data)
        except RecipeError as exc:
            raise RecipeError(f"{path}: {exc}") from None


_DEFAULTS = dataclasses.asdict(LayerSettings())
EXAMPLE_ENTRY = '{"match": "*fc*", "prune": 0.5}'


def _reject_unknown(mapping: dict, allowed: Iterable[str], where: str, what: str) -> None:
    """RecipeError for keys outside ``allowed``, each with its closest allowed spelling."""
    import difflib  # only on the error path: importing edgesdk.compress stays light
    allowed = list(allowed)
    unknown = [str(k) for k in mapping if k not in allowed]
    if not unknown:
        return
    named = []
    for key in unknown:
        close = difflib.get_close_matches(key, allowed, n=1)
        named.append(repr(key) + (f" (did you mean {close[0]!r}?)" if close else ""))
    plural = "s" if len(unknown) > 1 else ""
    raise RecipeError(f"{where}: unknown {what}{plural} {', '.join(named)}; allowed: {', '.join(allowed)}")


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:  # YAML `default:` with nothing under it
        return {}
    if not isinstance(value, dict):
        raise RecipeError(f"{where} must be a mapping of settings such as {{cluster_bits: 4}}, "
                          f"got {type(value).__name__}")
    return value


def _known(overrides: Any, where: str) -> dict[str, Any]:
    overrides = _mapping(overrides, where)
    _reject_unknown(overrides, FIELDS, where, "setting")
    return dict(overrides)


def _check_settings(settings: dict[str, Any], where: str) -> dict[str, Any]:
    problems = settings_problems(settings)
    if problems:
        raise RecipeError(f"{where}: {'; '.join(problems)}")
    return settings


def _check_pattern(pattern: Any, where: str) -> None:
    if not isinstance(pattern, str):
        raise RecipeError(f"{where}.match must be a shell pattern string such as '*fc*', got {pattern!r}")
    if not pattern.strip():
        raise RecipeError(f"{where}.match is empty: name a node or weight, or a shell pattern such as '*fc*'")


def _layer_entry(entry: Any, where: str) -> tuple[str, dict[str, Any]]:
    if not isinstance(entry, dict):
        raise RecipeError(f"{where} must be a mapping such as {EXAMPLE_ENTRY}, got {type(entry).__name__}")
    _reject_unknown(entry, ("match", *FIELDS), where, "key")
    if "match" not in entry:
        raise RecipeError(f"{where} needs a 'match' pattern, e.g. {EXAMPLE_ENTRY}")
    _check_pattern(entry["match"], where)
    return entry["match"], {k: v for k, v in entry.items() if k != "match"}


def _check_global_prune(value: Any) -> None:
    if value is not None and not (_is_number(value) and 0 <= value < 1):
        raise RecipeError(f"global_prune must be a number in [0, 1) (or null), got {value!r}")


def _check_min_params(value: Any) -> None:
    if not _is_integer(value) or value < 0:
        raise RecipeError(f"min_params must be a non-negative integer, got {value!r}")


def _check_calibration(value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        raise RecipeError(f"calibration must be a mapping such as {{method: minmax, samples: 64}}, got {value!r}")
    _reject_unknown(value, CALIBRATION_KEYS, "calibration", "key")
    if "method" in value and value["method"] not in CALIBRATION_METHODS:
        raise RecipeError(f"calibration.method must be one of {', '.join(CALIBRATION_METHODS)}, got {value['method']!r}")
    if "samples" in value and not (_is_integer(value["samples"]) and value["samples"] >= 1):
        raise RecipeError(f"calibration.samples must be a positive integer, got {value['samples']!r}")
    if "weight_bits" in value and not (_is_integer(value["weight_bits"]) and value["weight_bits"] in (7, 8)):
        raise RecipeError(f"calibration.weight_bits must be 8 or 7 (7: weights in [-64, 64], faster on CPUs "
                          f"without VNNI), got {value['weight_bits']!r}")
    keep = value.get("keep_float", [])
    if not isinstance(keep, list) or not all(isinstance(n, str) and n for n in keep):
        raise RecipeError(f"calibration.keep_float must be a list of node names to keep in float (as "
                          f"`pack --min-sqnr` writes it), got {keep!r}")


def _non_default(settings: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in settings.items() if v != _DEFAULTS[k]}
