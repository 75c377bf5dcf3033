"""PNG plots for evaluation reports (matplotlib, no display needed).

Figures are built on :class:`matplotlib.figure.Figure` directly, never through ``pyplot``:
pyplot keeps global state and picks a GUI backend, which a library must not do behind its
caller's back (and which fails on a headless machine). Saving renders with the Agg canvas.
Every file is written atomically, so a report never links a half-written image.

A plot draws numbers it is given, never numbers it computes: the report and comparison
compute each value, interval and mean once and hand the same dicts to the table and to the
plot. The artists that carry those numbers get a ``gid`` (``value:dr``, ``ci:dr``,
``diff:RUN|METRIC``, ``point:RUN`` ...) so a test can read back what was drawn and compare
it with the table beside it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ambiqa.fsutil import atomic_write

try:  # matplotlib is a dependency; a broken install makes the report note it, not fail
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator
except ImportError:  # pragma: no cover
    Line2D = Patch = MaxNLocator = None  # type: ignore[assignment,misc]

#: colours: neutral data, a set-level value, its interval, failures, a reference
BLUE, RED, BAND, GREY, GREEN = "#4C72B0", "#C44E52", "#F2B8B8", "#9AA3AD", "#2E8B57"


def _figure(width: float, height: float, layout: str | None = None) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110, layout=layout)
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: Path, *, layout: bool = True) -> Path:
    path = Path(path)
    if layout:
        fig.tight_layout()
    atomic_write(path, lambda fh: fig.savefig(fh, format="png"), mode="wb")
    return path


def _log_x(ax: Any) -> None:
    """Log x axis with plain major labels and no crowded minor labels."""
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())


def _finite(*xs: Any) -> bool:
    try:
        return all(x is not None and not math.isnan(float(x)) for x in xs)
    except (TypeError, ValueError):
        return False


def _grid(n: int, cols: int) -> tuple[int, int]:
    cols = min(cols, max(1, n))
    return max(1, math.ceil(n / cols)), cols


# ------------------------------------------------------------------ run report


def headline_distributions(panels: Sequence[Mapping[str, Any]], path: Path,
                           title: str = "") -> Path:
    """One panel per headline metric: the per-question distribution with the set-level value
    (solid line) and its 95% interval (shaded) marked on it.

    Each panel: ``name``, ``value``, ``lo``, ``hi`` (the table's headline and interval),
    ``scores`` (per-question values of the quantity histogrammed, over the questions that
    did not fail), ``failed`` (how many failed: drawn at 0, as they score), ``quantity``
    (what is histogrammed, e.g. ``dr_q = sqrt(D-F1 x ROUGE-L) per question``) and, where
    the set-level value is not the mean of that quantity (DR), ``quantity_mean`` (drawn
    dotted, so the difference is seen).
    """
    names = [p for p in panels if p.get("scores") or p.get("failed")]
    rows, cols = _grid(len(names), 3)
    fig = _figure(4.2 * cols, 3.3 * rows)
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax in axes.flat[len(names):]:
        ax.set_visible(False)
    for ax, p in zip(axes.flat, names, strict=False):
        ok = [float(v) for v in p["scores"]]
        failed = int(p.get("failed", 0) or 0)
        bad = [0.0] * failed
        unit = all(0.0 <= v <= 1.0 for v in ok)
        ax.hist([ok, bad] if failed else [ok], bins=20 if unit else 15,
                range=(0.0, 1.0) if unit else None, stacked=True,
                color=[BLUE, GREY] if failed else [BLUE], edgecolor="white",
                )
        value, lo, hi = p.get("value"), p.get("lo"), p.get("hi")
        if _finite(lo, hi):
            ax.axvspan(float(lo), float(hi), color=BAND, alpha=0.55, zorder=0,
                       gid=f"ci:{p['name']}")
        if _finite(value):
            ax.axvline(float(value), color=RED, linewidth=2.0, gid=f"value:{p['name']}")
        qmean = p.get("quantity_mean")
        if _finite(qmean):
            ax.axvline(float(qmean), color="black", linestyle=":", linewidth=1.4,
                       gid=f"quantity_mean:{p['name']}")
        interval = f" [{float(lo):.3f}, {float(hi):.3f}]" if _finite(lo, hi) else ""
        vtext = f"{float(value):.3f}" if _finite(value) else "–"
        ax.set_title(f"{p['name']} = {vtext}{interval}", fontsize=10)
        ax.set_xlabel(str(p.get("quantity") or f"{p['name']} per question"), fontsize=8)
        ax.set_ylabel("questions", fontsize=8)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.tick_params(labelsize=8)
        if _finite(qmean):
            ax.annotate(f"mean of {p.get('quantity_name', 'per-question')} "
                        f"{float(qmean):.3f}", xy=(float(qmean), 1.0),
                        xycoords=("data", "axes fraction"), xytext=(3, -10),
                        textcoords="offset points", fontsize=7.5, ha="left")
    handles = [Patch(color=BLUE, label="questions (histogram)"),
               Patch(color=BAND, alpha=0.55, label="95% interval (bootstrap)"),
               Line2D([], [], color=RED, linewidth=2, label="set-level value (the table's)")]
    if any(p.get("failed") for p in names):
        handles.append(Patch(color=GREY, label="failed questions (scored 0)"))
    if any(_finite(p.get("quantity_mean")) for p in names):
        handles.append(Line2D([], [], color="black", linestyle=":",
                              label="mean of the per-question quantity"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8,
               frameon=False)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0.05 if rows > 1 else 0.09, 1, 1))
    return _save(fig, path, layout=False)


def cost_distributions(panels: Sequence[Mapping[str, Any]], path: Path,
                       title: str = "") -> Path:
    """Per-question cost and latency: one histogram per quantity with its mean (solid) and
    median (dashed) marked. Each panel: ``key``, ``label``, ``values``, ``mean``,
    ``median``, ``p90``."""
    use = [p for p in panels if p.get("values")]
    rows, cols = _grid(len(use), 3)
    fig = _figure(4.2 * cols, 3.0 * rows)
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax in axes.flat[len(use):]:
        ax.set_visible(False)
    for ax, p in zip(axes.flat, use, strict=False):
        vals = [float(v) for v in p["values"]]
        distinct = sorted(set(vals))
        if len(distinct) <= 12 and all(v == int(v) for v in distinct):  # counts: one bar each
            lo, hi = min(distinct), max(distinct)
            ax.hist(vals, bins=[x - 0.5 for x in range(int(lo), int(hi) + 2)], color=BLUE,
                    edgecolor="white", rwidth=0.8)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        else:
            ax.hist(vals, bins=15, color=BLUE, edgecolor="white")
        if _finite(p.get("mean")):
            ax.axvline(float(p["mean"]), color=RED, linewidth=2.0, gid=f"mean:{p['key']}",
                       label=f"mean {p.get('mean_text') or _num(p['mean'])}")
        if _finite(p.get("median")):
            ax.axvline(float(p["median"]), color="black", linestyle="--", linewidth=1.2,
                       gid=f"median:{p['key']}",
                       label=f"median {p.get('median_text') or _num(p['median'])}")
        ax.set_title(f"{p['label']} per question", fontsize=10)
        ax.set_xlabel(str(p.get("unit") or p["label"]), fontsize=8)
        ax.set_ylabel("questions", fontsize=8)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.tick_params(labelsize=8)
        ax.legend(fontsize=7, loc="upper right", framealpha=0.85)
    if title:
        fig.suptitle(title, fontsize=11)
    return _save(fig, path)


def _num(x: Any) -> str:
    x = float(x)
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.2f}" if abs(x) < 10 else f"{x:.1f}"


# ------------------------------------------------------------------ comparisons


def forest(rows: Sequence[Mapping[str, Any]], path: Path, *, reference: str,
           metrics: Sequence[str], title: str = "") -> Path:
    """Paired differences as a forest plot: one panel per metric, one row per program,
    the difference (dot) with its 95% paired interval (bar), a zero line, and the numbers
    written beside each row. A row whose interval excludes 0 is drawn solid (green above
    the reference, red below); one whose interval reaches 0 is hollow and grey.

    Each row: ``run``, ``metric``, ``diff``, ``lo``, ``hi``, ``n``, ``excludes_zero``.
    """
    metrics = [m for m in metrics if any(r["metric"] == m for r in rows)]
    runs: list[str] = []
    for r in rows:
        if r["run"] not in runs:
            runs.append(r["run"])
    n_panels = max(1, len(metrics))
    prows, pcols = _grid(n_panels, 2 if n_panels > 2 else n_panels)
    label_w = max(len(x) for x in runs) if runs else 8
    fig = _figure(pcols * (5.6 + 0.06 * label_w), prows * (0.36 * len(runs) + 1.35) + 0.6,
                  layout="constrained")
    # each panel is a plot and, right of it, a column holding the row's numbers
    outer = fig.add_gridspec(prows, pcols)
    panels = []
    for k in range(prows * pcols):
        row, col = divmod(k, pcols)
        inner = outer[row, col].subgridspec(1, 2, width_ratios=[3.0, 1.45], wspace=0.0)
        ax = fig.add_subplot(inner[0, 0])
        numbers = fig.add_subplot(inner[0, 1], sharey=ax)
        numbers.axis("off")
        if k >= n_panels:
            ax.set_visible(False)
            numbers.set_visible(False)
        panels.append((ax, numbers))
    for (ax, numbers), metric in zip(panels, metrics, strict=False):
        mine = {r["run"]: r for r in rows if r["metric"] == metric}
        spans = [float(v) for r in mine.values() for v in (r.get("lo"), r.get("hi"),
                                                          r.get("diff")) if _finite(v)]
        reach = max([abs(v) for v in spans] + [0.01])
        for y, run in enumerate(runs):
            r = mine.get(run)
            if r is None or not _finite(r.get("diff")):
                continue
            d = float(r["diff"])
            sig = bool(r.get("excludes_zero"))
            color = (GREEN if d > 0 else RED) if sig else GREY
            if _finite(r.get("lo"), r.get("hi")):
                ax.plot([float(r["lo"]), float(r["hi"])], [y, y], color=color, linewidth=2.2,
                        solid_capstyle="butt", gid=f"ci:{run}|{metric}")
            ax.plot([d], [y], "o", markersize=7, color=color,
                    markerfacecolor=color if sig else "white", markeredgewidth=1.6,
                    gid=f"diff:{run}|{metric}", zorder=3)
            interval = (f" [{float(r['lo']):+.3f}, {float(r['hi']):+.3f}]"
                        if _finite(r.get("lo"), r.get("hi")) else " [–]")
            numbers.text(0.04, y, f"{d:+.3f}{interval}  n={r.get('n', '?')}", va="center",
                         fontsize=7.5, color="black" if sig else "#57606a",
                         transform=numbers.get_yaxis_transform())
        ax.axvline(0.0, color="black", linewidth=1.0, gid=f"zero:{metric}")
        ax.set_xlim(-1.12 * reach, 1.12 * reach)
        ax.xaxis.set_major_locator(MaxNLocator(nbins=6, symmetric=True))
        ax.set_ylim(len(runs) - 0.5, -0.5)
        ax.set_yticks(range(len(runs)), runs, fontsize=8.5)
        ax.tick_params(axis="x", labelsize=8)
        ax.grid(True, axis="x", alpha=0.3)
        ax.set_title(f"Δ {metric}", fontsize=10, loc="left")
        ax.set_xlabel(f"{metric}: program − {reference}", fontsize=8)
    fig.suptitle(title or f"Paired differences against {reference} (reference; Δ with 95% "
                          "paired bootstrap interval)", fontsize=10.5)
    fig.legend(handles=[
        Line2D([], [], marker="o", color=GREEN, linewidth=2.2, markersize=7,
               label=f"above {reference}, interval excludes 0"),
        Line2D([], [], marker="o", color=RED, linewidth=2.2, markersize=7,
               label=f"below {reference}, interval excludes 0"),
        Line2D([], [], marker="o", color=GREY, linewidth=2.2, markersize=7,
               markerfacecolor="white", label="interval reaches 0")],
        loc="outside lower center", ncol=3, fontsize=8, frameon=False)
    return _save(fig, path, layout=False)


def quality_vs_cost(points: Sequence[Mapping[str, Any]], path: Path, *, xlabel: str,
                    ylabel: str, title: str = "", log_x: bool = True,
                    reference: str | None = None, note: str = "") -> Path:
    """Each point a run: ``{"label", "x", "y", "lo", "hi"}`` (lo/hi: the run's own 95%
    interval of y), optionally ``text`` (what to write beside it, default the label),
    ``excludes_zero`` / ``diff`` (its paired difference from the
    reference on the same metric, which the marker shows: solid green above, solid red
    below, hollow when the paired interval reaches 0).

    The layout of Diva's Fig. 1: cost on x (log scale when runs differ tenfold), quality on
    y, so the upper left is better. The reference is a star with a dotted level line.
    """
    fig = _figure(7.2, 4.8)
    ax = fig.subplots()
    drawn: list[float] = []
    labels: list[tuple[str, float, float]] = []
    for i, p in enumerate(points):
        if not _finite(p.get("x"), p.get("y")):
            continue
        x, y = float(p["x"]), float(p["y"])
        drawn.append(x)
        label = str(p["label"])
        is_ref = reference is not None and label == reference
        if "excludes_zero" in p or is_ref:
            sig = bool(p.get("excludes_zero"))
            color = "black" if is_ref else ((GREEN if float(p.get("diff") or 0) > 0 else RED)
                                            if sig else GREY)
            face = color if (sig or is_ref) else "white"
        else:
            color = face = f"C{i % 10}"
        if _finite(p.get("lo"), p.get("hi")):
            ax.plot([x, x], [float(p["lo"]), float(p["hi"])], color=color, alpha=0.55,
                    linewidth=1.6, gid=f"ci:{label}")
        ax.plot([x], [y], "*" if is_ref else "o", markersize=13 if is_ref else 8, color=color,
                markerfacecolor=face, markeredgewidth=1.5, gid=f"point:{label}", zorder=3)
        if is_ref:
            ax.axhline(y, color="black", linestyle=":", linewidth=0.9, alpha=0.7)
        labels.append((str(p.get("text") or label), x, y))
    xs = [x for x in drawn if x > 0]
    if log_x and xs and max(xs) / min(xs) > 10:
        _log_x(ax)
    _place_labels(ax, labels)
    if any("excludes_zero" in p for p in points):
        handles = [Line2D([], [], marker="o", linestyle="", color=GREEN, markersize=7,
                          label="paired Δ > 0 (interval excludes 0)"),
                   Line2D([], [], marker="o", linestyle="", color=RED, markersize=7,
                          label="paired Δ < 0 (interval excludes 0)"),
                   Line2D([], [], marker="o", linestyle="", color=GREY, markersize=7,
                          markerfacecolor="white", label="paired interval reaches 0")]
        if reference is not None:
            handles.insert(0, Line2D([], [], marker="*", linestyle="", color="black",
                                     markersize=10, label=f"reference ({reference})"))
        ax.legend(handles=handles, fontsize=7, loc="best", framealpha=0.85)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    if title:
        ax.set_title(title, fontsize=10)
    if note:
        fig.text(0.01, 0.01, note, fontsize=7, color="#57606a", ha="left", va="bottom",
                 wrap=True)
        fig.tight_layout(rect=(0, 0.07, 1, 1))
    return _save(fig, path)


def _place_labels(ax: Any, labels: Sequence[tuple[str, float, float]],
                  fontsize: float = 8) -> None:
    """Label points without labels overlapping: each label starts right of its point and
    steps down (then up) in display space until its box is clear of the ones placed; a
    moved label gets a thin leader line to its point."""
    ax.autoscale_view()
    fig = ax.figure
    px = fig.dpi / 72.0
    h = (fontsize + 3) * px
    boxes: list[tuple[float, float, float, float]] = []
    for text, x, y in sorted(labels, key=lambda t: -t[2]):
        dx, dy = ax.transData.transform((x, y))
        w = (0.62 * fontsize * len(text) + 4) * px
        x0 = dx + 6 * px
        chosen = 4.0
        for off in [4.0] + [4.0 + 11.0 * k * sgn for k in range(1, 12) for sgn in (-1, 1)]:
            y0 = dy + off * px - h / 2
            box = (x0, y0, x0 + w, y0 + h)
            if not any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3]
                       for b in boxes):
                chosen = off
                boxes.append(box)
                break
        ax.annotate(text, (x, y), textcoords="offset points", xytext=(6, chosen),
                    fontsize=fontsize, va="center",
                    arrowprops=({"arrowstyle": "-", "color": "#9AA3AD", "linewidth": 0.6}
                                if abs(chosen - 4.0) > 1 else None))


def quality_vs_cost_panels(panels: Sequence[Mapping[str, Any]], path: Path,
                           title: str = "") -> Path:
    """Several quality-vs-cost panels side by side (one per data set), each
    ``{"title", "xlabel", "ylabel", "points"}`` as in :func:`quality_vs_cost`."""
    n = max(1, len(panels))
    fig = _figure(5.2 * n, 4.2)
    axes = fig.subplots(1, n, squeeze=False)[0]
    for ax, panel in zip(axes, panels, strict=False):
        pts = [p for p in panel["points"]
               if not (math.isnan(float(p["x"])) or math.isnan(float(p["y"])))]
        for i, p in enumerate(pts):
            x, y = float(p["x"]), float(p["y"])
            lo, hi = p.get("lo"), p.get("hi")
            yerr = None
            if lo is not None and hi is not None and not (math.isnan(lo) or math.isnan(hi)):
                yerr = [[max(0.0, y - lo)], [max(0.0, hi - y)]]
            ax.errorbar([x], [y], yerr=yerr, fmt="o", capsize=3, color=f"C{i % 10}")
            ax.annotate(str(p["label"]), (x, y), textcoords="offset points", xytext=(5, 5),
                        fontsize=8)
        xs = [float(p["x"]) for p in pts if float(p["x"]) > 0]
        if xs and max(xs) / min(xs) > 10:
            _log_x(ax)
        ax.set_xlabel(panel.get("xlabel", "cost"))
        ax.set_ylabel(panel.get("ylabel", "quality"))
        ax.set_title(panel.get("title", ""), fontsize=10)
        ax.grid(True, alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=11)
    return _save(fig, path)


def heatmap(matrix: Mapping[str, Mapping[str, float]], path: Path, title: str = "") -> Path:
    """RWR-style heatmap: row i, column j holds ``matrix[i][j]`` (diagonal left blank)."""
    import numpy as np

    labels = list(matrix)
    n = len(labels)
    data = np.full((n, n), np.nan)
    for a, i in enumerate(labels):
        for b, j in enumerate(labels):
            if i != j and j in matrix[i]:
                data[a, b] = matrix[i][j]
    size = max(3.5, 0.7 * n + 2.0)
    fig = _figure(size + 1.0, size)
    ax = fig.subplots()
    im = ax.imshow(data, cmap="viridis", vmin=0.0, vmax=1.0)
    ax.set_xticks(range(n), labels, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(n), labels, fontsize=8)
    for a in range(n):
        for b in range(n):
            if not np.isnan(data[a, b]):
                ax.text(b, a, f"{data[a, b]:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if data[a, b] < 0.6 else "black")
    ax.set_xlabel("j (loses)")
    ax.set_ylabel("i (wins)")
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    if title:
        ax.set_title(title, fontsize=10)
    return _save(fig, path)
