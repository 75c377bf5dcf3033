"""The extractive reader's training settings, below both the example builders
(:mod:`ambiqa.reader_training.data`) and the trainer (:mod:`ambiqa.reader_training.train`),
which both read them; the package re-exports :class:`TrainConfig`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TrainConfig:
    """Everything that decides the trained weights (a resume must match it exactly)."""

    train: str = "asqa:train"
    base: str = ""
    epochs: float = 2.0
    max_steps: int = 0  # 0: epochs decide
    batch_size: int = 16
    lr: float = 1e-4
    warmup: float = 0.1
    weight_decay: float = 0.01
    seed: int = 0
    max_length: int = 384
    doc_stride: int = 128
    max_question_tokens: int = 64
    max_answer_tokens: int = 30
    removed_negatives: float = 0.33
    freeze_embeddings: bool = True  # word embeddings stay as pretrained: a third of the
    # weights, most of the optimizer's CPU time, and ~1.7k examples cannot improve them
    asqa_passages: bool = False  # add ASQA's grounding passages as a source
    hotpotqa: str = ""  # a HotpotQA training split to add as a source ("" = none)
    holdout: int = 0  # last N questions of `train` kept out as training-split validation
    ambignq: str = ""  # an AmbigNQ training split for distant supervision ("" = none)
    corpus: str = ""  # the passage corpus (JSONL) that distant supervision reads
    long_answer_repeat: int = 1  # times the ASQA long-answer examples appear per epoch
    ambignq_lists: bool = False  # + AmbigNQ interpretation lists as long-answer-like contexts
