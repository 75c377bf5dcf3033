"""Evaluation, split by job. This package is scoring: metrics (pure functions), readers for
Disambig-F1, LM judges for the grounding metrics, the metric registry and the intervals of
:mod:`~ambiqa.evaluation.stats`. Runs (the resumable runner, its run directory, ``--part``
slices) live in :mod:`ambiqa.evaluation.runs`, reports over finished runs (report,
comparison, merge, plots, HTML) in :mod:`ambiqa.evaluation.reports`, and training the D-F1
reader in :mod:`ambiqa.reader_training`.

DSPy loads with the judges (this package imports them). Heavier libraries load on first use:
rouge-score when ROUGE is computed, transformers when a QA checkpoint is opened, numpy and
scipy when intervals are computed.
"""

from ambiqa.evaluation.metrics import (
    GroundedQA,
    answer_f1_pairs,
    answer_recall_at_k,
    disambig_f1,
    dr_score,
    exact_match,
    g_f1,
    grounded_precision,
    grounded_recall,
    lexical_match,
    mrecall_at_k,
    mrlr,
    mrwr,
    normalize_answer,
    num_interpretations,
    recall_at_k,
    rouge_lsum,
    rwr_matrix,
    str_em,
    sufficient_rate,
    token_f1,
    ungrounded_precision,
    ungrounded_recall,
)
from ambiqa.evaluation.reader import HFQAReader, LMReader, Reader, make_reader
from ambiqa.evaluation.registry import METRICS, dspy_metric, get_metric

__all__ = [
    "GroundedQA", "HFQAReader", "LMReader", "METRICS", "Reader", "answer_f1_pairs",
    "answer_recall_at_k", "disambig_f1", "dr_score", "dspy_metric", "exact_match", "g_f1",
    "get_metric", "grounded_precision", "grounded_recall", "make_reader", "mrecall_at_k",
    "mrlr", "mrwr", "normalize_answer", "num_interpretations", "recall_at_k", "rouge_lsum",
    "rwr_matrix", "str_em", "sufficient_rate", "token_f1", "lexical_match",
    "ungrounded_precision", "ungrounded_recall",
]
