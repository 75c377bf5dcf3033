"""Training triples for ColBERT, built from *training splits only*.

Why this shape: colbert-ai trains on ``(query, positive, negative)`` triples with ids into a
query table and a passage collection. No labelled ColBERT triples ship with the shared data,
so ambiqa derives them:

* **Queries and positives.**
  - ASQA train: the ambiguous question and each disambiguated question. A grounding passage
    (``passages``/``knowledge``/qa contexts) counts as a positive for a query only if it
    contains one of that query's short answers (normalized) -- the ASQA train passages are
    retrieved, not annotated, and many do not support the answer (DPR's weak-supervision
    rule).
  - HotpotQA train: the question and both supporting paragraphs (annotated gold).
  - NQ: its only split here (``oracle``) is the evaluation set, so it is *not* used. A user
    with an NQ train file can pass ``nq:train``; evaluation splits are refused.
* **Where positives live.** A positive that is in the corpus (same title and text) is used as
  that corpus passage; one that is not is added to the training collection from the training
  data's own text (most HotpotQA train paragraphs are not in the shared corpus).
* **Negatives.** BM25 over the corpus (title + text) for the query: passages ranked within
  ``hard_depth`` that are not positives and contain none of the query's answers (so a
  relevant passage is not trained as negative); plus uniformly random corpus passages for a
  share ``random_share`` of the triples, so the model also sees easy contrasts.

Everything is deterministic for a given seed. The result is plain JSON-able data: a query
table, a passage list (``"title | text"``, colbert-ai's indexing format) and triples of
indices, written by :func:`save_training_data` as JSON/JSONL.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ambiqa.errors import ConfigError, DataError
from ambiqa.fsutil import atomic_write, atomic_write_json
from ambiqa.types import Passage

DEFAULT_SOURCES = ("asqa:train", "hotpotqa:train")


@dataclass
class TrainingData:
    """Queries, a passage collection and ``[query_idx, pos_idx, neg_idx]`` triples."""

    queries: list[str]
    collection: list[str]
    triples: list[list[int]]
    stats: dict[str, Any] = field(default_factory=dict)
    # Held-out training queries (never in ``triples``) with their positives, for checkpoint
    # selection: ``[{"query", "positives": ["title | text", ...]}]``.
    validation: list[dict[str, Any]] = field(default_factory=list)

    def fingerprint(self) -> str:
        h = hashlib.sha256()
        for part in (self.queries, self.collection, self.triples):
            h.update(json.dumps(part, ensure_ascii=False).encode())
        return h.hexdigest()[:16]


def _norm(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def _contains_any(text_norm: str, answers_norm: Sequence[str]) -> bool:
    padded = f" {text_norm} "
    return any(a and f" {a} " in padded for a in answers_norm)


def colbert_text(title: str, text: str) -> str:
    """The text colbert-ai indexes for a passage (``"title | text"``), so training matches."""
    text = " ".join(text.split())
    title = " ".join(title.split())
    return f"{title} | {text}" if title else text


def _examples_for(spec: str, data_root: Path | None) -> tuple[str, list[Any]]:
    from ambiqa.data import is_training_split, load_dataset, parse_spec

    parsed = parse_spec(spec)
    if not is_training_split(parsed):
        raise ConfigError(f"{spec!r} is not a training split; ColBERT triples are built from "
                          "training data only (evaluation questions must stay unseen)",
                          hint="use e.g. asqa:train, hotpotqa:train (nq:oracle is the NQ "
                               "evaluation set here)")
    return parsed.format, load_dataset(spec, data_root=data_root)


def _query_positives(fmt: str, ex: Any) -> list[tuple[str, list[str], list[tuple[str, str]]]]:
    """``[(query, answers, [(title, text) positives])]`` for one training example."""
    out = []
    if fmt == "asqa":
        gold = [(p["title"], p["text"]) for p in ex.get("gold_passages") or []]
        normed = [_norm(f"{t} {x}") for t, x in gold]

        def supporting(answers: list[str]) -> list[tuple[str, str]]:
            ans = [_norm(a) for a in answers if _norm(a)]
            return [g for g, n in zip(gold, normed, strict=True) if _contains_any(n, ans)]

        all_answers = list(ex.get("answers") or [])
        out.append((ex.question, all_answers, supporting(all_answers)))
        for qa in ex.get("qa_pairs") or []:
            out.append((qa["question"], list(qa["short_answers"]),
                        supporting(list(qa["short_answers"]))))
    elif fmt in ("hotpotqa", "2wikimultihopqa"):
        pos = [(c["title"], c["text"]) for c in ex.get("contexts") or []
               if c.get("is_supporting")]
        out.append((ex.question, list(ex.get("answers") or [ex.get("answer", "")]), pos))
    elif fmt == "nq":
        pos = [(p["title"], p["text"]) for p in ex.get("gold_passages") or []]
        out.append((ex.question, list(ex.get("answers") or []), pos))
    else:
        raise ConfigError(f"cannot build ColBERT triples from {fmt!r} data (no passages)",
                          hint="sources with passages: asqa, hotpotqa, 2wikimultihopqa, nq")
    return [(q, a, p) for q, a, p in out if q.strip() and p]


def build_training_data(corpus: Iterable[Passage], sources: Sequence[str] = DEFAULT_SOURCES,
                        *, data_root: Path | None = None, negatives_per_positive: int = 3,
                        hard_depth: int = 30, random_share: float = 0.25, seed: int = 0,
                        limit_queries: int | None = None, holdout: float = 0.0
                        ) -> TrainingData:
    """Build triples from ``sources`` (training splits) against ``corpus`` (see module doc)."""
    if negatives_per_positive < 1:
        raise ConfigError("negatives_per_positive must be at least 1")
    if not 0.0 <= random_share <= 1.0:
        raise ConfigError("random_share must be in [0, 1]")
    corpus = list(corpus)
    if len(corpus) < 2:
        raise DataError("the corpus needs at least 2 passages to draw negatives from")
    rng = random.Random(seed)
    by_key = {(p.title, p.text): i for i, p in enumerate(corpus)}
    corpus_norm: list[str | None] = [None] * len(corpus)

    def norm_of(i: int) -> str:
        if corpus_norm[i] is None:
            corpus_norm[i] = _norm(f"{corpus[i].title} {corpus[i].text}")
        return corpus_norm[i]  # type: ignore[return-value]

    collection: list[str] = []
    coll_of_corpus: dict[int, int] = {}
    coll_of_added: dict[tuple[str, str], int] = {}

    def coll_corpus(i: int) -> int:
        if i not in coll_of_corpus:
            coll_of_corpus[i] = len(collection)
            collection.append(colbert_text(corpus[i].title, corpus[i].text))
        return coll_of_corpus[i]

    items: list[tuple[str, list[str], list[tuple[str, str]]]] = []
    stats: dict[str, Any] = {"sources": list(sources), "per_source": {}}
    validation: list[dict[str, Any]] = []
    for spec in sources:
        fmt, examples = _examples_for(spec, data_root)
        n_before = len(items)
        for ex in examples:
            qps = _query_positives(fmt, ex)
            # hold out whole examples (an ambiguous question with its disambiguations)
            if holdout and random.Random(f"{seed}:{ex.get('id')}").random() < holdout:
                validation.extend({"query": q, "positives": [colbert_text(*k) for k in p]}
                                  for q, _, p in qps[:1])
                continue
            items.extend(qps)
        stats["per_source"][spec] = {"examples": len(examples), "queries": len(items) - n_before}
    seen_q: set[str] = set()
    unique = []
    for item in items:
        if item[0] not in seen_q:
            seen_q.add(item[0])
            unique.append(item)
    items = unique
    if limit_queries is not None:
        rng.shuffle(items)
        items = items[:limit_queries]
    if not items:
        raise DataError(f"no training queries with a positive passage in {list(sources)}")

    bm25 = _bm25(corpus)
    queries: list[str] = []
    triples: list[list[int]] = []
    n_pos_corpus = n_pos_added = n_hard = n_random = 0
    hits = bm25.batch_search([q for q, _, _ in items], k=min(hard_depth, len(corpus)))
    pid_index = {p.id: i for i, p in enumerate(corpus)}
    for (query, answers, positives), ranked in zip(items, hits, strict=True):
        qidx = len(queries)
        queries.append(query)
        ans = [_norm(a) for a in answers if _norm(a)]
        pos_corpus = {by_key[k] for k in positives if k in by_key}
        hard = [pid_index[p.id] for p in ranked]
        hard = [i for i in hard if i not in pos_corpus and not _contains_any(norm_of(i), ans)]
        for key in dict.fromkeys(positives):
            if key in by_key:
                pos = coll_corpus(by_key[key])
                n_pos_corpus += 1
            else:
                if key not in coll_of_added:
                    coll_of_added[key] = len(collection)
                    collection.append(colbert_text(*key))
                pos = coll_of_added[key]
                n_pos_added += 1
            for _ in range(negatives_per_positive):
                use_random = not hard or rng.random() < random_share
                if use_random:
                    neg = _random_negative(rng, len(corpus), pos_corpus, ans, norm_of)
                    n_random += 1
                else:
                    neg = hard[rng.randrange(len(hard))]
                    n_hard += 1
                triples.append([qidx, pos, coll_corpus(neg)])
    rng.shuffle(triples)
    stats.update({"queries": len(queries), "triples": len(triples),
                  "collection": len(collection), "positives_in_corpus": n_pos_corpus,
                  "positives_added_from_train_text": n_pos_added, "bm25_negatives": n_hard,
                  "random_negatives": n_random, "seed": seed, "hard_depth": hard_depth,
                  "negatives_per_positive": negatives_per_positive,
                  "random_share": random_share})
    stats["validation_queries"] = len(validation)
    data = TrainingData(queries, collection, triples, stats, validation)
    data.stats["fingerprint"] = data.fingerprint()
    return data


def _random_negative(rng: random.Random, n: int, exclude: set[int], answers: Sequence[str],
                     norm_of: Any) -> int:
    for _ in range(50):
        i = rng.randrange(n)
        if i not in exclude and not _contains_any(norm_of(i), answers):
            return i
    return next(i for i in range(n) if i not in exclude)


def _bm25(corpus: Sequence[Passage]) -> Any:
    """An in-memory BM25 retriever over the corpus (2-3 s for 13k passages)."""
    import bm25s

    from ambiqa.retrieval.bm25 import BM25Retriever, _tokenize

    model = bm25s.BM25()
    model.index(_tokenize([f"{p.title} {p.text}" for p in corpus], return_ids=True),
                show_progress=False)
    return BM25Retriever(model, corpus)


# ---- persistence (plain JSON / JSONL) ------------------------------------------------------
def save_training_data(data: TrainingData, out_dir: Path) -> None:
    out_dir = Path(out_dir)
    atomic_write_json(out_dir / "queries.json", data.queries)
    atomic_write(out_dir / "collection.jsonl", lambda fh: fh.writelines(
        json.dumps(c, ensure_ascii=False) + "\n" for c in data.collection))
    atomic_write(out_dir / "triples.jsonl", lambda fh: fh.writelines(
        json.dumps(t) + "\n" for t in data.triples))
    atomic_write_json(out_dir / "triples_stats.json", data.stats)
    atomic_write_json(out_dir / "validation.json", data.validation)


def load_training_data(out_dir: Path) -> TrainingData:
    out_dir = Path(out_dir)
    try:
        queries = json.loads((out_dir / "queries.json").read_text(encoding="utf-8"))
        with open(out_dir / "collection.jsonl", encoding="utf-8") as fh:
            collection = [json.loads(line) for line in fh if line.strip()]
        with open(out_dir / "triples.jsonl", encoding="utf-8") as fh:
            triples = [json.loads(line) for line in fh if line.strip()]
        stats = json.loads((out_dir / "triples_stats.json").read_text(encoding="utf-8"))
        val_path = out_dir / "validation.json"
        validation = json.loads(val_path.read_text(encoding="utf-8")) \
            if val_path.is_file() else []
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read training data under {out_dir}: {exc}",
                        hint="delete the directory to rebuild the triples") from exc
    data = TrainingData(queries, collection, triples, stats, validation)
    for t in triples:
        if len(t) != 3 or not 0 <= t[0] < len(queries) or not all(
                0 <= x < len(collection) for x in t[1:]):
            raise DataError(f"training triple {t} points outside the data under {out_dir}")
    return data
