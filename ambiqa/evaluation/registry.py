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
2021) for any K. ``d-f1`` and ``dr`` need a reader; without one they use the LM stand-in
(:class:`ambiqa.evaluation.reader.LMReader`), and reports must name ``reader.name``.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from typing import Any

from ambiqa.errors import ConfigError
from ambiqa.evaluation import metrics as m
from ambiqa.evaluation.metrics import field_value
from ambiqa.evaluation.reader import Reader, make_reader

MetricFn = Callable[..., float]


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


def _em(example: Any, prediction: Any, reader: Reader | None = None) -> float:
    return m.exact_match(prediction_answer(prediction), gold_answers_of(example))


def _f1(example: Any, prediction: Any, reader: Reader | None = None) -> float:
    return m.token_f1(prediction_answer(prediction), gold_answers_of(example))


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
    "em": _em,
    "f1": _f1,
    "recall@5": _answer_recall(5),
    "mrecall@5": _mrecall(5),
}

#: metrics whose score depends on a reader (reports must name it)
NEEDS_READER = frozenset({"d-f1", "dr"})

_ALIASES = {
    "rouge-lsum": "rouge-l", "rougel": "rouge-l", "rouge": "rouge-l",
    "disambig-f1": "d-f1", "df1": "d-f1", "str-exact-match": "str-em",
    "exact-match": "em", "token-f1": "f1",
}
_AT_K = re.compile(r"^(m?recall)@(\d+)$")


def canonical_name(name: str) -> str:
    key = str(name).strip().lower().replace("_", "-").replace(" ", "")
    return _ALIASES.get(key, key)


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
        return _mrecall(k) if at_k.group(1) == "mrecall" else _answer_recall(k)
    known = sorted(METRICS) + sorted(_ALIASES)
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
    return metric
