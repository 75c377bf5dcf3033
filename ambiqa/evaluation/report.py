"""Run reports: ``summary.json``, ``report.md``, ``report.html`` and PNG plots from a run's
``results.jsonl``.

A report is always rebuilt from the rows on disk (``ambiqa report RUN_DIR`` does only that),
so a killed, resumed or extended run renders the same as an uninterrupted one, and a run
written by an older ambiqa renders with a newer one.

``summary.json`` keeps the keys older versions wrote (``run``, ``n``, ``n_errors``,
``metrics``, ``cost``) and adds to them: ``reader``/``judge`` (who scored), ``cost_total``,
``scoring_cost``, ``errors``, ``degraded`` and, for runs whose predictions carry per-retriever
answers (EoR's ``member_answers``), ``consistency``: the RWR matrix, MRWR and MRLR across the
pool members (EoR eq. 1-3) with each member's accuracy; ``cost_stats`` (mean, median, 90th
percentile, max and total per question of every cost) and ``main_metric``.

The report is a page a person reads to decide and to find out why: each headline metric's
set-level value and interval marked on its per-question distribution (``plots/metrics.png``),
cost and latency per question (``plots/cost.png``), and the ten worst questions with the
program's answer and interpretations, the gold answers and the passages it read. It is built
once (:mod:`ambiqa.evaluation.html`) and written as Markdown and as one self-contained HTML
page; the plots draw the same numbers the tables print.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ambiqa.errors import ArtifactError, ConfigError
from ambiqa.evaluation.run_dir import planned_rows, read_run_json
from ambiqa.evaluation.runner import (
    ResultsFile,
    RunSpec,
    example_id,
    summarize,
    write_error,
)
from ambiqa.evaluation.stats import PER_QUESTION_NAME, SET_LEVEL, fmt_interval, part_arrays
from ambiqa.fsutil import atomic_write_json, atomic_write_text
from ambiqa.lm.redact import redact

log = logging.getLogger(__name__)

#: cost columns of a report, in order: key in a row's ``cost`` -> label
COST_KEYS: dict[str, str] = {
    "lm_calls": "LM calls",
    "input_tokens": "input tokens",
    "computed_tokens": "computed prompt tokens",
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
        spec_data = read_run_json(meta, "cannot render this run")
    elif (path / "summary.json").is_file():
        try:  # a run without run.json (very old): its summary's copy, if readable
            spec_data = read_run_json(path / "summary.json", "").get("run", {})
        except ArtifactError:
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
    # redacted again: rows written before issue 42 may hold a key an endpoint echoed
    base["errors"] = [{"id": r["id"], "error": redact(str(r["error"]))}
                      for r in rows if r.get("error")][:100]
    if spec is not None:
        base["reader"] = spec.reader
        base["judge"] = spec.judge
        planned = planned_rows(spec.to_dict())
        if planned is not None:
            base["n_planned"] = planned
    mixed = mixed_rows(rows)
    if mixed:
        base["mixed_rows"] = mixed
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


def _examples_of(spec: Any, examples: list[Any] | None) -> tuple[list[Any] | None, str | None]:
    """The run's examples: those given, else the run's data reloaded from its spec; None and
    the reason when there are none (no spec, or the data moved)."""
    if examples is not None:
        return examples, None
    if spec is None or not spec.data:
        return None, "no data spec to read gold answers from"
    try:
        from ambiqa.data import load_dataset

        return load_dataset(spec.data), None
    except Exception as exc:  # a report must render even when the data moved
        return None, f"gold answers unavailable ({type(exc).__name__}: {exc})"


def golds_for(rows: list[dict[str, Any]], spec: RunSpec | None,
               examples: list[Any] | None) -> tuple[dict[str, list[str]], str | None]:
    """Gold answers by example id, from the given examples or by reloading the run's data."""
    from ambiqa.evaluation.registry import gold_answers_of

    examples, why = _examples_of(spec, examples)
    if examples is None:
        return {}, why
    out: dict[str, list[str]] = {}
    for i, ex in enumerate(examples):
        try:
            out[example_id(ex, i)] = gold_answers_of(ex)
        except ConfigError:
            continue
    return out, None


