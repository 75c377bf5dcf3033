"""Textual feedback for ambiguous QA: what GEPA's reflection LM reads.

GEPA evolves instructions by reflecting on feedback about program runs. A bare score ("this
trajectory got 0.33") says nothing a small model can act on; ambiguous QA says much more.
For each gold interpretation (qa pair) of a training question, :func:`diagnose` finds:

* whether the long answer **states** it (a gold short answer occurs in it, STR-EM's test);
* whether a **passage** the program read held it (whole words, SQuAD-normalised);
* whether one of the program's **readings** (its interpretations) gave it;
* and, when it is missing from the answer, **which step lost it**:

  - ``retrieval`` -- no passage the program read holds the answer;
  - ``verification`` -- a passage held it, but the program's verifier threw it away (Diva
    took its closed-book path; ToC pruned the node whose answer it was);
  - ``clarification`` -- a passage held it and nothing pruned it, but no reading gave it;
  - ``generation`` -- a reading gave it and the long answer dropped it.

:class:`AmbiguityFeedback` wraps an end metric (D-F1, DR, ...) into GEPA's feedback metric:
``metric(gold, pred, trace, pred_name, pred_trace)`` returns ``dspy.Prediction(score=...,
feedback=...)``. The feedback names the gold readings and the step that lost each; when GEPA
asks about one predictor (``pred_name``), a line says what that predictor's own signal
(:mod:`ambiqa.optimizers.signals`) expected of the call. Gold answers appear in the feedback:
it is computed on training data only, as GEPA intends.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import dspy

from ambiqa.evaluation.metrics import field_value, normalize_answer, short_answers_of
from ambiqa.optimizers.signals import (
    ABSTAIN,
    INTERPRET,
    NO,
    READERS,
    READING_MAKERS,
    SELF_VERIFIERS,
    VERIFIERS,
    YES,
    is_gold_answer,
    judge_call,
    states_gold,
)

STEPS = ("retrieval", "verification", "clarification", "generation")


@dataclass(frozen=True)
class PairDiagnosis:
    """One gold interpretation of a training question, traced through the program."""

    question: str
    answer: str  # the first gold short answer (what the feedback names)
    stated: bool
    retrieved: bool
    read: bool  # a reading of the program gave this answer
    lost_at: str | None  # one of STEPS, None when stated

    def line(self) -> str:
        head = f"- \"{self.question}\" -> \"{self.answer}\": "
        if self.stated:
            return head + "stated in the answer."
        why = {
            "retrieval": "lost at retrieval: no passage the program read holds this answer.",
            "verification": "lost at verification: a passage held it, but the verifier "
                            "discarded it.",
            "clarification": "lost at clarification: a passage held it, but no reading of "
                             "the question gave this answer.",
            "generation": "lost at generation: a reading gave this answer, but the long answer "
                          "does not state it.",
        }
        return head + why[self.lost_at or "generation"]


def _stated(answer: str, golds: list[str]) -> bool:
    text = normalize_answer(answer)
    return any(g and g in text for g in (normalize_answer(a) for a in golds))


def _verifier_dropped(prediction: Any, golds: list[str]) -> bool:
    """Did the program's verifier discard evidence for ``golds``? Diva: the closed-book path;
    ToC: a pruned (never restored) node whose answer is one of them."""
    if field_value(prediction, "path") == "closed_book":
        return True
    gold_ex = {"qa_pairs": [{"short_answers": golds}]}
    for node in field_value(prediction, "tree", []) or []:
        if field_value(node, "parent") is None:
            continue
        if field_value(node, "pruned") and is_gold_answer(str(field_value(node, "answer", "")),
                                                          gold_ex):
            return True
    return False


def _passage_texts(prediction: Any) -> list[str]:
    return [str(field_value(p, "text", "") or "")
            for p in field_value(prediction, "passages", []) or []]


def diagnose(example: Any, prediction: Any) -> list[PairDiagnosis]:
    """Per gold qa pair: stated? retrieved? read? and the step that lost it."""
    answer = str(field_value(prediction, "answer", "") or "") if prediction is not None else ""
    texts = _passage_texts(prediction) if prediction is not None else []
    readings = [str(field_value(r, "answer", "") or "")
                for r in (field_value(prediction, "interpretations", []) or [])] \
        if prediction is not None else []
    out = []
    for pair in field_value(example, "qa_pairs", []) or []:
        golds = short_answers_of(pair)
        if not golds:
            continue
        gold_ex = {"qa_pairs": [{"short_answers": golds}]}
        stated = _stated(answer, golds)
        retrieved = states_gold(texts, gold_ex)
        read = any(is_gold_answer(r, gold_ex) for r in readings)
        lost = None
        if not stated:
            if read:
                lost = "generation"
            elif not retrieved:
                lost = "retrieval"
            elif prediction is not None and _verifier_dropped(prediction, golds):
                lost = "verification"
            else:
                lost = "clarification"
        out.append(PairDiagnosis(str(field_value(pair, "question", "")), golds[0], stated,
                                 retrieved, read, lost))
    return out


def _predictor_line(pred_name: str | None, pred_trace: Any, example: Any,
                    prediction: Any) -> str:
    """What the named predictor's own signal expected of the call GEPA is asking about."""
    if not pred_name or not pred_trace:
        return ""
    try:
        predictor, inputs, outputs = pred_trace[0]
    except (TypeError, ValueError, IndexError):
        return ""
    sig = predictor.signature.__name__
    out = dict(outputs.items()) if hasattr(outputs, "items") else {}
    j = judge_call(sig, dict(inputs), out, example, prediction)
    if j is None:
        return ""
    if sig in VERIFIERS:
        want = ("the passages hold a gold answer, so the verdict should be yes"
                if j.expected == YES else
                "no passage holds a gold answer, so the verdict should be no")
    elif sig in SELF_VERIFIERS:
        want = ("the proposed answer is a gold answer, so it should be kept (yes)"
                if j.expected == YES else
                "the proposed answer is not a gold answer, so it should be pruned (no)")
    elif sig in READERS:
        want = ("this passage states a gold answer, so it should yield an interpretation"
                if j.expected == INTERPRET else
                "this passage states no gold answer, so the reader should abstain")
    elif sig in READING_MAKERS:
        return (f"This step's readings led to {j.score:.0%} of the gold answers; the gold "
                "readings are listed above: write readings that separate them.")
    else:
        return ""
    got = {YES: "yes", NO: "no", INTERPRET: "an interpretation", ABSTAIN: "abstain",
           None: "an unreadable reply"}.get(j.predicted, str(j.predicted))
    verdict = "right" if j.correct else "wrong"
    return f"This call: {want}; it gave {got} ({verdict})."


