"""Metric names → per-example scoring functions, and their DSPy-teleprompter form.

A metric here is ``fn(example, prediction, reader=None) -> float`` where ``example`` comes
from an :mod:`ambiqa.data` loader and ``prediction`` is a program's output (a
``dspy.Prediction`` or the equivalent dict, e.g. one line of an evaluation JSONL):

* ASQA examples carry ``qa_pairs`` (``{question, short_answers}``) and ``long_answers``
  (a raw ASQA record's ``annotations[].long_answer`` is accepted too); HotpotQA / NQ / WebQ
  examples carry ``answers`` (or a single ``answer``).
* predictions carry ``answer`` (str), ``interpretations`` and ``passages`` (dicts with id,
  title, text).

Names: ``rouge-l``, ``str-em``, ``d-f1``, ``dr`` (ASQA long answers), ``em``, ``f1`` (short
answers), ``recall@K`` (any gold answer in the top-K passages) and ``mrecall@K`` (Min et al.,
2021) for any K. ``d-f1`` and ``dr`` need a reader; without one they use
:func:`ambiqa.evaluation.reader.make_reader`'s default — the extractive reader trained by
``ambiqa reader train`` when it is in the cache, else the LM stand-in
(:class:`ambiqa.evaluation.reader.LMReader`) — and reports must name ``reader.name``.

DR is a *set-level* metric: the ASQA scorer reports sqrt(mean D-F1 × mean ROUGE-L) over the
whole set, and run summaries, reports and comparisons compute it that way
(:mod:`ambiqa.evaluation.stats`). Per example, ``dr`` here gives the per-question root
sqrt(D-F1 × ROUGE-L) -- a usable objective for teleprompters, which need a per-example score,
and what run rows keep as ``dr_q`` for plots; it is not the DR a report prints.

Interpretation metrics (ASQA-style examples, predictions with ``interpretations``):
``answer-f1`` (ToC Table 3), ``n-interp`` (|Q^| after deduplication), ``sufficient@K``
(1 when |Q^| >= K; its run mean is Sufficient%), ``interp-recall`` (VerDICt's ungrounded
recall with the LM matcher) and ``interp-recall-lex`` (the same with a token-F1 matcher), and
the grounded ``g-precision``, ``g-recall``, ``g-f1`` (VerDICt App. A, LM judge). The judged
ones use the configured LM; reports name it (:func:`judge_name`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from typing import Any

from ambiqa.errors import ConfigError
from ambiqa.evaluation import metrics as m
from ambiqa.evaluation.judge import LMGroundingJudge, LMMatcher, numbered
from ambiqa.evaluation.metric_names import ALIASES, SET_LEVEL, canonical_name, with_set_parts
from ambiqa.evaluation.metrics import field_value
from ambiqa.evaluation.reader import Reader, make_reader

MetricFn = Callable[..., float]

# re-exported: callers look names up where they look metrics up
__all__ = ["canonical_name", "with_set_parts", "get_metric", "dspy_metric", "judge_name",
           "METRICS", "NEEDS_READER", "NEEDS_JUDGE", "MetricFn", "row_kind", "row_metrics"]
_AT_K = re.compile(r"^(m?recall|sufficient)@(\d+)$")


# ------------------------------------------------------------------ reading examples/predictions

def qa_pairs_of(example: Any, metric: str) -> list[Any]:
    pairs = field_value(example, "qa_pairs")
    if not pairs:
        raise ConfigError(f"metric {metric!r} needs ASQA-style examples with qa_pairs",
                          hint="use em/f1 for short-answer data sets (NQ, WebQ, HotpotQA)")
    return list(pairs)


def long_answers_of(example: Any) -> list[str]:
    refs = field_value(example, "long_answers")
    if refs is None:  # a raw ASQA record
        annotations = field_value(example, "annotations", []) or []
        refs = [field_value(a, "long_answer", "") for a in annotations]
    refs = [str(r) for r in (refs or []) if str(r).strip()]
    if not refs:
        raise ConfigError("metric 'rouge-l' needs examples with reference long answers",
                          hint="ROUGE-L is defined for ASQA; use em/f1 for short-answer data")
    return refs


def gold_answers_of(example: Any) -> list[str]:
    """Every acceptable short answer of an example (answers, answer, or all qa pairs')."""
    answers = field_value(example, "answers")
    if answers is None:
        answers = field_value(example, "answer")
    if answers is None and field_value(example, "qa_pairs"):
        answers = [a for p in field_value(example, "qa_pairs") for a in m.short_answers_of(p)]
    if answers is None:
        raise ConfigError("example has no gold answers (answers, answer or qa_pairs)")
    return [str(a) for a in m.as_list(answers) if str(a).strip()]


def answer_sets_of(example: Any) -> list[list[str]]:
    """The distinct answers of an example, each a list of aliases (for MRecall).

    ASQA/AmbigNQ: one set per qa pair. Short-answer data sets list aliases of one answer
    (NQ-open's ``answers``), so they form a single set and MRecall@k equals recall@k.
    """
    pairs = field_value(example, "qa_pairs")
    if pairs:
        return [m.short_answers_of(p) for p in pairs]
    sets = field_value(example, "answer_sets")
    if sets:
        return [m.as_list(s) for s in sets]
    return [gold_answers_of(example)]


# ------------------------------------------------------------------ rows of two kinds

#: metrics a short-answer row (``answers`` only) cannot be scored by: they need ``qa_pairs``
#: (its readings) or reference long answers
NEEDS_PAIRS_OR_LONG = frozenset({"str-em", "d-f1", "d-f1-cov", "dr", "rouge-l", "str-rouge",
                                 "answer-f1", "g-recall", "g-f1", "interp-recall",
                                 "interp-recall-lex"})
#: the short-answer metrics; an ambiguous row of a mixed file is scored by its own metrics
SHORT_ONLY = frozenset({"em", "f1"})


def row_kind(example: Any) -> str:
    """``"ambiguous"`` for a row with ``qa_pairs`` (its readings), else ``"short"``."""
    return "ambiguous" if field_value(example, "qa_pairs") else "short"


def has_long_answers(example: Any) -> bool:
    try:
        return bool(long_answers_of(example))
    except ConfigError:
        return False


def row_metrics(example: Any, names: list[str]) -> list[str]:
    """The metrics among ``names`` that one row of a *mixed* file is scored by.

    A question file mixing short-answer rows (``answers``) and ambiguous rows (``qa_pairs``)
    was scored with one metric set for the whole file: short rows failed under STR-EM, or the
    ambiguity metrics vanished. Now each row gets the metrics of its kind -- short rows EM and
    F1, ambiguous rows STR-EM and D-F1 (ROUGE-L and DR where the row has a long answer) --
    and every other metric (recall@K, judged ones) as before; each metric is then reported
    over the rows that have it, with its n. (EM/F1 of an ambiguous row would compare a long
    answer with the flattened short answers: near 0 by construction, so it is left out.)
    A file of one kind keeps the metric set it always had: this is not called for it.
    """
    kind = row_kind(example)
    out = []
    for name in names:
        key = canonical_name(name)
        if kind == "short" and key in NEEDS_PAIRS_OR_LONG:
            continue
        if kind == "ambiguous" and (key in SHORT_ONLY or (
                key in ("rouge-l", "dr", "str-rouge") and not has_long_answers(example))):
            continue
        out.append(name)
    return out


def prediction_answer(prediction: Any) -> str:
    return str(field_value(prediction, "answer", "") or "")


def passage_texts_of(prediction: Any) -> list[str]:
    passages = field_value(prediction, "passages", []) or []
    return [str(field_value(p, "text", "") or "") for p in passages]


# ------------------------------------------------------------------ the metrics


def _rouge_l(example: Any, prediction: Any, reader: Reader | None = None) -> float:
    return m.rouge_lsum(prediction_answer(prediction), long_answers_of(example))


def _str_em(example: Any, prediction: Any, reader: Reader | None = None) -> float:
    return m.str_em(prediction_answer(prediction), qa_pairs_of(example, "str-em"))


def _d_f1(example: Any, prediction: Any, reader: Reader | None = None) -> float:
    pairs = qa_pairs_of(example, "d-f1")
    return m.disambig_f1(prediction_answer(prediction), pairs, reader or make_reader(None))


def _dr(example: Any, prediction: Any, reader: Reader | None = None) -> float:
    return m.dr_score(_d_f1(example, prediction, reader), _rouge_l(example, prediction))


def _d_f1_cov(example: Any, prediction: Any, reader: Reader | None = None) -> float:
    """Coverage-aware D-F1: the mean of D-F1 and STR-EM, i.e. per gold pair half for the
    reader recovering its answer, half for the answer stating it in words. A compile
    objective: D-F1 alone rewards terse answers a reader reads well, STR-EM alone ignores
    the reader; a dropped interpretation costs under both halves."""
    return 0.5 * (_d_f1(example, prediction, reader) + _str_em(example, prediction))


def _str_rouge(example: Any, prediction: Any, reader: Reader | None = None) -> float:
    """The mean of STR-EM and ROUGE-L: a compile objective that needs no reader. Half for
    stating the gold short answers, half for the references' wording and length, so neither
    a long answer listing everything nor a terse one in the references' style wins alone.
    A stand-in for DR (which puts the reader's D-F1 where STR-EM is) while no D-F1 reader is
    at hand; reports name it as such."""
    return 0.5 * (_str_em(example, prediction) + _rouge_l(example, prediction))


def _em(example: Any, prediction: Any, reader: Reader | None = None) -> float:
    return m.exact_match(prediction_answer(prediction), gold_answers_of(example))


def _f1(example: Any, prediction: Any, reader: Reader | None = None) -> float:
    return m.token_f1(prediction_answer(prediction), gold_answers_of(example))


def interpretations_of(prediction: Any) -> list[dict[str, Any]]:
    """The prediction's generated (question, answer, cited passage ids) triples."""
    out = []
    for it in field_value(prediction, "interpretations", []) or []:
        out.append({"question": str(field_value(it, "question", "") or ""),
                     "answer": str(field_value(it, "answer", "") or ""),
                     "passages": [str(x) for x in (field_value(it, "passages", []) or [])]})
    return [it for it in out if it["question"].strip()]


def _answer_f1(example: Any, prediction: Any, reader: Reader | None = None) -> float:
    return m.answer_f1_pairs(interpretations_of(prediction), qa_pairs_of(example, "answer-f1"))


# ---- VerDICt grounding and interpretation metrics (LM judge; see ambiqa.evaluation.judge)

_JUDGES: dict[str, Any] = {}


def default_judge() -> Any:
    """The process-wide LM grounding judge (uses the configured LM at call time); one
    instance so its verdict memo is shared by g-precision, g-recall and g-f1."""
    if "judge" not in _JUDGES:
        _JUDGES["judge"] = LMGroundingJudge()
    return _JUDGES["judge"]


def default_matcher() -> Any:
    if "matcher" not in _JUDGES:
        _JUDGES["matcher"] = LMMatcher()
    return _JUDGES["matcher"]


def grounding_inputs(example: Any, prediction: Any
                     ) -> tuple[list[m.GroundedQA], list[m.GroundedQA], list[str]]:
    """(generated, gold, model passage texts) for the grounded metrics.

    Generated interpretations cite passage ids; those resolve to the texts in the
    prediction's ``passages``. As VerDICt App. A allows, an interpretation that cites nothing
    is checked against all retrieved passages (U_q). A gold pair is checked against its own
    ``context`` passage (raw ASQA records), else against the example's annotated
    ``gold_passages`` as one numbered block (what the ASQA loader keeps), else against U_q.
    """
    texts = {str(field_value(p, "id", "")): str(field_value(p, "text", "") or "")
             for p in field_value(prediction, "passages", []) or []}
    retrieved = [t for t in texts.values() if t.strip()]
    generated = []
    cited: list[str] = []
    for it in interpretations_of(prediction):
        own = [texts[i] for i in it["passages"] if texts.get(i, "").strip()]
        cited.extend(t for t in own if t not in cited)
        generated.append(m.GroundedQA(it["question"], it["answer"], own or retrieved))
    annotated = [str(field_value(p, "text", "") or "")
                 for p in field_value(example, "gold_passages", []) or []]
    annotated = [t for t in annotated if t.strip()]
    fallback = [numbered(annotated)] if annotated else retrieved
    gold = []
    for pair in qa_pairs_of(example, "g-recall"):
        context = str(field_value(pair, "context", "") or "")
        answers = m.short_answers_of(pair)
        gold.append(m.GroundedQA(str(field_value(pair, "question", "")),
                                 answers[0] if answers else "",
                                 [context] if context.strip() else fallback))
    return generated, gold, cited or retrieved


def _g_scores(example: Any, prediction: Any) -> tuple[float, float]:
    judge = default_judge()
    generated, gold, pool = grounding_inputs(example, prediction)
    precision = m.grounded_precision(generated, judge)
    recall = m.grounded_recall(generated, gold, judge, pool=[numbered(pool)] if pool else [])
    return precision, recall


def _g_precision(example: Any, prediction: Any, reader: Reader | None = None) -> float:
    generated, _, _ = grounding_inputs(example, prediction)
    return m.grounded_precision(generated, default_judge())


def _g_recall(example: Any, prediction: Any, reader: Reader | None = None) -> float:
    return _g_scores(example, prediction)[1]


def _g_f1(example: Any, prediction: Any, reader: Reader | None = None) -> float:
    return m.g_f1(*_g_scores(example, prediction))


def _gold_questions(example: Any, metric: str) -> list[str]:
    return [str(field_value(p, "question", "") or "") for p in qa_pairs_of(example, metric)]


def _interp_recall(example: Any, prediction: Any, reader: Reader | None = None) -> float:
    generated = [it["question"] for it in interpretations_of(prediction)]
    return m.ungrounded_recall(generated, _gold_questions(example, "interp-recall"),
                               default_matcher())


def _interp_recall_lex(example: Any, prediction: Any, reader: Reader | None = None) -> float:
    generated = [it["question"] for it in interpretations_of(prediction)]
    return m.ungrounded_recall(generated, _gold_questions(example, "interp-recall-lex"),
                               m.lexical_match)


def _n_interp(example: Any, prediction: Any, reader: Reader | None = None) -> float:
    return float(m.num_interpretations(it["question"] for it in interpretations_of(prediction)))


def _sufficient(k: int) -> MetricFn:
    def fn(example: Any, prediction: Any, reader: Reader | None = None) -> float:
        # per example: 1.0 when |Q^| >= k; its mean over a run is Sufficient%
        return m.sufficient_rate([int(_n_interp(example, prediction))], k)

    fn.__name__ = f"sufficient@{k}"
    return fn


def _answer_recall(k: int) -> MetricFn:
    def fn(example: Any, prediction: Any, reader: Reader | None = None) -> float:
        return m.answer_recall_at_k(passage_texts_of(prediction), gold_answers_of(example), k)

    fn.__name__ = f"recall@{k}"
    return fn


def _mrecall(k: int) -> MetricFn:
    def fn(example: Any, prediction: Any, reader: Reader | None = None) -> float:
        return m.mrecall_at_k(passage_texts_of(prediction), answer_sets_of(example), k)

    fn.__name__ = f"mrecall@{k}"
    return fn


METRICS: dict[str, MetricFn] = {
    "rouge-l": _rouge_l,
    "str-em": _str_em,
    "d-f1": _d_f1,
    "dr": _dr,
    "d-f1-cov": _d_f1_cov,
    "str-rouge": _str_rouge,
    "em": _em,
    "f1": _f1,
    "recall@5": _answer_recall(5),
    "mrecall@5": _mrecall(5),
    "answer-f1": _answer_f1,
    "g-precision": _g_precision,
    "g-recall": _g_recall,
    "g-f1": _g_f1,
    "interp-recall": _interp_recall,
    "interp-recall-lex": _interp_recall_lex,
    "n-interp": _n_interp,
    "sufficient@3": _sufficient(3),
}

#: metrics whose score depends on a reader (reports must name it)
NEEDS_READER = frozenset({"d-f1", "dr", "d-f1-cov"})
#: metrics whose score depends on an LM judge (reports must name it: ``judge_name()``)
NEEDS_JUDGE = frozenset({"g-precision", "g-recall", "g-f1", "interp-recall"})


def judge_name(metric_names: list[str]) -> str | None:
    """The judge that scores any of ``metric_names`` (None when none needs one)."""
    keys = {canonical_name(n) for n in metric_names}
    if not keys & NEEDS_JUDGE:
        return None
    names = []
    if keys & {"g-precision", "g-recall", "g-f1"}:
        names.append(default_judge().name)
    if "interp-recall" in keys:
        names.append(default_matcher().name)
    return ", ".join(names)

def get_metric(name: str) -> MetricFn:
    """Look up a metric by name; ``recall@K`` / ``mrecall@K`` work for any K >= 1.

    An unknown name raises :class:`ConfigError` naming the closest known metric.
    """
    key = canonical_name(name)
    if key in METRICS:
        return METRICS[key]
    at_k = _AT_K.match(key)
    if at_k and int(at_k.group(2)) >= 1:
        k = int(at_k.group(2))
        kind = at_k.group(1)
        if kind == "sufficient":
            return _sufficient(k)
        return _mrecall(k) if kind == "mrecall" else _answer_recall(k)
    known = sorted(METRICS) + sorted(ALIASES)
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.5)
    hint = (f"did you mean {canonical_name(close[0])!r}?" if close
            else f"known metrics: {', '.join(sorted(METRICS))}")
    raise ConfigError(f"unknown metric {name!r}", hint=hint)