# ------------------------------------------------------------------ what a report shows


#: the data set's main metric, first found wins: DR for ASQA, F1 for short-answer sets
MAIN_METRIC_ORDER: tuple[str, ...] = ("dr", "f1", "em", "d-f1", "rouge-l", "str-em")
#: how many of the lowest-scoring questions a report lays out
N_WORST = 10
#: characters of a passage a report quotes (the rest is in results.jsonl)
PASSAGE_CHARS = 700


def main_metric(names: Sequence[str]) -> str | None:
    """The headline metric among ``names``: DR on ASQA (the data set's scorer), F1 on the
    short-answer sets, else the first reported one."""
    from ambiqa.evaluation.runner import PER_ROW_ONLY

    usable = [n for n in names if n not in PER_ROW_ONLY]
    for name in MAIN_METRIC_ORDER:
        if name in usable:
            return name
    return usable[0] if usable else None


def row_cost(row: dict[str, Any], key: str) -> float:
    """One question's cost ``key``. ``computed_tokens`` (prompt tokens the LM computed, not
    served from its prompt cache) falls back to input − cached tokens for rows written
    before it was recorded; ``tokens`` is computed prompt tokens + generated tokens, the
    LM's work for the question."""
    cost = row.get("cost") or {}
    if key == "tokens":
        return row_cost(row, "computed_tokens") + float(cost.get("output_tokens", 0) or 0)
    if key == "computed_tokens" and "computed_tokens" not in cost:
        return max(float(cost.get("input_tokens", 0) or 0)
                   - float(cost.get("cached_tokens", 0) or 0), 0.0)
    return float(cost.get(key, 0) or 0)


def cost_values(rows: Sequence[dict[str, Any]], key: str) -> list[float]:
    """``key`` per question over the rows that carry a cost trace (failed ones included:
    they cost too), as ``runner.summarize`` averages them."""
    return [row_cost(r, key) for r in rows if r.get("cost")]