def feedback_text(example: Any, prediction: Any, score: float, metric_name: str,
                  pred_name: str | None = None, pred_trace: Any = None) -> str:
    """The feedback GEPA's reflection LM reads for one run (see the module docstring)."""
    pairs = diagnose(example, prediction)
    if prediction is None:
        head = f"The program failed on this question (score {score:.2f})."
    else:
        n_stated = sum(p.stated for p in pairs)
        head = (f"Score {score:.2f} ({metric_name}). The question has {len(pairs)} gold "
                f"reading(s); the answer states {n_stated}.")
    lines = [head, *(p.line() for p in pairs)]
    lost = [p.lost_at for p in pairs if p.lost_at]
    if lost:
        worst = max(STEPS, key=lost.count)
        lines.append(f"Most readings were lost at {worst}.")
    extra = _predictor_line(pred_name, pred_trace, example, prediction)
    if extra:
        lines.append(extra)
    return "\n".join(lines)


class AmbiguityFeedback:
    """GEPA's feedback metric for ambiguous QA around an end ``metric`` (D-F1, DR, ...).

    Called by GEPA as ``(gold, pred, trace, pred_name, pred_trace)``; returns
    ``dspy.Prediction(score, feedback)``. A metric that fails or returns NaN scores 0.0 (as
    :class:`ambiqa.optimizers.compile.SafeMetric`) and is counted in ``nan``.
    """

    def __init__(self, metric: Any, metric_name: str | None = None) -> None:
        self.metric = metric
        self.metric_name = metric_name or getattr(metric, "metric_name", None) or getattr(
            getattr(metric, "metric", None), "metric_name", "score")
        self.nan = 0

    def score(self, gold: Any, pred: Any) -> float:
        if pred is None:
            return 0.0
        try:
            value = float(self.metric(gold, pred))
        except (TypeError, ValueError):
            value = math.nan
        if math.isnan(value):
            self.nan += 1
            return 0.0
        return value

    def __call__(self, gold: Any, pred: Any, trace: Any = None, pred_name: str | None = None,
                 pred_trace: Any = None) -> dspy.Prediction:
        value = self.score(gold, pred)
        return dspy.Prediction(score=value, feedback=feedback_text(
            gold, pred, value, self.metric_name, pred_name, pred_trace))
