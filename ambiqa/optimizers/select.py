"""The compile chooses: candidates scored on a validation split, and no regression shipped.

A teleprompter's output is a *candidate*, not the answer. DSPy's BootstrapFewShot keeps the
first traces that pass a threshold and never compares its result with the program it started
from; compiled Diva shipped that way scored below zero-shot Diva
(``benchmarks/results/compile-v3``). So every compile ends here:

1. a **validation split** is carved out of the training data before the teleprompter runs
   (never dev or test; the teleprompter never sees it);
2. the **candidates** -- always the zero-shot program and the input program, the
   teleprompter's result, and any demo-plan variants of it (``write=none``, ...) -- are each
   scored on every validation question with the compile metric;
3. the best score wins, with its paired 95% interval against zero-shot on the same questions;
   when no candidate beats zero-shot the compile says so in one line and ships zero-shot,
   unless ``force`` asks for the teleprompter's result anyway. A candidate's score is the mean
   of its per-question values, except for a set-level objective: DR, as ASQA defines it, is
   sqrt(mean D-F1 × mean ROUGE-L) over the set, so its parts are scored per question and the
   candidates ranked (and the interval taken) by that statistic -- the one the evaluation
   reports and the targets are stated in -- not by the mean of per-question roots, which can
   rank two candidates the other way (``benchmarks/results/compile-v5/by-dr``).

**Cheap candidates.** Candidates that differ only downstream (say, only in the writer's
demos) would pay again for every upstream LM call. :class:`CallMemo` remembers each
predictor call by (predictor, its demos and instructions, its inputs): a predictor whose state
and inputs are the same as in a candidate already scored is answered from memory, so a
writer-only candidate costs one LM call per question. Sharing upstream answers also makes
the comparison cleaner: at temperature > 0, candidates that differ only in the writer are
compared on the same upstream readings and passages.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ambiqa.errors import ConfigError
from ambiqa.evaluation.metric_names import parts_of, set_level_name
from ambiqa.evaluation.registry import interpretations_of, prediction_answer
from ambiqa.parallel import run_parallel
from ambiqa.tracing import record_event, track

ZERO_SHOT = "zero-shot"
INPUT = "input"


def _state_key(predictor: Any) -> str:
    """A digest of what decides a predictor's prompt: its demos, instructions and fields."""
    state = predictor.dump_state()
    state.pop("lm", None)
    text = json.dumps(state, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class CallMemo:
    """Predictor calls remembered across candidates (thread-safe; programs vote in parallel)."""

    def __init__(self) -> None:
        self._memo: dict[tuple[str, str, str], Any] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @contextmanager
    def installed(self, program: Any) -> Iterator[None]:
        """Answer ``program``'s predictor calls from memory while inside the block."""
        patched = []
        for name, predictor in program.named_predictors():
            state = _state_key(predictor)
            # the class's forward, bound by hand: reading ``predictor.forward`` makes DSPy warn
            original = type(predictor).forward.__get__(predictor)
            predictor.forward = self._wrap(name, state, original)
            patched.append(predictor)
        try:
            yield
        finally:
            for predictor in patched:
                predictor.__dict__.pop("forward", None)

    def _wrap(self, name: str, state: str, original: Any) -> Any:
        # a copy in and a copy out: a program that edits a prediction it got (a candidate's
        # post-processing, say) must not change what the next candidate is answered with
        def forward(**kwargs: Any) -> Any:
            key = (name, state, repr(sorted((k, repr(v)) for k, v in kwargs.items())))
            with self._lock:
                if key in self._memo:
                    self.hits += 1
                    return copy.deepcopy(self._memo[key])
            result = original(**kwargs)
            with self._lock:
                self.misses += 1
                self._memo.setdefault(key, copy.deepcopy(result))
            return result
        return forward


@dataclass
class Candidate:
    """One program the compile may ship, and where it came from."""

    label: str
    program: Any
    note: str = ""


@dataclass
class Selection:
    """What the choice saw and decided (stored in the manifest as ``optimizer.selection``)."""

    metric: str
    n_val: int
    rows: list[dict[str, Any]] = field(default_factory=list)
    shipped: str = ZERO_SHOT
    reason: str = ""
    forced: bool | str = False
    #: how a candidate's score is formed: the mean over questions, or a set-level statistic
    statistic: str = "mean over the questions"

    def to_dict(self) -> dict[str, Any]:
        rows = [{k: v for k, v in r.items() if k != "answers"} for r in self.rows]
        return {"metric": self.metric, "n_val": self.n_val, "statistic": self.statistic,
                "candidates": rows, "shipped": self.shipped, "reason": self.reason,
                "forced": self.forced}

    def line(self) -> str:
        """The one line a compile prints about its choice."""
        return self.reason

    def answer_rows(self) -> list[dict[str, Any]]:
        """Every candidate's answer to every validation question, with its score: what to
        read when the choice surprises (the manifest keeps only the scores)."""
        return [{"candidate": r["label"], **a} for r in self.rows for a in r.get("answers", [])]


def _score_one(candidate: Candidate, valset: list[Any], metric: Any, memo: CallMemo,
               budget: Any, threads: int = 1, parts: tuple[Any, ...] = (),
               metric_name: str = "") -> dict[str, Any]:
    """Score one candidate on every validation question. With ``parts`` (the per-question
    metrics a set-level objective is computed from) those are scored instead of ``metric``,
    each question's value is the statistic over that one question, and the candidate's
    ``mean`` is the statistic over the set (its ``parts`` arrays are kept for the interval)."""
    from ambiqa.evaluation.stats import set_value

    start = time.perf_counter()
    hits0 = memo.hits

    def score(ex: Any, pred: Any) -> tuple[float, list[float]]:
        if parts:
            got = [_finite(part(ex, pred)) for part in parts]
            return _finite(set_value(metric_name, [[v] for v in got])), got
        return _finite(metric(ex, pred)), []

    def one(item: tuple[int, Any]) -> tuple[float, dict[str, Any], bool, list[float]]:
        i, ex = item
        if budget is not None:
            budget.check()
        qid = str(getattr(ex, "id", "") or i)
        try:
            pred = candidate.program(question=ex.question)
        except Exception as exc:  # one failing question scores 0, as in any evaluation
            record_event("select", f"{candidate.label} failed: {type(exc).__name__}"[:200])
            return 0.0, {"id": qid, "question": ex.question, "answer": None, "score": 0.0,
                         "error": type(exc).__name__}, True, [0.0] * len(parts)
        value, got = score(ex, pred)
        # the readings too: two candidates level on the objective may differ in what
        # clarify wrote (compile-v5), and the answer alone does not show it
        readings = [{"question": r["question"], "answer": r["answer"]}
                    for r in interpretations_of(pred)]
        return value, {"id": qid, "question": ex.question,
                       "answer": prediction_answer(pred), "score": value,
                       "interpretations": readings}, False, got

    # questions in flight at once: an LM with two slots (the embedded one) answers two
    # questions' calls side by side; each worker carries the trace (ambiqa.parallel)
    with track() as trace, memo.installed(candidate.program):
        done = run_parallel(one, list(enumerate(valset)), max_workers=threads)
    scores = [value for value, _, _, _ in done]
    answers = [row for _, row, _, _ in done]
    errors = sum(1 for _, _, failed, _ in done if failed)
    part_arrays = [[got[i] for _, _, _, got in done] for i in range(len(parts))]
    if parts:
        mean = _finite(set_value(metric_name, part_arrays)) if scores else 0.0
    else:
        mean = sum(scores) / len(scores) if scores else 0.0
    cost = trace.summary()
    return {"label": candidate.label, "note": candidate.note, "scores": scores,
            "answers": answers, "parts": part_arrays, "mean": mean, "errors": errors,
            "lm_calls": cost.get("lm_calls", 0), "cached_calls": cost.get("cached_calls", 0),
            "memo_hits": memo.hits - hits0,
            "seconds": round(time.perf_counter() - start, 3)}


def _finite(value: Any) -> float:
    """A score as a float; NaN or unreadable counts 0, as a failed score must not win."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return 0.0
    return 0.0 if math.isnan(value) else value


def _paired(row: dict[str, Any], base: dict[str, Any], metric_name: str) -> list[float] | None:
    """The paired 95% interval of ``row`` − ``base`` on the same questions: of the set-level
    statistic when the rows carry its parts, else of the per-question mean."""
    from ambiqa.evaluation.stats import paired_interval  # loads numpy

    if row.get("parts"):
        lo, hi, _ = paired_interval(metric_name, row["parts"], base["parts"])
    else:
        lo, hi, _ = paired_interval("score", [row["scores"]], [base["scores"]])
    return None if math.isnan(lo) else [round(lo, 4), round(hi, 4)]


def choose(candidates: list[Candidate], valset: list[Any], metric: Any, *, metric_name: str,
           preferred: str, force: bool | str = False, budget: Any = None,
           say: Callable[[str], None] | None = None, threads: int = 1,
           parts: tuple[Any, ...] = (),
           ) -> tuple[Any, Selection]:
    """Score every candidate on ``valset``; return (the program to ship, the selection).

    ``candidates[0]`` must be the zero-shot program. ``preferred`` is the label of the
    teleprompter's own result, shipped whatever the scores when ``force`` is True; ``force``
    may instead name any candidate's label (the table showed a cheaper one nearly as good,
    say), which then ships, its comparison recorded all the same. Candidates whose
    programs have the same state as an earlier one are scored once (listed as duplicates).
    ``say`` gets a line as each candidate starts and ends: on the 1.5B a full candidate takes
    many minutes, and a compile that prints nothing for an hour looks hung. ``threads``:
    validation questions answered at once (scores and answers keep the questions' order).
    ``parts``: for a set-level ``metric_name`` (``dr``), the per-question metrics it is
    computed from (``dspy_metric`` puts them on ``metric.parts``); candidates are then ranked
    by the statistic over the set (module docstring).
    """
    if not candidates or candidates[0].label != ZERO_SHOT:
        raise ValueError("the zero-shot program must be the first candidate")
    if parts:
        if set_level_name(metric_name) is None or len(parts_of(metric_name)) != len(parts):
            raise ValueError(f"parts given for {metric_name!r}, which is not a set-level "
                             "metric of that many parts")
    if isinstance(force, str):
        labels = [c.label for c in candidates]
        if force not in labels:  # said before any candidate is scored
            raise ConfigError(f"--ship {force}: no candidate has that label",
                              hint="the candidates: " + ", ".join(labels))
        preferred = force
    memo = CallMemo()
    sel = Selection(metric=metric_name, n_val=len(valset), forced=force)
    seen: dict[str, dict[str, Any]] = {}
    results: list[tuple[Candidate, dict[str, Any]]] = []
    tell = say or (lambda _line: None)
    for i, cand in enumerate(candidates, 1):
        key = json.dumps({n: _state_key(p) for n, p in cand.program.named_predictors()},
                         sort_keys=True)
        if key in seen:
            row = {**seen[key], "label": cand.label, "note": cand.note, "answers": [],
                   "same_as": seen[key]["label"], "lm_calls": 0, "cached_calls": 0,
                   "seconds": 0.0}
            tell(f"candidate {i}/{len(candidates)} {cand.label}: the same program as "
                 f"{row['same_as']}, not scored again")
        else:
            tell(f"candidate {i}/{len(candidates)} {cand.label}: scoring on {len(valset)} "
                 "validation questions ...")
            row = _score_one(cand, valset, metric, memo, budget, threads, parts=parts,
                             metric_name=metric_name)
            seen[key] = row
            cached = (f" ({row['cached_calls']} of them from the response cache)"
                      if row["cached_calls"] else "")
            tell(f"candidate {i}/{len(candidates)} {cand.label}: {metric_name} "
                 f"{row['mean']:.3f} ({row['lm_calls']} LM calls{cached}, {row['memo_hits']} "
                 f"answered from the memo, {row['seconds']:.0f} s)")
        results.append((cand, row))
    base = results[0][1]
    for _, row in results:
        row["diff_vs_zero_shot"] = round(row["mean"] - base["mean"], 4)
        row["interval_vs_zero_shot"] = (None if row["label"] == ZERO_SHOT
                                        else _paired(row, base, metric_name))
    best_cand, best = max(results, key=lambda cr: (cr[1]["mean"], cr[0].label == ZERO_SHOT))
    by_label = {c.label: (c, r) for c, r in results}
    zero_mean = results[0][1]["mean"]
    if force and preferred in by_label:
        ship, row = by_label[preferred]
        sel.reason = (f"shipping {preferred} as forced: {metric_name} {row['mean']:.3f} vs "
                      f"zero-shot {zero_mean:.3f} on {len(valset)} validation questions")
    elif best["mean"] > zero_mean:
        ship, row = best_cand, best
        ci = row["interval_vs_zero_shot"]
        sel.reason = (f"shipping {ship.label}: {metric_name} {row['mean']:.3f} vs zero-shot "
                      f"{zero_mean:.3f} on {len(valset)} validation questions, paired "
                      f"difference {row['diff_vs_zero_shot']:+.3f} "
                      + (f"[{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else "(no interval)"))
    else:
        ship, row = results[0]
        sel.reason = (f"no candidate beat zero-shot on {len(valset)} validation questions "
                      f"({metric_name} {zero_mean:.3f}; best other "
                      f"{max((r['mean'] for c, r in results[1:]), default=zero_mean):.3f}): "
                      "shipping zero-shot (force=True / --force ships the compiled one, "
                      "--ship LABEL any candidate)")
    sel.shipped = ship.label
    sel.rows = [{k: v for k, v in r.items() if k not in ("scores", "parts")}
                | {"scores": r["scores"]} for _, r in results]
    if parts:
        sel.statistic = f"{metric_name} over the set, from its parts"
    record_event("select", sel.reason[:300])
    return ship.program, sel
