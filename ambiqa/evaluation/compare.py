"""Compare runs side by side, with paired differences on the examples they share.

Two runs on the same questions are compared per question, not by their two means: the paired
difference removes the spread between easy and hard questions, so its bootstrap interval is
much narrower than the two separate intervals suggest. Runs on different data sets or splits
measure different things and are refused, and so are reader-scored metrics (D-F1, DR) of runs
scored by different readers unless the caller allows it. A failed question scores 0 on its
side; DR is recomputed from the set means in every resample (:mod:`ambiqa.evaluation.stats`).

``compare_runs`` returns a plain dict (also written as ``comparison.json``);
``write_comparison`` renders it as ``compare.md`` plus ``quality_vs_cost.png``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ambiqa.errors import ConfigError
from ambiqa.evaluation.report import COST_KEYS, Run, load_run
from ambiqa.evaluation.runner import PER_ROW_ONLY, summarize, write_error
from ambiqa.fsutil import atomic_write_json, atomic_write_text


def _scores(run: Run, metric: str) -> dict[str, float]:
    """Per-question scores of ``metric`` on every example the run holds, failed ones as 0."""
    from ambiqa.evaluation.stats import part_arrays

    ids, (values, *_) = part_arrays(run.rows, metric)
    return dict(zip(ids, values, strict=True))


def _labels(runs: list[Run]) -> list[str]:
    labels = [r.label for r in runs]
    if len(set(labels)) < len(labels):  # same program twice: tell them apart by directory
        labels = [f"{r.label} ({r.path.name})" if labels.count(r.label) > 1 else r.label
                  for r in runs]
    return labels


def check_same_data(runs: list[Run]) -> str:
    """The shared data set and split of ``runs`` (``asqa:dev``); refuse a mix."""
    datasets = {r.spec.dataset for r in runs}
    if len(datasets) != 1 or "" in datasets:
        listing = ", ".join(f"{r.path} is {r.spec.data or 'unknown'}" for r in runs)
        raise ConfigError(f"runs are on different data sets or splits ({listing}); paired "
                          "differences need the same questions",
                          hint="compare runs of one data set and split at a time")
    return datasets.pop()


def check_same_reader(runs: list[Run], metrics: Sequence[str]) -> None:
    """Refuse to pair reader-scored metrics (D-F1, DR) of runs scored by different readers."""
    from ambiqa.evaluation.registry import NEEDS_READER

    if not set(metrics) & NEEDS_READER:
        return
    readers = {r.spec.reader for r in runs}
    if len(readers) > 1:
        listing = ", ".join(f"{r.path} by {r.spec.reader or 'an unrecorded reader'}"
                            for r in runs)
        raise ConfigError(f"the runs' D-F1 was scored by different readers ({listing}); "
                          "their differences would mix the method with the reader",
                          hint="rescore with one reader, compare other metrics (--metrics), "
                               "or pass --allow-reader-mismatch")


def compare_runs(paths: Sequence[str | Path], metrics: Sequence[str] | None = None,
                 baseline: int = 0, *, allow_reader_mismatch: bool = False) -> dict[str, Any]:
    """Side-by-side summary of runs and paired differences against ``runs[baseline]``.

    Differences are paired on the questions both runs hold, a failed question scoring 0;
    set-level metrics (DR) are recomputed from the set means in every bootstrap resample.
    """
    from ambiqa.evaluation.stats import paired_comparison

    if len(paths) < 2:
        raise ConfigError("compare needs at least two run directories")
    runs = [load_run(p) for p in paths]
    dataset = check_same_data(runs)
    if not 0 <= baseline < len(runs):
        raise ConfigError(f"--baseline {baseline} is out of range (0..{len(runs) - 1})")
    if metrics:
        names = list(metrics)
        for name in names:
            missing = [str(r.path) for r in runs if name not in r.metric_names]
            if missing:
                raise ConfigError(f"metric {name!r} is not in run(s) {', '.join(missing)}",
                                  hint="compare a metric every run scored")
    else:
        names = [n for n in runs[0].metric_names if all(n in r.metric_names for r in runs)
                 and n not in PER_ROW_ONLY]
        if not names:
            raise ConfigError("the runs share no metric", hint="pass --metrics")
    if not allow_reader_mismatch:
        check_same_reader(runs, names)
    labels = _labels(runs)
    out_readers_differ = len({r.spec.reader for r in runs}) > 1
    out: dict[str, Any] = {"dataset": dataset, "metrics": names, "baseline": labels[baseline],
                           "runs": [], "paired": [], "consistency": None,
                           "reader_mismatch_allowed": bool(allow_reader_mismatch
                                                           and out_readers_differ)}
    for run, label in zip(runs, labels, strict=True):
        s = summarize(run.rows, names)
        out["runs"].append({"label": label, "path": str(run.path), "data": run.spec.data,
                            "lm": run.spec.lm, "reader": run.spec.reader,
                            "index": run.spec.index, "n": s["n"], "n_errors": s["n_errors"],
                            "metrics": s["metrics"], "cost": s["cost"]})
    base = runs[baseline]
    for run, label in zip(runs, labels, strict=True):
        if run is base:
            continue
        for name in names:
            out["paired"].append({"run": label, **paired_comparison(base.rows, run.rows,
                                                                    name)})
    if "em" in names and len(runs) >= 2:
        out["consistency"] = _consistency(runs, labels)
    return out


def _consistency(runs: list[Run], labels: list[str]) -> dict[str, Any] | None:
    """RWR / MRWR / MRLR between runs (EoR eq. 1-3 read across programs), EM >= 1 as
    "right", on the questions every run answered."""
    from ambiqa.evaluation import metrics as m

    per = [{i: v for i, v in _scores(r, "em").items() if i not in _failed_ids(r)}
           for r in runs]
    shared = sorted(set.intersection(*(set(p) for p in per)))
    if not shared:
        return None
    answers = {label: ["1" if p[i] >= 1.0 else "0" for i in shared]
               for label, p in zip(labels, per, strict=True)}
    rwr = m.rwr_matrix(answers, [["1"]] * len(shared))
    return {"n": len(shared), "rwr": rwr, "mrwr": m.mrwr(rwr), "mrlr": m.mrlr(rwr)}


def _failed_ids(run: Run) -> set[str]:
    return {str(r["id"]) for r in run.rows if r.get("error")}


def _fmt(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def render_comparison(result: dict[str, Any], plot: str | None) -> str:
    from ambiqa.evaluation.stats import fmt_interval

    names = result["metrics"]
    lines = [f"# Comparison on {result['dataset']}", "",
             "## Side by side (each run on all its examples)", "",
             "| run | n | failed | " + " | ".join(names) + " | "
             + " | ".join(f"{n} excl. failed" for n in names) + " | "
             + " | ".join(COST_KEYS.values()) + " |",
             "|---|---:|---:|" + "---|" * len(names) + "---:|" * len(names)
             + "---:|" * len(COST_KEYS)]
    for r in result["runs"]:
        cells = [f"{_fmt(r['metrics'][n]['mean'])} {fmt_interval(*r['metrics'][n]['ci95'])}"
                 for n in names]
        excl = [_fmt(r["metrics"][n].get("mean_excl_failed")) for n in names]
        costs = [_fmt(float(r["cost"].get(k, 0.0)), 2 if k.endswith("_s") else 1)
                 for k in COST_KEYS]
        lines.append(f"| {r['label']} | {r['n']} | {r['n_errors']} | " + " | ".join(cells)
                     + " | " + " | ".join(excl) + " | " + " | ".join(costs) + " |")
    lines += ["", "Metric cells: value over all n questions, a failed question scoring 0, "
              "with its 95% BCa bootstrap interval [low, high] (questions resampled); "
              "DR = sqrt(mean D-F1 × mean ROUGE-L) over the set, as the ASQA scorer "
              "defines it. \"excl. failed\": the same value over the questions that did "
              "not fail. Cost columns: means per question.",
              "", f"## Paired differences against {result['baseline']}", "",
              "On the questions both runs hold, a failed question scoring 0 on its side. "
              "Δ = run − baseline; interval: paired BCa bootstrap over those questions "
              "(DR recomputed from the resampled set means); * = the interval excludes 0.", "",
              "| run | metric | n shared | failed (baseline / run) | baseline | run | Δ | "
              "95% CI |", "|---|---|---:|---|---:|---:|---:|---|"]
    for p in result["paired"]:
        star = " *" if p["excludes_zero"] else ""
        failed = p.get("failed") or {}
        lines.append(f"| {p['run']} | {p['metric']} | {p['n_shared']} | "
                     f"{failed.get('baseline', 0)} / {failed.get('run', 0)} | "
                     f"{_fmt(p['baseline_mean'])} | {_fmt(p['run_mean'])} | "
                     f"{_fmt(p['diff'])}{star} | {fmt_interval(*p['ci95'])} |")
    cons = result.get("consistency")
    if cons:
        lines += ["", "## Consistency between runs (EoR eq. 1-3, EM = 1 counts as right)", "",
                  f"{cons['n']} questions every run answered.", "",
                  "| run | MRWR | MRLR |", "|---|---:|---:|"]
        for label in cons["rwr"]:
            lines.append(f"| {label} | {_fmt(cons['mrwr'][label])} | "
                         f"{_fmt(cons['mrlr'][label])} |")
    readers = {r["reader"] for r in result["runs"] if r.get("reader")}
    lms = {r["lm"] for r in result["runs"] if r.get("lm")}
    lines += ["", "## Setup", ""]
    lines += [f"- LM: {', '.join(f'`{x}`' for x in sorted(lms)) or 'not recorded'}"]
    if readers:
        lines.append(f"- D-F1 reader: {', '.join(f'`{x}`' for x in sorted(readers))}")
    if result.get("reader_mismatch_allowed"):
        lines.append("- **Paired despite different D-F1 readers (--allow-reader-mismatch): "
                     "D-F1 and DR differences mix the method with the reader.**")
    if len(lms) > 1 or len(readers) > 1:
        lines.append("- **The runs used different LMs or readers: differences mix the "
                     "method with the model.**")
    for r in result["runs"]:
        lines.append(f"- {r['label']}: `{r['path']}` ({r['data']})")
    if plot:
        lines += ["", f"![quality vs cost]({plot})"]
    return "\n".join(lines) + "\n"


def write_comparison(result: dict[str, Any], out_dir: str | Path,
                     quality_metric: str | None = None) -> Path:
    """Write ``compare.md``, ``comparison.json`` and ``quality_vs_cost.png`` into ``out_dir``."""
    from ambiqa.evaluation.report import json_safe

    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create output directory {out_dir}: "
                          f"{exc.strerror or exc}") from exc
    metric = quality_metric or result["metrics"][0]
    plot_rel: str | None = None
    try:
        from ambiqa.evaluation import plots

        points = [{"label": r["label"], "x": float(r["cost"].get("lm_calls", 0.0)),
                   "y": r["metrics"][metric]["mean"], "lo": r["metrics"][metric]["ci95"][0],
                   "hi": r["metrics"][metric]["ci95"][1]} for r in result["runs"]]
        plots.quality_vs_cost(points, out_dir / "quality_vs_cost.png",
                              xlabel="LM calls per question", ylabel=metric,
                              title=f"{metric} vs cost on {result['dataset']}")
        plot_rel = "quality_vs_cost.png"
    except OSError as exc:
        raise write_error(out_dir / "quality_vs_cost.png", exc) from exc
    except Exception:  # no matplotlib: the tables still render
        plot_rel = None
    try:
        atomic_write_json(out_dir / "comparison.json", json_safe(result))
        atomic_write_text(out_dir / "compare.md", render_comparison(result, plot_rel))
    except OSError as exc:
        raise write_error(out_dir, exc) from exc
    return out_dir / "compare.md"