def dspy_metric(name: str, reader: Reader | None = None, *,
                threshold: float | None = None) -> Callable[..., float | bool]:
    """A DSPy metric ``metric(example, pred, trace=None)`` for Evaluate and teleprompters.

    Returns the float score, DSPy's convention for evaluation and for optimizers that rank
    candidates (MIPROv2, random search). During bootstrapping DSPy passes a ``trace`` and keeps
    a demo when the metric is truthy -- any score above 0 would pass -- so either give
    BootstrapFewShot a ``metric_threshold`` or give ``threshold`` here, which makes the metric
    return ``score >= threshold`` (a bool) whenever ``trace`` is not None.

    ``d-f1`` / ``dr`` build their default reader (the LM stand-in) once, here; the reader's
    name is on ``metric.reader_name`` for reports.
    """
    key = canonical_name(name)
    fn = get_metric(key)
    if key in NEEDS_READER and reader is None:
        reader = make_reader(None)

    def metric(example: Any, pred: Any, trace: Any = None) -> float | bool:
        score = float(fn(example, pred, reader))
        if trace is not None and threshold is not None:
            return score >= threshold
        return score

    metric.__name__ = key.replace("-", "_").replace("@", "_at_")
    metric.metric_name = key  # type: ignore[attr-defined]
    metric.reader_name = reader.name if reader is not None else None  # type: ignore[attr-defined]
    # a set-level objective (DR: the root of two set means) is ranked from its parts by a
    # compile's choice, not as the mean of its per-question values (ambiqa.optimizers.select)
    metric.parts = tuple(dspy_metric(part, reader=reader)  # type: ignore[attr-defined]
                         for part in SET_LEVEL.get(key, ()))
    return metric