def cost_stats(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Mean, median, 90th percentile, max and total per question of every cost key
    (:data:`COST_KEYS` and ``tokens``): the one computation behind the cost table, the cost
    plot and the cost axis of a comparison."""
    import numpy as np

    out: dict[str, dict[str, float]] = {}
    for key in (*COST_KEYS, "tokens"):
        vals = np.asarray(cost_values(rows, key), dtype=float)
        if not len(vals):
            out[key] = {"mean": 0.0, "median": 0.0, "p90": 0.0, "max": 0.0, "total": 0.0,
                        "n": 0}
            continue
        out[key] = {"mean": float(vals.mean()), "median": float(np.median(vals)),
                    "p90": float(np.percentile(vals, 90)), "max": float(vals.max()),
                    "total": float(vals.sum()), "n": int(len(vals))}
    return out


def per_question_score(row: dict[str, Any], metric: str) -> tuple[float, float] | None:
    """(score, tie-break) of one question for ranking on ``metric``; None when the row has
    no score for it. A set-level metric (DR) has no per-question value of its own: its
    per-question root sqrt(D-F1 × ROUGE-L) (``dr_q``) ranks, ties (mostly at 0, where D-F1
    is 0) broken by D-F1 + ROUGE-L. A failed question scores 0 and comes first."""
    if row.get("error"):
        return 0.0, -1.0
    got = row.get("metrics") or {}
    parts = SET_LEVEL.get(metric, (metric,))
    vals = []
    for p in parts:
        try:
            v = float(got[p])
        except (KeyError, TypeError, ValueError):
            return None
        if math.isnan(v):
            return None
        vals.append(v)
    if metric in SET_LEVEL:
        return math.sqrt(max(vals[0], 0.0) * max(vals[1], 0.0)), sum(vals)
    return vals[0], 0.0


def worst_rows(rows: Sequence[dict[str, Any]], metric: str, k: int = N_WORST
               ) -> list[tuple[dict[str, Any], float]]:
    """The ``k`` lowest-scoring questions on ``metric`` (failed first), with their score."""
    scored = [(r, s) for r in rows if (s := per_question_score(r, metric)) is not None]
    scored.sort(key=lambda rs: (rs[1][0], rs[1][1], str(rs[0].get("id"))))
    return [(r, s[0]) for r, s in scored[:k]]


def gold_views(spec: RunSpec | None, examples: list[Any] | None
               ) -> tuple[dict[str, dict[str, Any]], str | None]:
    """What a person checks an answer against, by example id: ``qa_pairs`` (ASQA's
    interpretations with their short answers) or ``answers``; reloads the run's data when no
    examples are given. The second value says why there are none (data moved, no spec)."""
    from ambiqa.evaluation.metrics import as_list, field_value, short_answers_of

    examples, why = _examples_of(spec, examples)
    if examples is None:
        return {}, why
    out: dict[str, dict[str, Any]] = {}
    for i, ex in enumerate(examples):
        pairs = [{"question": str(field_value(p, "question", "") or ""),
                  "answers": short_answers_of(p)}
                 for p in (field_value(ex, "qa_pairs") or [])]
        answers = field_value(ex, "answers")
        if answers is None:
            answers = field_value(ex, "answer")
        out[example_id(ex, i)] = {
            "qa_pairs": pairs,
            "answers": [str(a) for a in as_list(answers) if str(a).strip()] if answers else []}
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


def _cost_fmt(key: str, x: float) -> str:
    return _fmt(float(x), 2 if key.endswith("_s") else 1)


def per_question_quantity(metric: str) -> tuple[str, str] | None:
    """(name, explanation) of the per-question quantity a set-level metric's distribution
    shows, or None for a plain mean (whose distribution is its own per-question scores)."""
    if metric not in SET_LEVEL:
        return None
    a, b = SET_LEVEL[metric]
    name = PER_QUESTION_NAME.get(metric, f"{metric}_q")
    return name, (f"{name} = sqrt({a} × {b}) of one question; {metric} itself is "
                  f"sqrt(mean {a} × mean {b}) over the set, not the mean of {name}")


def headline_panels(rows: list[dict[str, Any]], summary: dict[str, Any]
                    ) -> list[dict[str, Any]]:
    """One panel per headline metric for :func:`plots.headline_distributions`: the value and
    interval are the summary's (the table's) own; the per-question scores come from the same
    ``part_arrays`` the summary's bootstrap resampled."""
    panels = []
    for name, m in summary["metrics"].items():
        _, ok = part_arrays(rows, name, include_failed=False)
        if not ok or not ok[0] and not m.get("failed"):
            continue
        panel = {"name": name, "value": m["mean"], "lo": m["ci95"][0], "hi": m["ci95"][1],
                 "failed": int(m.get("failed", 0) or 0), "quantity": f"{name} per question"}
        if name in SET_LEVEL:
            qname, _ = per_question_quantity(name) or (f"{name}_q", "")
            roots = [math.sqrt(max(a, 0.0) * max(b, 0.0)) for a, b in zip(*ok, strict=True)]
            n = len(roots) + panel["failed"]
            a, b = SET_LEVEL[name]
            panel.update(scores=roots, quantity_name=qname,
                         quantity_mean=sum(roots) / n if n else math.nan,
                         quantity=f"{qname} = sqrt({a} × {b}) per question "
                                  f"(not averaged into {name})")
        else:
            panel["scores"] = list(ok[0])
        panels.append(panel)
    return panels


def program_label(program: str) -> str:
    """A program's name for titles: a compiled artifact by its file name, not the machine
    path it was evaluated from (reports are committed and read elsewhere)."""
    return Path(program).name if program.endswith(".json") else program


