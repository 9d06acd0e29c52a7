"""The report's charts, drawn with matplotlib as SVG markup to inline in the HTML.

matplotlib is imported lazily (boards run the SDK without it; only the host draws reports) and
pyplot is never used: each chart is a ``Figure`` on an explicit Agg canvas, so drawing changes no
global state of an application that embeds edgesdk. Every function takes run profiles
(:func:`edgesdk.profile.collect.profile_session` dicts) and returns one ``<svg>`` element.
"""
from __future__ import annotations

import functools
import io
import re
from collections import defaultdict
from typing import Any, Callable

from .latency import format_ms

Run = dict[str, Any]

PLACEMENT_COLORS = {"opencl": "#1f77b4", "native": "#2ca02c", "numpy": "#ff7f0e", "reference": "#d62728",
                    "view": "#7f7f7f"}
OTHER_COLOR = "#bcbd22"
RUN_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
LABEL_CHARS = 42
# Text stays text in the SVG (searchable, small); a fixed hash salt keeps the output reproducible.
STYLE = {"svg.fonttype": "none", "svg.hashsalt": "edgesdk", "font.size": 9}


def _styled(draw: Callable[..., str]) -> Callable[..., str]:
    """Draws under the report's matplotlib settings (fonts are fixed when artists are created,
    so the settings must hold while drawing, not only while saving)."""
    @functools.wraps(draw)
    def styled(*args: Any, **kwargs: Any) -> str:
        import matplotlib
        with matplotlib.rc_context(STYLE):
            return draw(*args, **kwargs)
    return styled


