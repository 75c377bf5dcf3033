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

from ambiqa.checks import check_int
from ambiqa.errors import ConfigError, DataError
from ambiqa.fsutil import atomic_write, atomic_write_json
from ambiqa.jsonio import loads, read_json
from ambiqa.types import Passage

DEFAULT_SOURCES = ("asqa:train", "hotpotqa:train")


@dataclass
class TrainingData:
    """Queries, a passage collection and ``[query_idx, pos_idx, neg_idx, ...]`` examples."""

    queries: list[str]
    collection: list[str]
    triples: list[list[int]]
    stats: dict[str, Any] = field(default_factory=dict)
    # Held-out training queries (never in ``triples``) with their positives, for checkpoint
    # selection: ``[{"query", "positives": ["title | text", ...]}]``.
    validation: list[dict[str, Any]] = field(default_factory=list)
    # Teacher scores, one list per example, aligned with its passages (empty: no teacher).
    scores: list[list[float]] = field(default_factory=list)

    @property
    def nway(self) -> int:
        """Passages per example (positive + negatives)."""
        return len(self.triples[0]) - 1 if self.triples else 2

    def fingerprint(self) -> str:
        h = hashlib.sha256()
        parts: list[Any] = [self.queries, self.collection, self.triples]
        if self.scores:
            parts.append(self.scores)
        for part in parts:
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
    # ambiqa.data loads DSPy; this module stays light for the CLI (`ambiqa colbert train`)
    from ambiqa.data import is_training_split, load_dataset, parse_spec

    parsed = parse_spec(spec)
    if not is_training_split(parsed):
        raise ConfigError(f"{spec!r} is not a training split; ColBERT triples are built from "
                          "training data only (evaluation questions must stay unseen)",
                          hint="use e.g. asqa:train, hotpotqa:train (nq:oracle is the NQ "
                               "evaluation set here)")
    return parsed.format, load_dataset(spec, data_root=data_root)


# Formats whose training questions come with answers but no passages: their positives are
# found by weak supervision (see _weak_positives).
WEAK_FORMATS = ("webq", "ambignq", "nq-weak")
WEAK_DEPTH = 10  # a weak positive must rank this high for BM25 or the dense retriever
MIN_ANSWER_CHARS = 3  # shorter answers ("1", "no") match too many passages to label one


def _query_positives(fmt: str, ex: Any) -> list[tuple[str, list[str], list[tuple[str, str]]]]:
    """``[(query, answers, [(title, text) positives])]`` for one training example.

    Weakly supervised formats (WEAK_FORMATS) return their queries with no positives; the
    builder labels them from the mined candidates.
    """
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
    elif fmt == "webq":
        return [(ex.question, list(ex.get("answers") or []), [])] if ex.question.strip() else []
    elif fmt == "ambignq":
        seen = {ex.question}
        out.append((ex.question, list(ex.get("answers") or []), []))
        for qa in ex.get("qa_pairs") or []:
            if qa["question"] not in seen:
                seen.add(qa["question"])
                out.append((qa["question"], list(qa.get("short_answers") or []), []))
        return [(q, a, p) for q, a, p in out if q.strip() and a]
    else:
        raise ConfigError(f"cannot build ColBERT triples from {fmt!r} data (no passages)",
                          hint="sources: asqa, hotpotqa, 2wikimultihopqa, nq (gold passages); "
                               "webq, ambignq (answers only, weakly labelled)")
    return [(q, a, p) for q, a, p in out if q.strip() and p]


def _usable_answers(answers: Sequence[str]) -> list[str]:
    return [n for n in (_norm(a) for a in answers) if len(n) >= MIN_ANSWER_CHARS]


