"""Run reports: ``summary.json``, ``report.md`` and PNG plots from a run's ``results.jsonl``.

A report is always rebuilt from the rows on disk (``ambiqa report RUN_DIR`` does only that),
so a killed, resumed or extended run renders the same as an uninterrupted one, and a run
written by an older ambiqa renders with a newer one.

``summary.json`` keeps the keys older versions wrote (``run``, ``n``, ``n_errors``,
``metrics``, ``cost``) and adds to them: ``reader``/``judge`` (who scored), ``cost_total``,
``scoring_cost``, ``errors``, ``degraded`` and, for runs whose predictions carry per-retriever
answers (EoR's ``member_answers``), ``consistency``: the RWR matrix, MRWR and MRLR across the
pool members (EoR eq. 1-3) with each member's accuracy.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ambiqa.errors import ArtifactError, ConfigError
from ambiqa.evaluation.runner import (
    ResultsFile,
    RunSpec,
    example_id,
    summarize,
    write_error,
)
from ambiqa.evaluation.stats import SET_LEVEL, fmt_interval
from ambiqa.fsutil import atomic_write_json, atomic_write_text

#: cost columns of a report, in order: key in a row's ``cost`` -> label
COST_KEYS: dict[str, str] = {
    "lm_calls": "LM calls",
    "input_tokens": "input tokens",
    "output_tokens": "output tokens",
    "retriever_calls": "retriever calls",
    "wall_s": "wall s",
    "critical_path_s": "critical path s",
}


@dataclass
class Run:
    """One run directory as read from disk."""

    path: Path
    spec: RunSpec
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def label(self) -> str:
        """The program's name; for a compiled artifact its file name, not the machine path
        the run was started with (reports are committed and read elsewhere)."""
        program = self.spec.program
        if program.endswith(".json"):
            return Path(program).name
        return program or self.path.name

    @property
    def metric_names(self) -> list[str]:
        """The spec's metrics, then any other metric found in the rows (order kept)."""
        names = list(self.spec.metrics)
        for r in self.rows:
            for k in (r.get("metrics") or {}):
                if k not in names:
                    names.append(k)
        return names


