"""Evaluation: metrics (pure functions), readers for Disambig-F1, LM judges for the grounding
metrics, the metric registry, the resumable runner, run reports and run comparison.

Heavy libraries load on first use: rouge-score when ROUGE is computed, transformers when a
QA checkpoint is opened, DSPy when the LM reader is built.
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