def _facts(run: dict[str, Any], uses_reader: bool) -> list[Any]:
    from ambiqa.evaluation.html import Code

    facts = [("program", run.get("program")), ("data", run.get("data")),
             ("LM", run.get("lm")), ("LM max tokens", run.get("max_tokens")),
             ("LM temperature", run.get("temperature")), ("LM endpoint", run.get("endpoint")),
             ("retriever index", run.get("index")),
             ("index fingerprint", run.get("index_fingerprint")),
             ("D-F1 reader", run.get("reader") if uses_reader else None),
             ("D-F1 reader weights sha256",
              (run.get("reader_identity") or {}).get("weights_sha256") if uses_reader
              else None),
             ("D-F1 reader note", (run.get("reader_identity") or {}).get("note")
              if uses_reader else None),
             ("LM judge", run.get("judge")),
             ("artifact sha256", run.get("artifact_sha256")),
             ("program config", json.dumps(run["program_config"])
              if run.get("program_config") else None)]
    return [[f"{label}: ", Code(str(value))] for label, value in facts
            if value is not None and value != ""]


def cached_line(cached: dict[str, Any], n: int) -> str:
    """The one line a report and ``evaluate`` print when answers came from the response
    cache: those LM calls were not made now, so they say nothing of the LM's state."""
    return (f"from the response cache: {cached.get('calls', 0)} LM call(s) in "
            f"{cached.get('examples', 0)} of {n} examples (replies stored by an earlier run "
            "with the same LM, endpoint and prompt; --no-cache asks the LM anew)")


def mixed_rows(rows: list[dict[str, Any]]) -> dict[str, int] | None:
    """``{"short": n, "ambiguous": m}`` for a run of a file mixing both kinds of rows (its
    rows carry their ``kind`` and ``scored_by``, the metrics of that kind), else None."""
    kinds = [r["kind"] for r in rows if r.get("kind") in ("short", "ambiguous")]
    if not kinds:
        return None
    return {"short": kinds.count("short"), "ambiguous": kinds.count("ambiguous")}


def completeness_line(summary: dict[str, Any]) -> str | None:
    """The warning a report opens with when its rows are not the questions the run set out to
    answer (``n_planned``): a killed or stopped run (12 of 40 done), or more rows than
    planned; None for a complete run or one that recorded no plan. Its means are over the
    rows that exist, so without this line a killed run reads as a finished one."""
    planned, n = summary.get("n_planned"), int(summary.get("n", 0))
    if not isinstance(planned, int) or n == planned:
        return None
    if n < planned:
        return (f"incomplete run: {n} of {planned} planned questions done ({planned - n} "
                f"without a row: killed or stopped?); its numbers are over those {n} only "
                "(finish it with `ambiqa evaluate ... --resume`)")
    return (f"this run holds {n} rows for {planned} planned questions (rows of another "
            "version of the data?); resume it on the data to drop the stale ones.")


