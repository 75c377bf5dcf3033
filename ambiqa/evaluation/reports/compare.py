"""Compare runs side by side, with paired differences on the examples they share.

Two runs on the same questions are compared per question, not by their two means: the paired
difference removes the spread between easy and hard questions, so its bootstrap interval is
much narrower than the two separate intervals suggest. Runs on different data sets or splits
measure different things and are refused, and so are reader-scored metrics (D-F1, DR) of runs
scored by different readers unless the caller allows it. A failed question scores 0 on its
side; DR is recomputed from the set means in every resample (:mod:`ambiqa.evaluation.stats`).

``compare_runs`` returns a plain dict (also written as ``comparison.json``);
``write_comparison`` renders it as ``compare.md`` and one self-contained ``compare.html``
(:mod:`ambiqa.evaluation.reports.html`), with two plots drawn from the same entries as the tables:
``forest.png``, the paired differences as a forest plot (the evidence a decision rests on),
and ``quality_vs_cost.png``, the data set's main metric (DR on ASQA, F1 on short-answer sets)
against LM calls, computed tokens or seconds per question.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ambiqa.errors import ConfigError
from ambiqa.evaluation import metrics as m
from ambiqa.evaluation.registry import NEEDS_READER, canonical_name
from ambiqa.evaluation.reports.html import (
    Bold,
    Bullets,
    Code,
    Document,
    Heading,
    Image,
    Para,
    Table,
)
from ambiqa.evaluation.reports.report import (
    COST_KEYS,
    Run,
    cost_stats,
    json_safe,
    load_run,
    main_metric,
)
from ambiqa.evaluation.runs.runner import PER_ROW_ONLY, summarize, write_error
from ambiqa.evaluation.stats import fmt_interval, paired_comparison, part_arrays
from ambiqa.fsutil import atomic_write_json, atomic_write_text


def _scores(run: Run, metric: str) -> dict[str, float]:
    """Per-question scores of ``metric`` on every example the run holds, failed ones as 0."""
    ids, (values, *_) = part_arrays(run.rows, metric)
    return dict(zip(ids, values, strict=True))


#: ``--cost`` axes: name -> (cost key, axis label)
COST_AXES: dict[str, tuple[str, str]] = {
    "calls": ("lm_calls", "LM calls per question"),
    "tokens": ("tokens", "computed tokens per question"),
    "seconds": ("wall_s", "seconds per question (wall, as run)"),
}


def _labels(runs: list[Run]) -> list[str]:
    """Run names for tables and plots: the program, or a compiled artifact's file name
    without ``.json``; the same name twice is told apart by its directory."""
    labels = [r.label[:-5] if r.label.endswith(".json") else r.label for r in runs]
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
        costs = cost_stats(run.rows)
        out["runs"].append({"label": label, "path": str(run.path), "data": run.spec.data,
                            "lm": run.spec.lm, "reader": run.spec.reader,
                            "index": run.spec.index, "n": s["n"], "n_errors": s["n_errors"],
                            "metrics": s["metrics"],
                            "cost": {k: v["mean"] for k, v in costs.items()},
                            "cost_stats": costs, "setup": setup_of(run)})
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
    per = [{i: v for i, v in _scores(r, "em").items() if i not in _failed_ids(r)}
           for r in runs]
    shared = sorted(set.intersection(*(set(p) for p in per)))
    if not shared:
        return None
    answers = {label: ["1" if p[i] >= 1.0 else "0" for i in shared]
               for label, p in zip(labels, per, strict=True)}
    rwr = m.rwr_matrix(answers, [["1"]] * len(shared))
    return {"n": len(shared), "rwr": rwr, "mrwr": m.mrwr(rwr), "mrlr": m.mrlr(rwr)}


def setup_of(run: Run) -> dict[str, Any]:
    """What a run was, from its ``run.json``: program (an artifact by file name), data, LM,
    reader, index and its fingerprint, artifact hash, judge and program config."""
    spec = run.spec
    program = spec.program
    if program.endswith(".json"):
        program = Path(program).name
    return {"program": program, "data": spec.data, "lm": spec.lm, "reader": spec.reader,
            "index": spec.index, "index_fingerprint": spec.index_fingerprint,
            "artifact_sha256": spec.artifact_sha256, "judge": spec.judge,
            "program_config": spec.program_config,
            # generation settings and endpoint, recorded by newer runs
            **{k: getattr(spec, k, None) for k in ("max_tokens", "temperature", "endpoint")}}


def _lm_settings(setup: dict[str, Any]) -> str:
    """``max_tokens 512, temperature 0.0, endpoint http://host`` (what the run recorded)."""
    parts = [f"{k.replace('_', ' ')} {setup[k]}" for k in ("max_tokens", "temperature",
                                                             "endpoint")
             if setup.get(k) is not None]
    return ", ".join(parts) or "–"


