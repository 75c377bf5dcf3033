"""Scoring a trained reader: validation figures and the SQuAD 2.0 null-threshold choice.

Split from :mod:`ambiqa.reader_training.train` (which re-exports these names): both are
pure functions of a reader's outputs, used after training, by ``ambiqa reader calibrate`` and by
``benchmarks/reader.py``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from ambiqa.evaluation.extractive import ExtractiveReader
from ambiqa.evaluation.metrics import exact_match, token_f1
from ambiqa.reader_training.data import ReaderExample


def validate(reader: ExtractiveReader, dev: Sequence[Any], *,
             examples: Sequence[ReaderExample] | None = None) -> dict[str, Any]:
    """Validation scores of a reader on evaluation data (ASQA dev by default).

    ``d_f1_human``: Disambig-F1 when the reader reads the annotators' own long answers (mean
    over annotators, then over questions) -- an upper-bound check of the reader itself.
    ``squad``: EM/F1 on the dev reader examples built like the training ones, split into
    answerable examples and no-answer ones (accuracy of abstaining).
    """
    per_q: list[float] = []
    t0 = time.perf_counter()
    reads = 0
    for rec in dev:
        pairs = list(rec.get("qa_pairs") or [])
        longs = list(rec.get("long_answers") or [])
        scores = []
        for long_answer in longs:
            if not pairs:
                continue
            f1s = [token_f1(reader.answer(str(p["question"]), str(long_answer)),
                            p["short_answers"]) for p in pairs]
            reads += len(pairs)
            scores.append(sum(f1s) / len(f1s))
        if scores:
            per_q.append(sum(scores) / len(scores))
    elapsed = time.perf_counter() - t0
    out: dict[str, Any] = {
        "n_questions": len(per_q),
        "d_f1_human": round(sum(per_q) / len(per_q), 4) if per_q else None,
        "ms_per_read": round(1000 * elapsed / max(1, reads), 2),
        "ms_per_question": round(1000 * elapsed / max(1, len(per_q)), 1),
    }
    if examples:
        ans = [e for e in examples if e.answer_start is not None]
        noans = [e for e in examples if e.answer_start is None]
        preds = {e.qid: reader.answer(e.question, e.context) for e in examples}
        out["squad"] = {
            "answerable": len(ans), "no_answer": len(noans),
            "answerable_em": round(sum(exact_match(preds[e.qid], e.aliases) for e in ans)
                                   / max(1, len(ans)), 4),
            "answerable_f1": round(sum(token_f1(preds[e.qid], e.aliases) for e in ans)
                                   / max(1, len(ans)), 4),
            "answerable_abstained": round(sum(not preds[e.qid] for e in ans)
                                          / max(1, len(ans)), 4),
            "no_answer_accuracy": round(sum(not preds[e.qid] for e in noans)
                                        / max(1, len(noans)), 4),
            # SQuAD 2.0 F1 over all examples: a no-answer example scores 1 when abstained on
            "overall_f1": round((sum(token_f1(preds[e.qid], e.aliases) for e in ans)
                                 + sum(not preds[e.qid] for e in noans))
                                / max(1, len(examples)), 4),
        }
    return out


def calibrate_null_threshold(margins: Sequence[float], texts: Sequence[str],
                             examples: Sequence[ReaderExample]) -> dict[str, Any]:
    """The null threshold that maximises SQuAD 2.0 F1 on ``examples`` (the official script's
    ``best_f1_thresh``): an answerable example scores the token F1 of its best span if that
    span beats the null score by more than the threshold, else 0; a no-answer example scores 1
    when the reader abstains. ``margins`` are best span score minus null score."""
    gains = [token_f1(t, e.aliases) if e.answer_start is not None else 0.0
             for t, e in zip(texts, examples, strict=True)]
    null_gain = [0.0 if e.answer_start is not None else 1.0 for e in examples]
    n = max(1, len(examples))

    def score(th: float) -> float:
        return sum(g if m > th else z for m, g, z in zip(margins, gains, null_gain,
                                                         strict=True)) / n

    candidates = sorted({0.0, float("-inf"), *(m - 1e-6 for m in margins)})
    best = max(candidates, key=lambda th: (round(score(th), 6), -abs(th)))
    return {"null_threshold": best if math.isfinite(best) else -1e9,
            "f1_at_threshold": round(score(best), 4), "f1_at_zero": round(score(0.0), 4),
            "abstain_share": round(sum(m <= best for m in margins) / n, 4)}