def build_training_data(corpus: Iterable[Passage], sources: Sequence[str] = DEFAULT_SOURCES,
                        *, data_root: Path | None = None, negatives_per_positive: int = 3,
                        hard_depth: int = 30, random_share: float = 0.25, seed: int = 0,
                        limit_queries: int | None = None, holdout: float = 0.0,
                        nway: int = 2, dense: Any = None, teacher: bool = False
                        ) -> TrainingData:
    """Build training examples from ``sources`` (training splits) against ``corpus``.

    Each example is ``[query, positive, negative_1, ..., negative_{nway-1}]`` (``nway=2``:
    colbert-ai's classic triple); ``negatives_per_positive`` examples are drawn per positive.
    Hard negatives come from BM25 and, when ``dense`` (a DenseRetriever over the same corpus)
    is given, from the dense retriever too, alternating between the two pools inside an
    example. ``teacher=True`` (needs ``dense``) also records the dense retriever's cosine for
    every passage of every example in ``scores``, for colbert-ai's distillation loss.
    Questions without passages (WEAK_FORMATS) take as positive the best-ranked passage (by
    reciprocal-rank fusion of the two miners, top WEAK_DEPTH of either) that contains one of
    their answers, and are dropped when none does.
    """
    if negatives_per_positive < 1:
        raise ConfigError("negatives_per_positive must be at least 1")
    if not 0.0 <= random_share <= 1.0:
        raise ConfigError("random_share must be in [0, 1]")
    check_int("nway", nway, 2)
    if teacher and dense is None:
        raise ConfigError("teacher scores need the dense retriever (dense=...)")
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
    added_keys: list[tuple[int, tuple[str, str]]] = []

    def coll_corpus(i: int) -> int:
        if i not in coll_of_corpus:
            coll_of_corpus[i] = len(collection)
            collection.append(colbert_text(corpus[i].title, corpus[i].text))
        return coll_of_corpus[i]

    items: list[tuple[str, list[str], list[tuple[str, str]], bool]] = []
    stats: dict[str, Any] = {"sources": list(sources), "per_source": {}}
    validation: list[dict[str, Any]] = []
    for spec in sources:
        fmt, examples = _examples_for(spec, data_root)
        weak = fmt in WEAK_FORMATS
        n_before = len(items)
        for ex in examples:
            qps = _query_positives(fmt, ex)
            # hold out whole examples (an ambiguous question with its disambiguations)
            if holdout and random.Random(f"{seed}:{ex.get('id')}").random() < holdout:
                validation.extend({"query": q, "positives": [colbert_text(*k) for k in p]}
                                  for q, _, p in qps[:1] if p)
                continue
            items.extend((q, a, p, weak) for q, a, p in qps)
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

    depth = min(hard_depth, len(corpus))
    pid_index = {p.id: i for i, p in enumerate(corpus)}
    texts = [q for q, _, _, _ in items]
    pools_by_miner: dict[str, list[list[int]]] = {
        "bm25": [[pid_index[p.id] for p in r]
                 for r in in_memory_bm25(corpus).batch_search(texts, k=depth)]}
    q_vecs = None
    if dense is not None:
        import numpy as np

        q_vecs = np.asarray(dense.encoder.encode(texts), dtype=np.float32)
        dense_row = {p.id: i for i, p in enumerate(dense.passages)}
        if len(dense_row) != len(corpus) or any(p.id not in dense_row for p in corpus):
            raise DataError("the dense index was not built from this corpus",
                            hint="rebuild it: ambiqa index CORPUS --kind dense")
        order = np.array([dense_row[p.id] for p in corpus])
        corpus_vecs = dense.embeddings[order]
        scores_all = q_vecs @ corpus_vecs.T
        top = np.argsort(-scores_all, axis=1, kind="stable")[:, :depth]
        pools_by_miner["dense"] = [row.tolist() for row in top]
    miners = list(pools_by_miner)

    queries: list[str] = []
    triples: list[list[int]] = []
    example_rows: list[int] = []  # item index of each example (for teacher scores)
    n_pos_corpus = n_pos_added = n_random = n_weak = n_weak_dropped = 0
    n_hard = dict.fromkeys(miners, 0)
    for it, (query, answers, positives, weak) in enumerate(items):
        ans = [_norm(a) for a in answers if _norm(a)]
        pools = {m: pools_by_miner[m][it] for m in miners}
        if weak:
            usable = _usable_answers(answers)
            fused: dict[int, float] = {}
            for m in miners:
                for r, i in enumerate(pools[m][:WEAK_DEPTH]):
                    fused[i] = fused.get(i, 0.0) + 1.0 / (60 + r)
            labelled = [i for i in sorted(fused, key=lambda i: (-fused[i], i))
                        if usable and _contains_any(norm_of(i), usable)]
            if not labelled:
                n_weak_dropped += 1
                continue
            positives = [(corpus[labelled[0]].title, corpus[labelled[0]].text)]
            n_weak += 1
        qidx = len(queries)
        queries.append(query)
        pos_corpus = {by_key[k] for k in positives if k in by_key}
        hard = {m: [i for i in pools[m] if i not in pos_corpus
                    and not _contains_any(norm_of(i), ans)] for m in miners}
        for key in dict.fromkeys(positives):
            if key in by_key:
                pos = coll_corpus(by_key[key])
                n_pos_corpus += 1
            else:
                if key not in coll_of_added:
                    coll_of_added[key] = len(collection)
                    added_keys.append((len(collection), key))
                    collection.append(colbert_text(*key))
                pos = coll_of_added[key]
                n_pos_added += 1
            for _ in range(negatives_per_positive):
                example = [qidx, pos]
                used: set[int] = set()
                for j in range(nway - 1):
                    pool = [i for i in hard[miners[j % len(miners)]] if i not in used]
                    use_random = not pool or rng.random() < random_share
                    if use_random:
                        neg = _random_negative(rng, len(corpus), pos_corpus | used, ans, norm_of)
                        n_random += 1
                    else:
                        neg = pool[rng.randrange(len(pool))]
                        n_hard[miners[j % len(miners)]] += 1
                    used.add(neg)
                    example.append(coll_corpus(neg))
                triples.append(example)
                example_rows.append(it)
    scores: list[list[float]] = []
    if teacher:
        scores = _teacher_scores(dense, q_vecs, corpus_vecs, coll_of_corpus, added_keys,
                                 triples, example_rows)
    order_ex = list(range(len(triples)))
    rng.shuffle(order_ex)
    triples = [triples[i] for i in order_ex]
    scores = [scores[i] for i in order_ex] if scores else []
    stats.update({"queries": len(queries), "triples": len(triples),
                  "collection": len(collection), "positives_in_corpus": n_pos_corpus,
                  "positives_added_from_train_text": n_pos_added,
                  "bm25_negatives": n_hard.get("bm25", 0),
                  "dense_negatives": n_hard.get("dense", 0), "random_negatives": n_random,
                  "weak_positives": n_weak, "weak_queries_dropped": n_weak_dropped,
                  "miners": miners, "nway": nway, "teacher": "dense" if teacher else None,
                  "seed": seed, "hard_depth": hard_depth,
                  "negatives_per_positive": negatives_per_positive,
                  "random_share": random_share})
    stats["validation_queries"] = len(validation)
    data = TrainingData(queries, collection, triples, stats, validation, scores)
    data.stats["fingerprint"] = data.fingerprint()
    return data