def _failed_ids(run: Run) -> set[str]:
    return {str(r["id"]) for r in run.rows if r.get("error")}


def _fmt(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def _signed(x: Any) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:+.3f}"


def pick_metric(result: dict[str, Any], metric: str | None) -> str:
    """The quality axis: ``metric`` when given (it must be one the runs were compared on),
    else the data set's main metric (DR on ASQA, F1 on short-answer sets)."""
    names = list(result["metrics"])
    if metric:
        key = canonical_name(metric)
        if key not in names:
            raise ConfigError(f"--metric {metric!r} is not among the compared metrics "
                              f"({', '.join(names)})", hint="pick one of them, or pass it "
                                                            "in --metrics too")
        return key
    return main_metric(names) or names[0]


def quality_points(result: dict[str, Any], metric: str, cost: str) -> list[dict[str, Any]]:
    """One point per run for the quality-vs-cost plot: y and its interval from the
    side-by-side table's cells, x from its cost column, and the paired difference from the
    reference on ``metric`` (from the paired table) for the marker."""
    key = COST_AXES[cost][0]
    paired = {p["run"]: p for p in result["paired"] if p["metric"] == metric}
    points = []
    several_n = len({r["n"] for r in result["runs"]}) > 1
    for r in result["runs"]:
        m = r["metrics"][metric]
        point = {"label": r["label"], "x": float(r["cost"].get(key, math.nan)),
                 "y": m["mean"], "lo": m["ci95"][0], "hi": m["ci95"][1],
                 "text": f"{r['label']} (n={r['n']})" if several_n else r["label"]}
        p = paired.get(r["label"])
        if p is not None:
            point.update(diff=p["diff"], excludes_zero=p["excludes_zero"])
        points.append(point)
    return points