def build_report(summary: dict[str, Any], plots: dict[str, str], notes: list[str],
                 worst: list[dict[str, Any]] | None = None,
                 worst_metric: str | None = None) -> Any:
    """The run report as a :class:`ambiqa.evaluation.html.Document` (rendered to both
    ``report.md`` and ``report.html``)."""
    from ambiqa.evaluation.html import Bold, Bullets, Code, Document, Heading, Image, Para, Table

    run = summary.get("run", {})
    doc = Document(f"{program_label(run.get('program') or '?')} on {run.get('data', '?')}")
    incomplete = completeness_line(summary)
    if incomplete:
        doc.add(Para([Bold("Warning: "), incomplete], css="missing"))
    uses_reader = any(k in (run.get("metrics") or []) for k in ("d-f1", "dr"))
    facts = _facts(run, uses_reader)
    facts.append(f"examples: {summary['n']} ({summary['n_errors']} failed)")
    cached = summary.get("cached") or {}
    if cached.get("examples"):
        facts.append(cached_line(cached, summary["n"]))
    if uses_reader:
        facts.append("D-F1 and DR depend on the reader named above; with a stand-in reader "
                     "they are not comparable to published numbers (the ASQA scorer uses a "
                     "RoBERTa-large SQuAD2 reader).")
    doc.add(Bullets(facts))

    doc.add(Heading(2, "Quality"), Table(
        ["metric", "value (failed = 0)", "95% CI", "n", "failed", "value excl. failed",
         "n scored"],
        [[name, _fmt(m["mean"]), fmt_interval(*m["ci95"]), str(m["n"]),
          str(m.get("failed", 0)), _fmt(m.get("mean_excl_failed")),
          str(m.get("n_scored", m["n"]))] for name, m in summary["metrics"].items()],
        "lrnrrrr"))
    if summary.get("mixed_rows"):
        kinds = summary["mixed_rows"]
        doc.add(Para(f"A file mixing {kinds.get('short', 0)} short-answer and "
                     f"{kinds.get('ambiguous', 0)} ambiguous rows: each row is scored by the "
                     "metrics of its kind (short rows EM/F1, ambiguous rows STR-EM/D-F1, "
                     "ROUGE-L/DR where they have a long answer), so each metric's n counts "
                     "its own rows.", css="note"))
    doc.add(Para(["Value: over all n examples, an example whose program or scoring failed "
                  "scoring 0; \"excl. failed\": over the examples that did not fail. Means of "
                  "per-question scores, except DR = sqrt(mean D-F1 × mean ROUGE-L) over the "
                  "set (the ASQA scorer's definition; the per-question root is kept as ",
                  Code("dr_q"), " for plots only). CI: 95% BCa bootstrap over the examples "
                  "(scipy.stats.bootstrap, 2000 resamples); [–]: no interval under 3 "
                  "examples."]))
    if "metric distributions" in plots:
        doc.add(Image("metric distributions", plots["metric distributions"]))
        explain = ["Each panel: how the questions' scores spread, with the value of the table "
                   "above (red line) and its 95% interval (shaded); failed questions are drawn "
                   "grey at 0, as they score."]
        for name in summary["metrics"]:
            q = per_question_quantity(name)
            if q:
                explain.append(f" The {name} panel shows {q[1]} (its mean is the dotted line).")
        doc.add(Para("".join(explain), css="note"))

    stats = summary.get("cost_stats") or {}
    doc.add(Heading(2, "Cost per question"))
    cost_rows = []
    for key, label in [*COST_KEYS.items(), ("tokens", "computed tokens (computed prompt + "
                                                       "output)")]:
        if key not in COST_KEYS and key not in stats:
            continue
        st = stats.get(key) or {"mean": summary["cost"].get(key, 0.0),
                                "total": summary.get("cost_total", {}).get(key, 0.0)}
        cost_rows.append([label, _cost_fmt(key, st["mean"]),
                          _cost_fmt(key, st["median"]) if "median" in st else "",
                          _cost_fmt(key, st["p90"]) if "p90" in st else "",
                          _cost_fmt(key, st["max"]) if "max" in st else "",
                          _cost_fmt(key, st["total"])])
    sc = summary.get("scoring_cost") or {}
    if sc.get("lm_calls"):
        cost_rows.append(["scoring LM calls (reader/judge, not the program's)",
                          _fmt(sc["lm_calls"], 1), "", "", "", ""])
    doc.add(Table(["", "mean per question", "median", "90th percentile", "max", "total"],
                  cost_rows, "lrrrrr"))
    deg = summary.get("degraded") or {}
    doc.add(Para(f"Truncated LM replies per question: "
                 f"{_fmt(summary['cost'].get('truncated_calls', 0.0), 2)}; degraded steps: "
                 f"{deg.get('events', 0)} in {deg.get('examples_with_events', 0)} examples. "
                 "Wall time is per example as run (several threads share the LM); the critical "
                 "path is the union of the example's LM, retriever and encoder call intervals. "
                 "Computed prompt tokens: prompt tokens the LM computed, not served from its "
                 "prompt cache."))
    if "cost and latency" in plots:
        doc.add(Image("cost and latency", plots["cost and latency"]),
                Para("Each panel: one cost per question, its mean (red) and median (dashed) "
                     "as in the table above. Computed tokens = computed prompt tokens + "
                     "generated tokens.", css="note"))

    cons = summary.get("consistency")
    if cons:
        doc.add(Heading(2, "Consistency across pool members (EoR eq. 1-3)"),
                Para(f"{cons['n']} questions; a member is right when its answer exactly "
                     "matches a gold answer. MRWR: how often a member is right where the others "
                     "are wrong (higher is better); MRLR: how often the others are right where "
                     "it is wrong (lower is better)."),
                Table(["member", "accuracy", "MRWR", "MRLR"],
                      [[s, _fmt(cons["accuracy"][s]), _fmt(cons["mrwr"][s]),
                        _fmt(cons["mrlr"][s])] for s in cons["systems"]], "lrrr"))
        if "RWR heatmap" in plots:
            doc.add(Image("RWR heatmap", plots["RWR heatmap"]))

    if worst:
        _worst_section(doc, worst, worst_metric or "")
    if notes:
        doc.add(Heading(2, "Notes"), Bullets(list(notes)))
    errors = summary.get("errors") or []
    if errors:
        err_rows = [[str(e["id"]), str(e["error"])[:200]] for e in errors[:50]]
        if summary["n_errors"] > 50:
            err_rows.append(["…", f"{summary['n_errors'] - 50} more in summary.json / "
                                  "results.jsonl"])
        doc.add(Heading(2, f"Errors ({summary['n_errors']})"), Table(["id", "error"], err_rows))
    return doc


