"""A run's rows read back and summarised: the data every report, comparison and benchmark
table is drawn from (``Run``, :func:`load_run`, :func:`run_summary`, costs per question,
per-question scores, the worst questions, the gold answers), kept apart from the rendering in
:mod:`ambiqa.evaluation.reports.report` so each module does one job.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ambiqa.data import load_dataset
from ambiqa.errors import ArtifactError, ConfigError
from ambiqa.evaluation import metrics as m
from ambiqa.evaluation.metrics import as_list, field_value, short_answers_of
from ambiqa.evaluation.registry import gold_answers_of
from ambiqa.evaluation.runs.run_dir import planned_rows, read_run_json
from ambiqa.evaluation.runs.runner import (
    PER_ROW_ONLY,
    ResultsFile,
    RunSpec,
    example_id,
    summarize,
)
from ambiqa.evaluation.stats import SET_LEVEL
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
        return load_dataset(spec.data), None
    except Exception as exc:  # a report must render even when the data moved
        return None, f"gold answers unavailable ({type(exc).__name__}: {exc})"


def golds_for(rows: list[dict[str, Any]], spec: RunSpec | None,
               examples: list[Any] | None) -> tuple[dict[str, list[str]], str | None]:
    """Gold answers by example id, from the given examples or by reloading the run's data."""
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

def mixed_rows(rows: list[dict[str, Any]]) -> dict[str, int] | None:
    """``{"short": n, "ambiguous": m}`` for a run of a file mixing both kinds of rows (its
    rows carry their ``kind`` and ``scored_by``, the metrics of that kind), else None."""
    kinds = [r["kind"] for r in rows if r.get("kind") in ("short", "ambiguous")]
    if not kinds:
        return None
    return {"short": kinds.count("short"), "ambiguous": kinds.count("ambiguous")}
