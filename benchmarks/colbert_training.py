"""ColBERT training driver and its checks (issue 15): build the training data once, decide on
distillation by measurement, then leave the training itself to ``ambiqa colbert train``.

Steps (each resumable; results in ``benchmarks/results/colbert_training.json``):

``--prepare``: build the n-way training examples from training splits only (BM25 + dense hard
negatives, weak labels for answer-only splits, dense teacher scores) into the training work
directory that ``ambiqa colbert train --out OUT`` reads (``OUT.work``), and score on the
held-out training questions (positives among each question's BM25 top 10, as in
BENCHMARKS.md's training table): the untrained identity-384 checkpoint, the untrained PCA-128
start and the dense MiniLM teacher. Distillation is worth trying only if the teacher ranks
the held-out positives better than the student's start.

``--validate CKPT [--label L]``: the same held-out score for a trained checkpoint.

    python -m benchmarks.colbert_training --prepare --out ~/.cache/ambiqa/colbert/minilm-trained-128
    ambiqa colbert train --dim 128 --out ~/.cache/ambiqa/colbert/minilm-trained-128 \\
        --dense-index dense:wiki-dense --distill --nway 4 --steps 400 --timeout 2100
    python -m benchmarks.colbert_training --validate ~/.cache/ambiqa/colbert/minilm-trained-128
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "colbert_training.json"
SOURCES = ("asqa:train", "hotpotqa:train", "webq:train", "ambignq:train_light:3000")


def _load() -> dict[str, Any]:
    return json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}


def _save(res: dict[str, Any]) -> None:
    from ambiqa.fsutil import atomic_write_json

    atomic_write_json(RESULTS, res)


def corpus_path() -> Path:
    from ambiqa.data import default_data_root

    root = default_data_root()
    if root is None:
        sys.exit("shared data not found: set AMBIQA_DATA")
    return root / "corpus" / "wiki_passages.jsonl"


def teacher_validation(dense: Any, validation: list[dict[str, Any]], corpus: list[Any],
                       n: int = 50, depth: int = 10) -> dict[str, Any]:
    """validation_scores' protocol with the dense retriever as the scorer."""
    import numpy as np

    from ambiqa.retrieval.triples import colbert_text, in_memory_bm25
    from ambiqa.types import Passage

    items = validation[:n]
    bm25 = in_memory_bm25(corpus)
    p1 = mrr = 0.0
    for item in items:
        positives = set(item["positives"])
        cands = [(True, t) for t in positives]
        for p in bm25.search(item["query"], depth):
            text = colbert_text(p.title, p.text)
            if text not in positives:
                cands.append((False, text))
        # the dense index encodes "title\ntext"; rebuild that form from "title | text"
        rendered = []
        for _, t in cands:
            title, sep, body = t.partition(" | ")
            rendered.append(Passage("", title, body).render() if sep else t)
        q = np.asarray(dense.encoder.encode([item["query"]]), dtype=np.float32)[0]
        d = np.asarray(dense.encoder.encode(rendered), dtype=np.float32)
        order = np.argsort(-(d @ q), kind="stable")
        rank = next(r for r, i in enumerate(order, 1) if cands[i][0])
        p1 += rank == 1
        mrr += 1.0 / rank
    return {"queries": len(items), "p_at_1": round(p1 / len(items), 4),
            "mrr": round(mrr / len(items), 4)}


def prepare(out: Path, dense_spec: str, nway: int, npp: int) -> None:
    from ambiqa.data.corpus import load_corpus
    from ambiqa.retrieval.checkpoint import identity_checkpoint, start_checkpoint
    from ambiqa.retrieval.factory import open_retriever
    from ambiqa.retrieval.training import validation_scores
    from ambiqa.retrieval.triples import (
        build_training_data,
        load_training_data,
        save_training_data,
    )

    res = _load()
    work = out.with_name(out.name + ".work")
    corpus = load_corpus(corpus_path())
    dense = open_retriever(dense_spec)
    if (work / "triples.jsonl").is_file():
        data = load_training_data(work)
    else:
        t0 = time.perf_counter()
        data = build_training_data(corpus, SOURCES, holdout=0.1, nway=nway, dense=dense,
                                   teacher=True, negatives_per_positive=npp)
        save_training_data(data, work)
        res["data"] = {**data.stats, "build_seconds": round(time.perf_counter() - t0, 1),
                       "work": str(work)}
        _save(res)
    print(json.dumps(res.get("data"), indent=1))
    val = res.setdefault("validation", {})
    if "dense teacher (all-MiniLM-L6-v2)" not in val:
        val["dense teacher (all-MiniLM-L6-v2)"] = teacher_validation(dense, data.validation,
                                                                     corpus)
        _save(res)
    if "identity-384 (untrained)" not in val:
        val["identity-384 (untrained)"] = validation_scores(identity_checkpoint(),
                                                            data.validation, corpus)
        _save(res)
    if "pca-128 start (untrained)" not in val:
        work.mkdir(parents=True, exist_ok=True)
        start = start_checkpoint(128, work, data.collection)
        val["pca-128 start (untrained)"] = validation_scores(start, data.validation, corpus)
        _save(res)
    print(json.dumps(val, indent=1))


def validate(ckpt: Path, label: str) -> None:
    from ambiqa.data.corpus import load_corpus
    from ambiqa.retrieval.checkpoint import checkpoint_info
    from ambiqa.retrieval.training import validation_scores
    from ambiqa.retrieval.triples import load_training_data

    res = _load()
    work = Path(res["data"]["work"])
    data = load_training_data(work)
    info = checkpoint_info(ckpt)
    score = validation_scores(ckpt, data.validation, load_corpus(corpus_path()))
    res.setdefault("validation", {})[label or info["id"]] = {
        **score, "checkpoint": info["id"], "training": info.get("training", {}).get("steps_done")}
    _save(res)
    print(json.dumps(res["validation"], indent=1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prepare", action="store_true")
    ap.add_argument("--out", type=Path, default=None, help="the checkpoint directory to train")
    ap.add_argument("--dense-index", default="dense:wiki-dense")
    ap.add_argument("--nway", type=int, default=4)
    ap.add_argument("--negatives-per-positive", type=int, default=1)
    ap.add_argument("--validate", type=Path, default=None)
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    if args.prepare:
        if args.out is None:
            sys.exit("--prepare needs --out (the checkpoint directory to train)")
        prepare(args.out.expanduser(), args.dense_index, args.nway, args.negatives_per_positive)
    if args.validate:
        validate(args.validate.expanduser(), args.label)
    return 0


if __name__ == "__main__":
    sys.exit(main())