def _worst_section(doc: Any, worst: list[dict[str, Any]], metric: str) -> None:
    from ambiqa.evaluation.html import Bold, Code, Details, Heading, Para, Quote, Table

    q = per_question_quantity(metric)
    how = (f"ranked by {q[0]} ({q[1]}), ties broken by the sum of its parts" if q
           else f"ranked by per-question {metric}")
    doc.add(Heading(2, f"The {len(worst)} worst questions by {metric}"),
            Para(f"The questions to read to find out why: {how}; a failed question scores 0 "
                 "and comes first. Each shows the program's answer and interpretations, the "
                 "gold answers and the passages it read (cited ones marked)."))
    for rank, w in enumerate(worst, 1):
        doc.add(Heading(3, f"{rank}. {w['question']}"))
        scores = ", ".join(f"{k} {_fmt(v)}" for k, v in w["scores"].items())
        doc.add(Para([Code(w["id"]), f" · {w['score_name']} {_fmt(w['score'])}",
                      f" · {scores}" if scores else ""]))
        if w.get("error"):
            doc.add(Para([Bold("Failed:"), " ", w["error"]]))
        else:
            doc.add(Para(Bold("Answer")), Quote(w["answer"] or "(empty answer)"))
        if w["interpretations"]:
            doc.add(Table(["interpretation", "its answer", "cites"],
                          [[it["question"], it["answer"], ", ".join(it["passages"])]
                           for it in w["interpretations"]]))
        gold = w.get("gold")
        if gold is None:
            doc.add(Para("Gold answers: not found in the run's data.", css="muted"))
        elif gold["qa_pairs"]:
            doc.add(Table(["gold interpretation", "gold short answers"],
                          [[p["question"], " / ".join(p["answers"])] for p in gold["qa_pairs"]]))
        else:
            doc.add(Para([Bold("Gold answers:"), " ", " / ".join(gold["answers"]) or "–"]))
        passages = w["passages"]
        if passages:
            blocks = [Para([Bold(f"[{p['id']}] {p['title']}"),
                            " (cited)" if p["cited"] else "", ": ", p["text"]])
                      for p in passages]
            doc.add(Details(f"{len(passages)} passages read", blocks))
        else:
            doc.add(Para("No passages read.", css="muted"))


def worst_questions(rows: list[dict[str, Any]], metric: str,
                    golds: dict[str, dict[str, Any]] | None, k: int = N_WORST
                    ) -> list[dict[str, Any]]:
    """The worst ``k`` questions on ``metric``, laid out for reading (see :func:`worst_rows`)."""
    from ambiqa.evaluation.registry import interpretations_of
    out = []
    parts = SET_LEVEL.get(metric, ())
    for row, score in worst_rows(rows, metric, k):
        pred = row.get("prediction") or {}
        if not isinstance(pred, dict):
            pred = {}
        interps = interpretations_of(pred)
        cited = {i for it in interps for i in it["passages"]}
        passages = []
        for p in pred.get("passages") or []:
            if not isinstance(p, dict):
                continue
            text = str(p.get("text", "") or "")
            if len(text) > PASSAGE_CHARS:
                text = text[:PASSAGE_CHARS].rstrip() + " …"
            passages.append({"id": str(p.get("id", "")), "title": str(p.get("title", "") or ""),
                             "text": text, "cited": str(p.get("id", "")) in cited})
        got = row.get("metrics") or {}
        out.append({"id": str(row.get("id")), "question": str(row.get("question", "") or ""),
                    "score": score, "score_name": PER_QUESTION_NAME.get(metric, metric)
                    if parts else metric,
                    "scores": {p: float(got[p]) for p in parts if p in got},
                    "error": str(row["error"]) if row.get("error") else None,
                    "answer": str(pred.get("answer", "") or ""),
                    "interpretations": interps, "passages": passages,
                    "gold": (golds or {}).get(str(row.get("id"))) if golds else None})
    return out


