"""The small demo set bundled with ambiqa (written by the project, not taken from any release).

``demo/questions.json`` holds ambiguous questions in the ASQA layout (each with a ``split``
field: train or dev) and ``demo/corpus.jsonl`` short encyclopedic passages: one per
disambiguation that states its answer, plus distractors on related topics. It lets the CLI,
the docs and the tests run end to end without any downloaded data.
"""

from __future__ import annotations

from pathlib import Path

import dspy

from ambiqa.data.loaders import load_asqa
from ambiqa.errors import ConfigError

DEMO_DIR = Path(__file__).resolve().parent / "demo"


def demo_questions_path() -> Path:
    return DEMO_DIR / "questions.json"


def demo_corpus_path() -> Path:
    return DEMO_DIR / "corpus.jsonl"


def load_demo(split: str = "train") -> list[dspy.Example]:
    """The demo questions of one split (``train`` or ``dev``) as ASQA-style examples."""
    if split not in ("train", "dev"):
        raise ConfigError(f"unknown demo split {split!r}; choose one of: train, dev")
    return load_asqa(demo_questions_path(), section=split)