def _teacher_scores(dense: Any, q_vecs: Any, corpus_vecs: Any, coll_of_corpus: dict[int, int],
                    added_keys: list[tuple[int, tuple[str, str]]], triples: list[list[int]],
                    example_rows: list[int]) -> list[list[float]]:
    """The dense retriever's cosine of each example's query with each of its passages."""
    import numpy as np

    dim = corpus_vecs.shape[1]
    n = max([*coll_of_corpus.values(), *(c for c, _ in added_keys)], default=-1) + 1
    coll_vecs = np.zeros((n, dim), dtype=np.float32)
    for ci, cc in coll_of_corpus.items():
        coll_vecs[cc] = corpus_vecs[ci]
    if added_keys:
        enc = np.asarray(dense.encoder.encode([Passage("", t, x).render()
                                               for _, (t, x) in added_keys]), dtype=np.float32)
        for (cc, _), v in zip(added_keys, enc, strict=True):
            coll_vecs[cc] = v
    return [[round(float(q_vecs[row] @ coll_vecs[c]), 5) for c in ex[1:]]
            for ex, row in zip(triples, example_rows, strict=True)]


def _random_negative(rng: random.Random, n: int, exclude: set[int], answers: Sequence[str],
                     norm_of: Any) -> int:
    for _ in range(50):
        i = rng.randrange(n)
        if i not in exclude and not _contains_any(norm_of(i), answers):
            return i
    return next(i for i in range(n) if i not in exclude)


def in_memory_bm25(corpus: Sequence[Passage]) -> Any:
    """An in-memory BM25 retriever over the corpus (the miner of BM25 negatives)."""
    from ambiqa.retrieval.bm25 import BM25Retriever  # numpy and bm25s: only when mining

    return BM25Retriever.in_memory(corpus)


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
    if data.scores:
        atomic_write(out_dir / "scores.jsonl", lambda fh: fh.writelines(
            json.dumps(t) + "\n" for t in data.scores))


def load_training_data(out_dir: Path) -> TrainingData:
    """The training data saved under ``out_dir``, every file and line through the guarded
    JSON reader (:mod:`ambiqa.jsonio`): a damaged file is one DataError, not a traceback."""
    out_dir = Path(out_dir)
    hint = "delete the directory to rebuild the triples"

    def whole(name: str) -> Any:
        return read_json(out_dir / name, max_bytes=None, hint=hint)

    def lines(name: str) -> list[Any]:
        path = out_dir / name
        try:
            raw = path.read_bytes().split(b"\n")
        except OSError as exc:
            raise DataError(f"cannot read {path}: {exc.strerror or exc}", hint=hint) from exc
        return [loads(line, source=f"{path}, line {n}", hint=hint)
                for n, line in enumerate(raw, start=1) if line.strip()]

    queries = whole("queries.json")
    collection = lines("collection.jsonl")
    triples = lines("triples.jsonl")
    stats = whole("triples_stats.json")
    validation = whole("validation.json") if (out_dir / "validation.json").is_file() else []
    scores: list[list[float]] = (lines("scores.jsonl")
                                 if (out_dir / "scores.jsonl").is_file() else [])
    data = TrainingData(queries, collection, triples, stats, validation, scores)
    width = len(triples[0]) if triples else 3
    for t in triples:
        if len(t) < 3 or len(t) != width or not 0 <= t[0] < len(queries) or not all(
                0 <= x < len(collection) for x in t[1:]):
            raise DataError(f"training example {t} points outside the data under {out_dir}")
    if scores and (len(scores) != len(triples)
                   or any(len(s) != width - 1 for s in scores)):
        raise DataError(f"scores.jsonl under {out_dir} does not match the training examples",
                        hint="delete the directory to rebuild the training data")
    return data