def render_markdown(summary: dict[str, Any], plots: dict[str, str],
                    notes: list[str]) -> str:
    """``report.md`` without the worst-questions section (kept for callers of the old API)."""
    return build_report(summary, plots, notes).markdown()


def write_run_report(run_dir: str | Path, *, rows: list[dict[str, Any]] | None = None,
                     spec: RunSpec | None = None, examples: list[Any] | None = None,
                     plots: bool = True, out_dir: str | Path | None = None) -> dict[str, Any]:
    """(Re)write ``summary.json``, ``report.md``, ``report.html`` and ``plots/*.png`` of a run
    directory (or into ``out_dir``, for a run directory one may not write into).

    Only these files are written (atomically); ``results.jsonl`` and ``run.json`` are read,
    never touched. A plot that cannot be drawn is noted in the report instead of failing it.
    Returns the summary.
    """
    run_dir = Path(run_dir)
    target = Path(out_dir) if out_dir is not None else run_dir
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
    summary["cost_stats"] = cost_stats(rows)
    metric = main_metric(list(summary["metrics"]))
    summary["main_metric"] = metric
    worst: list[dict[str, Any]] = []
    if metric and rows:
        views, why = gold_views(spec, examples)
        if why:
            notes.append(f"worst questions shown without gold answers: {why}")
        worst = worst_questions(rows, metric, views if not why else None)
    rendered: dict[str, str] = {}
    if plots and rows:
        rendered = _draw(target, rows, summary, notes)
    incomplete = completeness_line(summary)
    if incomplete:  # on stderr too: `ambiqa report` on a killed run must not pass quietly
        log.warning("%s: %s", run_dir, incomplete)
    doc = build_report(summary, rendered, notes, worst, metric)
    try:
        atomic_write_json(target / "summary.json", json_safe(summary))
        atomic_write_text(target / "report.md", doc.markdown())
        atomic_write_text(target / "report.html", doc.html(target))
    except OSError as exc:
        raise write_error(target, exc) from exc
    return summary


def _draw(run_dir: Path, rows: list[dict[str, Any]], summary: dict[str, Any],
          notes: list[str]) -> dict[str, str]:
    from ambiqa.evaluation import plots

    out: dict[str, str] = {}
    label = (f"{program_label(summary['run'].get('program') or '')} on "
             f"{summary['run'].get('data', '')}")
    try:
        panels = headline_panels(rows, summary)
        if panels:
            plots.headline_distributions(panels, run_dir / "plots" / "metrics.png",
                                         title=f"{label}: set-level value and 95% interval "
                                               "on each metric's distribution")
            out["metric distributions"] = "plots/metrics.png"
        stats = summary["cost_stats"]
        cost_panels = [{"key": key, "label": lab, "values": cost_values(rows, key),
                        "mean_text": _cost_fmt(key, stats[key]["mean"]),
                        "median_text": _cost_fmt(key, stats[key]["median"]), **stats[key]}
                       for key, lab in (("lm_calls", "LM calls"),
                                        ("tokens", "computed tokens"),
                                        ("wall_s", "wall seconds")) if stats[key]["n"]]
        if cost_panels:
            plots.cost_distributions(cost_panels, run_dir / "plots" / "cost.png",
                                     title=f"{label}: cost and latency per question")
            out["cost and latency"] = "plots/cost.png"
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