def forest_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The forest plot's rows, straight from the paired-differences table's entries."""
    return [{"run": p["run"], "metric": p["metric"], "diff": p["diff"],
             "lo": p["ci95"][0], "hi": p["ci95"][1], "n": p["n_shared"],
             "excludes_zero": p["excludes_zero"]} for p in result["paired"]]


def build_comparison(result: dict[str, Any], plots: dict[str, str] | None = None,
                     *, metric: str | None = None, cost: str = "calls") -> Any:
    """The comparison as a :class:`ambiqa.evaluation.reports.html.Document` (``compare.md`` and
    ``compare.html`` are its two renderings)."""
    plots = plots or {}
    names = result["metrics"]
    doc = Document(f"Comparison on {result['dataset']}")
    warnings = comparison_warnings(result)
    if warnings:  # first, before any number they qualify
        doc.add(Heading(2, "Warnings"), Bullets(warnings))
    cost_keys = list(COST_KEYS)
    headers = (["run", "n", "failed"] + list(names) + [f"{n} excl. failed" for n in names]
               + [COST_KEYS[k] for k in cost_keys])
    rows = []
    for r in result["runs"]:
        rows.append([r["label"], str(r["n"]), str(r["n_errors"])]
                    + [f"{_fmt(r['metrics'][n]['mean'])} {fmt_interval(*r['metrics'][n]['ci95'])}"
                       for n in names]
                    + [_fmt(r["metrics"][n].get("mean_excl_failed")) for n in names]
                    + [_fmt(float(r["cost"].get(k, 0.0)), 2 if k.endswith("_s") else 1)
                       for k in cost_keys])
    doc.add(Heading(2, "Side by side (each run on all its examples)"),
            Table(headers, rows, "lrr" + "n" * len(names) + "r" * (len(names) + len(cost_keys))),
            Para("Metric cells: value over all n questions, a failed question scoring 0, "
                 "with its 95% BCa bootstrap interval [low, high] (questions resampled); "
                 "DR = sqrt(mean D-F1 × mean ROUGE-L) over the set, as the ASQA scorer "
                 "defines it. \"excl. failed\": the same value over the questions that did "
                 "not fail. Cost columns: means per question; computed prompt tokens are the "
                 "prompt tokens the LM computed, not served from its prompt cache."))

    base = result["baseline"]
    doc.add(Heading(2, f"Paired differences against {base}"))
    if "forest" in plots:
        doc.add(Image(f"paired differences against {base}", plots["forest"]),
                Para(f"Forest plot of the table below: one row per program and metric, Δ "
                     f"against the reference {base} (dot) with its 95% paired interval (bar) "
                     "and the zero line. Solid green / red: the interval excludes 0 (above / "
                     "below the reference); hollow grey: it reaches 0. The numbers beside each "
                     "row are the table's; n = questions both runs hold.", css="note"))
    doc.add(Para("On the questions both runs hold, a failed question scoring 0 on its side. "
                 "Δ = run − baseline; interval: paired BCa bootstrap over those questions "
                 "(DR recomputed from the resampled set means); * = the interval excludes 0."),
            Table(["run", "metric", "n shared", "failed (baseline / run)", "baseline", "run",
                   "Δ", "95% CI"],
                  [[p["run"], p["metric"], str(p["n_shared"]),
                    f"{(p.get('failed') or {}).get('baseline', 0)} / "
                    f"{(p.get('failed') or {}).get('run', 0)}",
                    _fmt(p["baseline_mean"]), _fmt(p["run_mean"]),
                    f"{_fmt(p['diff'])}{' *' if p['excludes_zero'] else ''}",
                    fmt_interval(*p["ci95"])] for p in result["paired"]], "llrlrrrn"))

    if "quality vs cost" in plots:
        axis_label = COST_AXES[cost][1]
        doc.add(Heading(2, f"{metric} against cost"),
                Image(f"{metric} vs {axis_label}", plots["quality vs cost"]),
                Para(f"Each run at its {metric} (the side-by-side value, with the run's own 95% "
                     f"interval as a faint bar) and its {axis_label} (the matching cost column "
                     f"above{'; computed tokens = computed prompt + output tokens' if cost == 'tokens' else ''}). "  # noqa: E501
                     f"The marker shows the paired difference from {base} (star, dotted "
                     "level): solid green / red when the paired interval excludes 0, hollow "
                     "when it reaches 0 — the runs' own intervals overlap far more than the "
                     "paired ones, so read significance from the marker, not the bars. "
                     "Upper left is better.", css="note"))

    cons = result.get("consistency")
    if cons:
        doc.add(Heading(2, "Consistency between runs (EoR eq. 1-3, EM = 1 counts as right)"),
                Para(f"{cons['n']} questions every run answered."),
                Table(["run", "MRWR", "MRLR"],
                      [[label, _fmt(cons["mrwr"][label]), _fmt(cons["mrlr"][label])]
                       for label in cons["rwr"]], "lrr"))

    doc.add(Heading(2, "Setup"))
    setup_rows = []
    for r in result["runs"]:
        s = r.get("setup") or {}
        setup_rows.append([r["label"], Code(str(s.get("program") or r.get("label"))),
                           Code(str(r.get("data") or "–")), str(r["n"]),
                           _code_or(s.get("lm") or r.get("lm"), "not recorded"),
                           _lm_settings(s),
                           _code_or(s.get("reader") or r.get("reader"), "–"),
                           _code_or(s.get("index") or r.get("index"), "–"),
                           _code_or(s.get("index_fingerprint"), "–"),
                           _code_or((s.get("artifact_sha256") or "")[:12], "–"),
                           Code(r["path"])])
    doc.add(Table(["run", "program", "data", "n", "LM", "LM settings", "D-F1 reader", "index",
                   "index fingerprint", "artifact sha256", "run directory"], setup_rows,
                  "lllrlllllll"))
    return doc


def comparison_warnings(result: dict[str, Any]) -> list[Any]:
    """What qualifies every number of the comparison (runs on different LMs, readers or
    indexes; readers paired on purpose; an LM not recorded): shown at the top of compare.md
    and compare.html, so the output of ``ambiqa compare`` starts with them too."""
    notes: list[Any] = []
    if result.get("reader_mismatch_allowed"):
        notes.append(Bold("Paired despite different D-F1 readers (--allow-reader-mismatch): "
                          "D-F1 and DR differences mix the method with the reader."))
    for what, key in (("LMs", "lm"), ("D-F1 readers", "reader"), ("indexes", "index")):
        values = {str((r.get("setup") or {}).get(key) or r.get(key)) for r in result["runs"]
                  if (r.get("setup") or {}).get(key) or r.get(key)}
        if len(values) > 1:
            notes.append(Bold(f"The runs used different {what} ({', '.join(sorted(values))}): "
                              "differences mix the method with the setting."))
    unrecorded = [r["label"] for r in result["runs"]
                  if not ((r.get("setup") or {}).get("lm") or r.get("lm"))]
    if unrecorded:
        notes.append(f"LM not recorded in run.json for {', '.join(unrecorded)} (runs started "
                     "without --lm, before ambiqa recorded the default it used)")
    return notes


def _code_or(value: Any, missing: str) -> Any:
    return Code(str(value)) if value else missing


def render_comparison(result: dict[str, Any], plot: str | None) -> str:
    """``compare.md`` with at most the quality-vs-cost plot (kept for callers of the old
    API; :func:`write_comparison` renders every plot)."""
    plots = {"quality vs cost": plot} if plot else {}
    return build_comparison(result, plots, metric=pick_metric(result, None)).markdown()


def write_comparison(result: dict[str, Any], out_dir: str | Path,
                     quality_metric: str | None = None, *, cost: str = "calls") -> Path:
    """Write ``compare.md``, ``compare.html``, ``comparison.json``, ``forest.png`` and
    ``quality_vs_cost.png`` into ``out_dir``.

    ``quality_metric``: the quality axis (default: the data set's main metric); ``cost``:
    the cost axis, one of :data:`COST_AXES` (``calls``, ``tokens``, ``seconds``).
    """
    if cost not in COST_AXES:
        raise ConfigError(f"--cost {cost!r} is not a cost axis",
                          hint=f"use one of: {', '.join(COST_AXES)}")
    metric = pick_metric(result, quality_metric)
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create output directory {out_dir}: "
                          f"{exc.strerror or exc}") from exc
    rendered: dict[str, str] = {}
    try:
        from ambiqa.evaluation.reports import plots  # loads matplotlib

        if result["paired"]:
            order = [metric] + [n for n in result["metrics"] if n != metric]
            plots.forest(forest_rows(result), out_dir / "forest.png",
                         reference=result["baseline"], metrics=order,
                         title=f"Paired differences on {result['dataset']} against "
                               f"{result['baseline']} (reference): Δ with 95% paired "
                               "bootstrap interval")
            rendered["forest"] = "forest.png"
        axis_key, axis_label = COST_AXES[cost]
        plots.quality_vs_cost(quality_points(result, metric, cost),
                              out_dir / "quality_vs_cost.png", xlabel=axis_label,
                              ylabel=f"{metric} (95% interval of each run)",
                              title=f"{metric} vs {axis_label} on {result['dataset']}",
                              reference=result["baseline"])
        rendered["quality vs cost"] = "quality_vs_cost.png"
    except OSError as exc:
        raise write_error(out_dir, exc) from exc
    except ImportError:  # no matplotlib: the tables still render
        pass
    doc = build_comparison(result, rendered, metric=metric, cost=cost)
    try:
        atomic_write_json(out_dir / "comparison.json", json_safe(result))
        atomic_write_text(out_dir / "compare.md", doc.markdown())
        atomic_write_text(out_dir / "compare.html", doc.html(out_dir))
    except OSError as exc:
        raise write_error(out_dir, exc) from exc
    return out_dir / "compare.md"
