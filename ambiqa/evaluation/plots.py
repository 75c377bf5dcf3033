"""PNG plots for evaluation reports (matplotlib, no display needed).

Figures are built on :class:`matplotlib.figure.Figure` directly, never through ``pyplot``:
pyplot keeps global state and picks a GUI backend, which a library must not do behind its
caller's back (and which fails on a headless machine). Saving renders with the Agg canvas.
Every file is written atomically, so a report never links a half-written image.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ambiqa.fsutil import atomic_write


def _figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110)
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: Path) -> Path:
    path = Path(path)
    fig.tight_layout()
    atomic_write(path, lambda fh: fig.savefig(fh, format="png"), mode="wb")
    return path


def _log_x(ax: Any) -> None:
    """Log x axis with plain major labels and no crowded minor labels."""
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())


def metric_distributions(values: Mapping[str, Sequence[float]], path: Path,
                         title: str = "") -> Path:
    """One histogram per metric, with the mean marked: where a run's scores pile up (a
    mean of 0.3 from many zeros and a few ones reads differently from 0.3 everywhere)."""
    names = [n for n, v in values.items() if v]
    cols = min(3, max(1, len(names)))
    rows = max(1, math.ceil(len(names) / cols))
    fig = _figure(3.6 * cols, 2.8 * rows)
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax in axes.flat[len(names):]:
        ax.set_visible(False)
    for ax, name in zip(axes.flat, names, strict=False):
        vals = [float(v) for v in values[name] if not math.isnan(float(v))]
        unit = all(0.0 <= v <= 1.0 for v in vals)
        ax.hist(vals, bins=10 if unit else 15, range=(0.0, 1.0) if unit else None,
                color="#4C72B0", edgecolor="white")
        mean = sum(vals) / len(vals) if vals else float("nan")
        ax.axvline(mean, color="#C44E52", linestyle="--", linewidth=1.2)
        ax.set_title(f"{name} (mean {mean:.3f}, n={len(vals)})", fontsize=9)
        ax.set_ylabel("examples", fontsize=8)
        ax.tick_params(labelsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def quality_vs_cost(points: Sequence[Mapping[str, Any]], path: Path, *, xlabel: str,
                    ylabel: str, title: str = "", log_x: bool = True) -> Path:
    """Each point a run: ``{"label", "x", "y", "lo", "hi"}`` (lo/hi: the 95% CI of y).

    The layout of Diva's Fig. 1: cost on x (log scale: methods differ by orders of
    magnitude), quality on y, so the upper left is better.
    """
    fig = _figure(6.4, 4.4)
    ax = fig.subplots()
    for i, p in enumerate(points):
        x, y = float(p["x"]), float(p["y"])
        if math.isnan(x) or math.isnan(y):
            continue
        lo, hi = p.get("lo"), p.get("hi")
        yerr = None
        if lo is not None and hi is not None and not (math.isnan(lo) or math.isnan(hi)):
            yerr = [[max(0.0, y - lo)], [max(0.0, hi - y)]]
        ax.errorbar([x], [y], yerr=yerr, fmt="o", capsize=3, color=f"C{i % 10}",
                    label=str(p["label"]))
        ax.annotate(str(p["label"]), (x, y), textcoords="offset points", xytext=(5, 5),
                    fontsize=8)
    xs = [float(p["x"]) for p in points if float(p["x"]) > 0]
    if log_x and xs and max(xs) / min(xs) > 10:
        _log_x(ax)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    if title:
        ax.set_title(title, fontsize=10)
    return _save(fig, path)


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
