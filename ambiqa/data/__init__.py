"""Data layer: QA data sets → ``dspy.Example`` lists, retrieval corpora → passages.

``load_dataset("asqa:train:50")`` resolves a spec against the data root (``$AMBIQA_DATA`` or
``../shared/data``); ``load_asqa(path)`` and its siblings read one file in a released format;
``iter_corpus(path)`` streams a passage corpus (JSONL, CSV/TSV, a folder of .txt/.md files,
Parquet); ``jsonl:PATH`` reads a user's own questions (:mod:`ambiqa.data.loaders.plain`).
``demo:train`` / ``demo:dev`` and :func:`demo_corpus_path` give the small set bundled with ambiqa.
"""

from ambiqa.data.corpus import corpus_fingerprint, iter_corpus, load_corpus
from ambiqa.data.demo_set import demo_corpus_path, demo_questions_path, load_demo
from ambiqa.data.loaders import (
    FORMATS,
    load_2wikimultihopqa,
    load_ambignq,
    load_asqa,
    load_hotpotqa,
    load_jsonl,
    load_nq,
    load_situatedqa,
    load_triviaqa,
    load_webq,
    metrics_for,
)
from ambiqa.data.specs import (
    DATASETS,
    DatasetSpec,
    default_data_root,
    is_training_split,
    load_dataset,
    parse_spec,
    resolve_path,
)

__all__ = [
    "DATASETS",
    "FORMATS",
    "DatasetSpec",
    "corpus_fingerprint",
    "default_data_root",
    "demo_corpus_path",
    "demo_questions_path",
    "is_training_split",
    "iter_corpus",
    "load_2wikimultihopqa",
    "load_ambignq",
    "load_asqa",
    "load_corpus",
    "load_dataset",
    "load_demo",
    "load_hotpotqa",
    "load_jsonl",
    "load_nq",
    "load_situatedqa",
    "load_triviaqa",
    "load_webq",
    "metrics_for",
    "parse_spec",
    "resolve_path",
]