def matplotlib_missing() -> str | None:
    """None when charts can be drawn, else why not and the fix."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "matplotlib is not installed: pip install matplotlib (or, in the edgesdk source checkout, pip install -e '.[host]') to draw the charts"
    return None


@_styled
def op_time_bars(run: Run, chart_id: str, top: int = 15) -> str:
    """The ``top`` slowest ops (median per run, coloured by placement) and the rest as one bar."""
    ops = sorted(run["ops"], key=lambda op: -op["median_ms"])
    shown, rest = ops[:top], ops[top:]
    bars = [(f"{_short(op['node'])}  [{op['op']}]", op["median_ms"], PLACEMENT_COLORS.get(op["placement"], OTHER_COLOR))
            for op in shown]
    if rest:
        bars.append((f"{len(rest)} other ops", sum(op["median_ms"] for op in rest), "#c7c7c7"))
    fig = _figure(7.0, 1.0 + 0.28 * len(bars))
    ax = fig.add_subplot()
    _hbars(ax, bars, total=sum(op["median_ms"] for op in ops))
    ax.set_xlabel("median time per run (ms)")
    ax.set_title(_plain(f"Slowest layers: {run['label']}"), loc="left")
    placements = sorted({op["placement"] for op in shown})
    _legend(ax, {p: PLACEMENT_COLORS.get(p, OTHER_COLOR) for p in placements})
    return _svg(fig, chart_id)


@_styled
def op_type_bars(run: Run, chart_id: str) -> str:
    """Time by op type (fused activations included in the type, e.g. Conv+Relu)."""
    totals, counts = _time_by_op_type(run)
    order = sorted(totals, key=lambda op: -totals[op])
    bars = [(f"{_short(op)}  ({counts[op]}x)", totals[op], "#4c72b0") for op in order]
    fig = _figure(7.0, 1.0 + 0.28 * len(bars))
    ax = fig.add_subplot()
    _hbars(ax, bars, total=sum(totals.values()))
    ax.set_xlabel("median time per run (ms), summed over the op type")
    ax.set_title(_plain(f"Time by op type: {run['label']}"), loc="left")
    return _svg(fig, chart_id)


@_styled
def latency_histogram(run: Run, chart_id: str) -> str:
    samples = run["latency"]["samples_ms"]
    fig = _figure(7.0, 3.0)
    ax = fig.add_subplot()
    ax.hist(samples, bins=max(5, min(40, len(samples) // 2)), color="#4c72b0", alpha=0.85)
    for key, style, name in (("median_ms", "-", "median"), ("p90_ms", "--", "p90")):
        value = run["latency"][key]
        ax.axvline(value, color="#d62728", linestyle=style, linewidth=1.2, label=f"{name} {format_ms(value)}")
    ax.set_xlabel("latency of one run (ms)")
    ax.set_ylabel("runs")
    ax.set_title(_plain(f"Latency over {len(samples)} runs: {run['label']}"), loc="left")
    ax.legend(frameon=False)
    return _svg(fig, chart_id)


@_styled
def latency_comparison(runs: list[Run], labels: list[str], chart_id: str) -> str:
    """Median latency per run with the 20-80 % range as error bars and the speed-up over the first."""
    medians = [r["latency"]["median_ms"] for r in runs]
    low = [m - r["latency"]["p20_ms"] for m, r in zip(medians, runs)]
    high = [r["latency"]["p80_ms"] - m for m, r in zip(medians, runs)]
    fig = _figure(7.0, 1.0 + 0.45 * len(runs))
    ax = fig.add_subplot()
    y = list(range(len(runs)))
    ax.barh(y, medians, xerr=[low, high], color=[_run_color(i) for i in y], capsize=3, height=0.6)
    for i, median in enumerate(medians):
        speedup = f"  ({medians[0] / median:.2f}x)" if median > 0 else ""
        ax.text(median + high[i], i, f"  {format_ms(median)}{speedup}", va="center", fontsize=8)
    ax.set_yticks(y, [_plain(_short(label)) for label in labels])
    ax.invert_yaxis()
    ax.set_xlim(0, max(m + h for m, h in zip(medians, high)) * 1.35)
    ax.set_xlabel("median latency (ms), bars: 20-80 % of runs; speed-up relative to the first run")
    ax.set_title("Latency by run", loc="left")
    return _svg(fig, chart_id)


@_styled
def op_type_comparison(runs: list[Run], labels: list[str], chart_id: str) -> str:
    """Time by op type, one bar per run in each group."""
    per_run = [_time_by_op_type(run)[0] for run in runs]
    types = sorted({op for totals in per_run for op in totals}, key=lambda op: -max(t.get(op, 0.0) for t in per_run))
    height = 0.8 / len(runs)
    fig = _figure(7.0, 1.2 + 0.22 * len(types) * len(runs))
    ax = fig.add_subplot()
    for i, (totals, label) in enumerate(zip(per_run, labels)):
        ax.barh([g + i * height for g in range(len(types))], [totals.get(op, 0.0) for op in types], height=height,
                color=_run_color(i), label=_plain(_short(label)))
    ax.set_yticks([g + height * (len(runs) - 1) / 2 for g in range(len(types))], [_plain(_short(op)) for op in types])
    ax.invert_yaxis()
    ax.set_xlabel("median time per run (ms), summed over the op type")
    ax.set_title("Time by op type and run", loc="left")
    ax.legend(frameon=False, fontsize=8, loc="lower right")
    return _svg(fig, chart_id)


# -- helpers ----------------------------------------------------------------------------------
def _time_by_op_type(run: Run) -> tuple[dict[str, float], dict[str, int]]:
    totals: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for op in run["ops"]:
        totals[op["op"]] += op["median_ms"]
        counts[op["op"]] += 1
    return dict(totals), dict(counts)


def _hbars(ax: Any, bars: list[tuple[str, float, str]], total: float) -> None:
    """Horizontal bars, largest on top, each annotated with its time and share of ``total``."""
    y = list(range(len(bars)))
    values = [value for _, value, _ in bars]
    ax.barh(y, values, color=[color for _, _, color in bars], height=0.7)
    ax.set_yticks(y, [_plain(label) for label, _, _ in bars], fontsize=8)
    ax.invert_yaxis()
    for i, value in enumerate(values):
        share = f" ({100 * value / total:.1f} %)" if total > 0 else ""
        ax.text(value, i, f"  {format_ms(value)}{share}", va="center", fontsize=7)
    ax.set_xlim(0, max(values, default=0) * 1.3 or 1.0)


def _legend(ax: Any, colors: dict[str, str]) -> None:
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(color=c, label=p) for p, c in colors.items()], frameon=False, fontsize=8,
              loc="lower right", title="placement", title_fontsize=8)


def _run_color(index: int) -> str:
    return RUN_COLORS[index % len(RUN_COLORS)]


def _short(text: str) -> str:
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "\u2026"


def _plain(text: str) -> str:
    """matplotlib reads $...$ as math; node names are literal text."""
    return text.replace("$", r"\$")


def _figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(width, min(height, 40.0)), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


_PROLOG = re.compile(r"^.*?(?=<svg)", re.S)
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.S)
_NAMESPACES = re.compile(r'\s+xmlns(?::\w+)?="[^"]*"')


def _svg(fig: Any, chart_id: str) -> str:
    """The figure as an ``<svg>`` element for inline HTML: the XML prolog, the RDF metadata and
    the namespace declarations go (HTML's parser knows SVG, and the report must not name any
    URL); ids get a per-chart prefix so that several charts in one page cannot resolve each
    other's markers and clip paths."""
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None})
    svg = _NAMESPACES.sub("", _METADATA.sub("", _PROLOG.sub("", buffer.getvalue(), count=1)))
    svg = re.sub(r'\bid="', f'id="{chart_id}-', svg)
    svg = svg.replace('href="#', f'href="#{chart_id}-').replace("url(#", f"url(#{chart_id}-")
    return svg.replace("<svg", f'<svg class="chart" id="{chart_id}" role="img"', 1)