def load_run(path: str | Path) -> Run:
    """Read a run directory; a directory without ``results.jsonl`` is a clear error."""
    path = Path(path)
    if not path.is_dir():
        raise ConfigError(f"run directory not found: {path}")
    results = path / "results.jsonl"
    meta = path / "run.json"
    if not results.is_file() and not meta.is_file():
        raise ConfigError(f"{path} is not a run directory (no results.jsonl or run.json)",
                          hint="pass a directory written by `ambiqa evaluate --out`")
    spec_data: dict[str, Any] = {}
    if meta.is_file():
        try:
            spec_data = json.loads(meta.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ArtifactError(f"{meta} is unreadable: {exc}") from exc
    elif (path / "summary.json").is_file():
        try:
            spec_data = json.loads((path / "summary.json").read_text("utf-8")).get("run", {})
        except (OSError, json.JSONDecodeError):
            spec_data = {}
    spec = RunSpec.from_dict(spec_data if isinstance(spec_data, dict) else {})
    return Run(path, spec, ResultsFile(results).read())


# ------------------------------------------------------------------ summary


def _mean(vals: Sequence[float]) -> float:
    return sum(vals) / len(vals) if vals else 0.0


def run_summary(rows: list[dict[str, Any]], spec: RunSpec | None,
                metric_names: list[str] | None = None,
                consistency: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``summary.json`` content: the runner's summary plus the additive fields."""
    names = list(metric_names or (spec.metrics if spec else []))
    base = summarize(rows, names)
    with_cost = [r for r in rows if r.get("cost")]
    base["cost_total"] = {k: round(sum(float(r["cost"].get(k, 0) or 0) for r in with_cost), 3)
                          for k in COST_KEYS}
    scoring = [r["scoring_cost"] for r in rows if r.get("scoring_cost")]
    base["scoring_cost"] = {k: _mean([float(s.get(k, 0) or 0) for s in scoring])
                            for k in ("lm_calls", "input_tokens", "output_tokens")}
    base["cost"]["truncated_calls"] = _mean(
        [float(r["cost"].get("truncated_calls", 0) or 0) for r in with_cost])
    base["degraded"] = {
        "examples_with_events": sum(1 for r in with_cost if r["cost"].get("events")),
        "events": sum(len(r["cost"].get("events") or []) for r in with_cost),
    }
    base["errors"] = [{"id": r["id"], "error": r["error"]} for r in rows if r.get("error")][:100]
    if spec is not None:
        base["reader"] = spec.reader
        base["judge"] = spec.judge
    if consistency:
        base["consistency"] = consistency
    return {"run": spec.to_dict() if spec else {}, **base}


def member_consistency(rows: list[dict[str, Any]], golds: dict[str, list[str]], *,
                       voted: str | None = None) -> dict[str, Any] | None:
    """RWR / MRWR / MRLR across an EoR pool (EoR eq. 1-3), from the rows' member answers.

    A member that failed or was ignored on a question has no answer there and counts as
    wrong. Correctness is exact match against the question's gold answers, as EoR scores NQ,
    TriviaQA and WebQ. Needs at least two members and one question with gold answers.
    ``voted`` names a further system, the ensemble's own answer (``prediction["answer"]``),
    so its win and loss ratios against every member sit in the same matrix (the paper's
    point: the ensemble loses less often to any single retriever).
    """
    from ambiqa.evaluation import metrics as m

    use = [r for r in rows if not r.get("error") and isinstance(
        (r.get("prediction") or {}).get("member_answers"), dict) and str(r["id"]) in golds]
    members: list[str] = []
    for r in use:
        for spec in list(r["prediction"]["member_answers"]) + list(
                r["prediction"].get("failed_members") or {}):
            if spec not in members:
                members.append(spec)
    if len(members) < 2 or not use:
        return None
    answers = {s: [str(r["prediction"]["member_answers"].get(s, "") or "") for r in use]
               for s in members}
    if voted:
        members.append(voted)
        answers[voted] = [str(r["prediction"].get("answer") or "") for r in use]
    gold = [golds[str(r["id"])] for r in use]
    rwr = m.rwr_matrix(answers, gold)
    accuracy = {s: _mean([m.exact_match(a, g) if a else 0.0
                          for a, g in zip(answers[s], gold, strict=True)]) for s in members}
    return {"systems": members, "n": len(use), "correct_by": "em", "rwr": rwr,
            "mrwr": m.mrwr(rwr), "mrlr": m.mrlr(rwr), "accuracy": accuracy}


def has_member_answers(rows: list[dict[str, Any]]) -> bool:
    """Whether any row holds per-member answers (an EoR run), i.e. consistency applies."""
    return any(isinstance((r.get("prediction") or {}).get("member_answers"), dict)
               for r in rows)


def golds_for(rows: list[dict[str, Any]], spec: RunSpec | None,
               examples: list[Any] | None) -> tuple[dict[str, list[str]], str | None]:
    """Gold answers by example id, from the given examples or by reloading the run's data."""
    from ambiqa.evaluation.registry import gold_answers_of

    if examples is None:
        if spec is None or not spec.data:
            return {}, "no data spec to read gold answers from"
        try:
            from ambiqa.data import load_dataset

            examples = load_dataset(spec.data)
        except Exception as exc:  # a report must render even when the data moved
            return {}, f"gold answers unavailable ({type(exc).__name__}: {exc})"
    out: dict[str, list[str]] = {}
    for i, ex in enumerate(examples):
        try:
            out[example_id(ex, i)] = gold_answers_of(ex)
        except ConfigError:
            continue
    return out, None


# ------------------------------------------------------------------ writing


def _fmt(x: Any, digits: int = 3) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        if math.isnan(x):
            return "–"
        return f"{x:.{digits}f}"
    return str(x)


def _md_escape(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(summary: dict[str, Any], plots: dict[str, str],
                    notes: list[str]) -> str:
    run = summary.get("run", {})
    lines = [f"# {run.get('program', '?')} on {run.get('data', '?')}", ""]
    uses_reader = any(k in (run.get("metrics") or []) for k in ("d-f1", "dr"))
    facts = [("LM", run.get("lm")), ("retriever index", run.get("index")),
             ("D-F1 reader", run.get("reader") if uses_reader else None),
             ("LM judge", run.get("judge")),
             ("program config", json.dumps(run["program_config"])
              if run.get("program_config") else None)]
    for label, value in facts:
        if value:
            lines.append(f"- {label}: `{value}`")
    lines.append(f"- examples: {summary['n']} ({summary['n_errors']} failed)")
    if uses_reader:
        lines.append("- D-F1 and DR depend on the reader named above; with a stand-in reader "
                     "they are not comparable to published numbers (the ASQA scorer uses a "
                     "RoBERTa-large SQuAD2 reader).")
    lines += ["", "## Quality", "",
              "| metric | value (failed = 0) | 95% CI | n | failed | value excl. failed | "
              "n scored |", "|---|---:|---|---:|---:|---:|---:|"]
    for name, m in summary["metrics"].items():
        lines.append(f"| {name} | {_fmt(m['mean'])} | {fmt_interval(*m['ci95'])} | {m['n']} "
                     f"| {m.get('failed', 0)} | {_fmt(m.get('mean_excl_failed'))} | "
                     f"{m.get('n_scored', m['n'])} |")
    lines += ["", "Value: over all n examples, an example whose program or scoring failed "
              "scoring 0; \"excl. failed\": over the examples that did not fail. Means of "
              "per-question scores, except DR = sqrt(mean D-F1 × mean ROUGE-L) over the set "
              "(the ASQA scorer's definition; the per-question root is kept as `dr_q` for "
              "plots only). CI: 95% BCa bootstrap over the examples (scipy.stats.bootstrap, "
              "2000 resamples); [–]: no interval under 3 examples.", "", "## Cost per question", "",
              "| | mean per question | total |", "|---|---:|---:|"]
    for key, label in COST_KEYS.items():
        digits = 2 if key.endswith("_s") else 1
        lines.append(f"| {label} | {_fmt(summary['cost'].get(key, 0.0), digits)} | "
                     f"{_fmt(summary.get('cost_total', {}).get(key, 0.0), digits)} |")
    sc = summary.get("scoring_cost") or {}
    if sc.get("lm_calls"):
        lines.append(f"| scoring LM calls (reader/judge, not the program's) | "
                     f"{_fmt(sc['lm_calls'], 1)} | |")
    deg = summary.get("degraded") or {}
    lines += ["", f"Truncated LM replies per question: "
              f"{_fmt(summary['cost'].get('truncated_calls', 0.0), 2)}; degraded steps: "
              f"{deg.get('events', 0)} in {deg.get('examples_with_events', 0)} examples. "
              "Wall time is per example as run (several threads share the LM); the critical "
              "path is the union of the example's LM, retriever and encoder call intervals."]
    cons = summary.get("consistency")
    if cons:
        lines += ["", "## Consistency across pool members (EoR eq. 1-3)", "",
                  f"{cons['n']} questions; a member is right when its answer exactly matches "
                  "a gold answer. MRWR: how often a member is right where the others are "
                  "wrong (higher is better); MRLR: how often the others are right where it "
                  "is wrong (lower is better).", "",
                  "| member | accuracy | MRWR | MRLR |", "|---|---:|---:|---:|"]
        for s in cons["systems"]:
            lines.append(f"| {_md_escape(s)} | {_fmt(cons['accuracy'][s])} | "
                         f"{_fmt(cons['mrwr'][s])} | {_fmt(cons['mrlr'][s])} |")
    if plots:
        lines += ["", "## Plots", ""]
        for title, rel in plots.items():
            lines.append(f"![{title}]({rel})")
            lines.append("")
    if notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    errors = summary.get("errors") or []
    if errors:
        lines += ["", f"## Errors ({summary['n_errors']})", "", "| id | error |", "|---|---|"]
        for e in errors[:50]:
            lines.append(f"| {_md_escape(e['id'])} | {_md_escape(e['error'])[:200]} |")
        if summary["n_errors"] > 50:
            lines.append(f"| … | {summary['n_errors'] - 50} more in summary.json / "
                         "results.jsonl |")
    return "\n".join(lines).rstrip() + "\n"


def write_run_report(run_dir: str | Path, *, rows: list[dict[str, Any]] | None = None,
                     spec: RunSpec | None = None, examples: list[Any] | None = None,
                     plots: bool = True) -> dict[str, Any]:
    """(Re)write ``summary.json``, ``report.md`` and ``plots/*.png`` of a run directory.

    Only these files are written (atomically); ``results.jsonl`` and ``run.json`` are read,
    never touched. A plot that cannot be drawn is noted in the report instead of failing it.
    Returns the summary.
    """
    run_dir = Path(run_dir)
    if rows is None or spec is None:
        run = load_run(run_dir)
        rows = run.rows if rows is None else rows
        spec = run.spec if spec is None else spec
        names = run.metric_names
    else:
        names = Run(run_dir, spec, rows).metric_names
    notes: list[str] = []
    consistency = None
    if has_member_answers(rows):
        golds, why = golds_for(rows, spec, examples)
        consistency = member_consistency(rows, golds)
        if consistency is None:
            notes.append("no per-member consistency: " + (why or "fewer than two members "
                                                                 "or no gold answers"))
    summary = run_summary(rows, spec, names, consistency)
    rendered: dict[str, str] = {}
    if plots and rows:
        rendered = _draw(run_dir, rows, summary, names, notes)
    try:
        atomic_write_json(run_dir / "summary.json", json_safe(summary))
        atomic_write_text(run_dir / "report.md", render_markdown(summary, rendered, notes))
    except OSError as exc:
        raise write_error(run_dir, exc) from exc
    return summary


def _draw(run_dir: Path, rows: list[dict[str, Any]], summary: dict[str, Any],
          names: list[str], notes: list[str]) -> dict[str, str]:
    from ambiqa.evaluation import plots

    out: dict[str, str] = {}
    label = f"{summary['run'].get('program', '')} on {summary['run'].get('data', '')}"
    # per-question distributions: a set-level metric (DR) has none; its per-question root
    # (dr_q) is drawn under its own name
    plotted = [n for n in names if n not in SET_LEVEL]
    values = {n: [float(r["metrics"][n]) for r in rows
                  if not r.get("error") and n in (r.get("metrics") or {})] for n in plotted}
    values = {n: v for n, v in values.items() if v}
    try:
        plots.metric_distributions(values, run_dir / "plots" / "metrics.png", title=label)
        out["metric distributions"] = "plots/metrics.png"
        if summary.get("consistency"):
            plots.heatmap(summary["consistency"]["rwr"], run_dir / "plots" / "rwr.png",
                          title="RWR(i, j): share of j's misses that i gets right")
            out["RWR heatmap"] = "plots/rwr.png"
    except OSError as exc:
        raise write_error(run_dir / "plots", exc) from exc
    except Exception as exc:  # matplotlib missing or broken: the tables still render
        notes.append(f"plots skipped: {type(exc).__name__}: {exc}")
    return out


def json_safe(obj: Any) -> Any:
    """NaN is not JSON: write null (a metric no example could score)."""
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    return obj
