"""Training the extractive reader that scores Disambig-F1 (``ambiqa reader train``).

A job of its own, apart from scoring: :mod:`~ambiqa.reader_training.data` builds the
SQuAD 2.0-style examples from training splits, :mod:`~ambiqa.reader_training.train` runs the
resumable training loop and writes the checkpoint, :mod:`~ambiqa.reader_training.validation`
scores it and picks its null threshold, :mod:`~ambiqa.reader_training.config` holds the
settings. Reading with a finished reader is scoring: :mod:`ambiqa.evaluation.extractive`.

torch and transformers load on first use (inside the training functions).
"""

from ambiqa.reader_training.config import TrainConfig
from ambiqa.reader_training.data import (
    ReaderExample,
    build_examples,
    build_hotpot_examples,
    build_passage_examples,
    featurize,
    holdout_examples,
    holdout_long_answer_examples,
    remove_sentence,
    training_examples,
)
from ambiqa.reader_training.train import (
    calibrate_and_validate,
    finish_from_device,
    pack_for_device,
    refuse_repo_output,
    train_reader,
)
from ambiqa.reader_training.validation import calibrate_null_threshold, validate

__all__ = [
    "ReaderExample", "TrainConfig", "build_examples", "build_hotpot_examples",
    "build_passage_examples", "calibrate_and_validate", "calibrate_null_threshold", "featurize",
    "finish_from_device", "holdout_examples", "holdout_long_answer_examples",
    "pack_for_device", "refuse_repo_output", "remove_sentence", "train_reader",
    "training_examples", "validate",
]
