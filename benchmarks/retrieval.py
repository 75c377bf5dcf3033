"""Retrieval benchmark (issues 4, 15): BM25, dense MiniLM and ColBERT (the ``wiki`` index;
earlier checkpoints' indexes when they exist) on the same questions over the shared
12,843-passage corpus.

Per retriever (each measured in its own subprocess, so peak memory is that retriever's):

* quality at k = 5 and 20 on
  - ASQA dev (200): gold-passage recall (a question counts when one of its gold passages --
    qa-pair contexts and annotators' knowledge, matched to the corpus by title and text -- is
    retrieved; questions with no gold passage in the corpus are skipped and counted), answer
    recall (any short answer in the passages; the fallback that needs no gold passage) and
    MRecall@5 (Min et al. 2021: all n answers found if n <= 5, else at least 5);
  - NQ oracle (1,000): the gold passage retrieved;
  - HotpotQA dev (150): share of the two supporting paragraphs retrieved;
* index build time (ColBERT: the manifest's; BM25 and dense: built here when missing) and size;
* single-query latency (median, p95 over 100 uncached NQ questions), batch throughput
  (``batch_search`` over 200 questions), peak RSS of the measuring process.

Diva's retrieval diversification vs plain retrieval on MRecall@5 for the first ``--diva N``
ASQA dev questions: pseudo-interpretations from the embedded 0.5B LM (InferInterpretations,
two short calls per question, cached by DSPy's cache), union of each interpretation's top-5,
pruned to 5 by mean SentenceBERT cosine to all interpretations (Diva eq. 4-5); also the same
with the gold disambiguated questions as an oracle upper bound.

Everything is resumable: each retriever's result is a part file keyed by its fingerprint,
search results go through the on-disk retrieval cache, and the LM's answers through DSPy's
cache, so a rerun only measures what changed. Output: ``benchmarks/results/retrieval.json``
and ``retrieval.md`` (a Markdown table for BENCHMARKS.md).

    python -m benchmarks.retrieval --force --diva 0     # bm25, dense, colbert back to back
    python -m benchmarks.retrieval --retrievers bm25,dense --diva 0
    python -m benchmarks.retrieval --index colbert=colbert:wiki-trained
    python -m benchmarks.retrieval --query-lengths      # share of queries cut per query_maxlen
    python -m benchmarks.retrieval --sweep colbert:wiki # PLAID settings on training questions

Run with ``AMBIQA_CACHE`` pointing at the cache that holds the indexes (default here:
``.ambiqa-cache`` in the checkout).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("AMBIQA_CACHE", str(ROOT / ".ambiqa-cache"))

RESULTS = ROOT / "benchmarks" / "results"
PARTS = RESULTS / "retrieval-parts"
INDEXES = {
    "bm25": "bm25:wiki-bm25",
    "dense": "dense:wiki-dense",
    "colbert": "colbert:wiki",
}
# Earlier rows (other checkpoints / build settings); measured when their index exists, e.g.
# --retrievers colbert-identity-fast --index colbert-identity-fast=colbert:wiki-fast
OPTIONAL_INDEXES = {
    "colbert-identity": "colbert:wiki-identity",
    "colbert-identity-fast": "colbert:wiki-fast",
    "colbert-trained-384": "colbert:wiki-trained",
}
LABELS = {
    "colbert": "ColBERT, the default checkpoint in the cache, ambiqa's build and search settings",
    "bm25": "BM25 (bm25s, title + text, stopwords)",
    "dense": "dense MiniLM (all-MiniLM-L6-v2, exact inner product)",
    "colbert-identity": "ColBERT, identity MiniLM checkpoint (untrained), colbert-ai's "
                        "k-means settings",
    "colbert-identity-fast": "ColBERT, identity checkpoint, ambiqa's build settings (25% "
                             "k-means sample, capped centroids)",
    "colbert-trained-384": "ColBERT, trained MiniLM checkpoint, ambiqa's build settings",
}
KS = (5, 20)
LATENCY_N = 100
BATCH_N = 200


def data_root() -> Path:
    from ambiqa.data import default_data_root

    root = default_data_root()
    if root is None:
        sys.exit("shared data not found: set AMBIQA_DATA")
    return root


# ---- evaluation sets -----------------------------------------------------------------------
def eval_sets() -> dict[str, list[dict[str, Any]]]:
    """The questions with gold passage ids (corpus ids) and answers."""
    from ambiqa.data import load_asqa, load_corpus, load_hotpotqa, load_nq

    root = data_root()
    corpus = load_corpus(root / "corpus" / "wiki_passages.jsonl")
    by_key = {(p.title, p.text): p.id for p in corpus}

    def ids(passages: list[dict[str, str]]) -> list[str]:
        return sorted({by_key[(p["title"], p["text"])] for p in passages
                       if (p["title"], p["text"]) in by_key})

    asqa = [{"question": ex.question, "gold": ids(ex.gold_passages),
             "answers": list(ex.answers),
             "answer_sets": [list(qa["short_answers"]) for qa in ex.qa_pairs],
             "disambiguated": [qa["question"] for qa in ex.qa_pairs]}
            for ex in load_asqa(root / "asqa" / "dev.json")]
    nq = [{"question": ex.question, "gold": ids(ex.gold_passages), "answers": list(ex.answers)}
          for ex in load_nq(root / "nq" / "oracle.jsonl")]
    hotpot = [{"question": ex.question,
               "gold": ids([{"title": c["title"], "text": c["text"]} for c in ex.contexts
                            if c.get("is_supporting")]),
               "answers": list(ex.answers)}
              for ex in load_hotpotqa(root / "hotpotqa" / "dev.jsonl")]
    return {"asqa": asqa, "nq": nq, "hotpotqa": hotpot}


def score(name: str, items: list[dict[str, Any]], hits: list[list[Any]]) -> dict[str, Any]:
    from ambiqa.evaluation.metrics import answer_recall_at_k, mrecall_at_k, recall_at_k

    out: dict[str, Any] = {"questions": len(items)}
    with_gold = [(it, h) for it, h in zip(items, hits, strict=True) if it["gold"]]
    out["questions_with_gold_in_corpus"] = len(with_gold)
    for k in KS:
        if name == "hotpotqa":
            vals = [recall_at_k([p.id for p in h], it["gold"], k) for it, h in with_gold]
        else:  # any gold passage retrieved
            vals = [float(bool(set(it["gold"]) & {p.id for p in h[:k]})) for it, h in with_gold]
        out[f"recall@{k}"] = round(statistics.fmean(vals), 4) if vals else None
        ans = [answer_recall_at_k([p.text for p in h], it["answers"], k)
               for it, h in zip(items, hits, strict=True) if it["answers"]]
        out[f"answer_recall@{k}"] = round(statistics.fmean(ans), 4) if ans else None
    if name == "asqa":
        mr = [mrecall_at_k([p.text for p in h], it["answer_sets"], 5)
              for it, h in zip(items, hits, strict=True)]
        out["mrecall@5"] = round(statistics.fmean(mr), 4)
    return out


# ---- one retriever (runs in a subprocess) --------------------------------------------------
def open_or_build(key: str, spec: str) -> tuple[Any, dict[str, Any]]:
    """Open the index ``spec``; BM25 and dense indexes are built here when missing."""
    from ambiqa.errors import RetrievalIndexError
    from ambiqa.retrieval.factory import index_root, open_retriever

    kind, _, name = spec.partition(":")
    build: dict[str, Any] = {}
    try:
        retriever = open_retriever(spec)
    except RetrievalIndexError:
        if kind not in ("bm25", "dense"):
            raise SystemExit(f"{key}: index {spec} not found; build it with `ambiqa index` "
                             "(see BENCHMARKS.md)") from None
        from ambiqa.data import load_corpus

        corpus = load_corpus(data_root() / "corpus" / "wiki_passages.jsonl")
        t0 = time.perf_counter()
        if kind == "bm25":
            from ambiqa.retrieval.bm25 import BM25Retriever

            BM25Retriever.build(corpus, index_root() / name)
        else:
            from ambiqa.retrieval.dense import DenseRetriever

            DenseRetriever.build(corpus, index_root() / name)
        build["build_seconds"] = round(time.perf_counter() - t0, 1)
        build["build_measured_here"] = True
        meta = index_root() / name / "manifest.json"
        manifest = json.loads(meta.read_text())
        manifest["build_seconds"] = build["build_seconds"]
        from ambiqa.fsutil import atomic_write_json

        atomic_write_json(meta, manifest)
        retriever = open_retriever(spec)
    index_dir = index_root() / name
    if kind == "bm25" and not build:
        # an index built elsewhere records no build time: time a rebuild in a scratch dir
        import tempfile

        from ambiqa.data import load_corpus
        from ambiqa.retrieval.bm25 import BM25Retriever

        corpus = load_corpus(data_root() / "corpus" / "wiki_passages.jsonl")
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            BM25Retriever.build(corpus, Path(tmp) / "bm25")
            build["build_seconds"] = round(time.perf_counter() - t0, 1)
    manifest_file = index_dir / ("ambiqa_manifest.json" if kind == "colbert" else "manifest.json")
    manifest = json.loads(manifest_file.read_text())
    build.setdefault("build_seconds", manifest.get("build_seconds"))
    build["size_mib"] = round(sum(f.stat().st_size for f in index_dir.rglob("*")
                                  if f.is_file()) / 2**20, 1)
    if kind == "colbert":
        build.update(checkpoint=manifest["checkpoint"]["id"], dim=manifest["dim"],
                     nbits=manifest["nbits"], centroids=manifest.get("centroids"),
                     kmeans_share=manifest.get("kmeans_share", 1.0),
                     stage_seconds=manifest.get("stage_seconds"))
    return retriever, build


def measure(key: str, spec: str) -> dict[str, Any]:
    from ambiqa.retrieval.cache import CachedRetriever, RetrievalCache

    t0 = time.perf_counter()
    retriever, build = open_or_build(key, spec)
    sets = eval_sets()
    retriever.search("warm up the model and the index", 5)
    load_s = time.perf_counter() - t0
    cached = CachedRetriever(retriever, RetrievalCache())
    quality = {}
    for name, items in sets.items():
        hits = cached.batch_search([it["question"] for it in items], max(KS))
        quality[name] = score(name, items, hits)
    queries = [it["question"] for it in sets["nq"]]
    lat = []
    for q in queries[:LATENCY_N]:
        t = time.perf_counter()
        retriever.search(q, 5)
        lat.append((time.perf_counter() - t) * 1000)
    lat.sort()
    t = time.perf_counter()
    retriever.batch_search(queries[LATENCY_N:LATENCY_N + BATCH_N], 5)
    batch_s = time.perf_counter() - t
    return {
        "key": key, "index": spec, "fingerprint": retriever.fingerprint, "label": LABELS.get(key),
        **build, "load_and_warm_s": round(load_s, 1),
        "latency_ms": {"median": round(statistics.median(lat), 2),
                       "p95": round(lat[int(0.95 * (len(lat) - 1))], 2), "n": len(lat)},
        "batch_qps": round(BATCH_N / batch_s, 1),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "quality": quality, "load_avg_1m": round(os.getloadavg()[0], 2),
        "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


# ---- query lengths (no model run) ----------------------------------------------------------
QUERY_LENGTH_LIMITS = (32, 48, 64)


def query_length_sets() -> dict[str, list[str]]:
    """Questions per data set, plus the query rewrites ambiqa's programs send to retrieval."""
    from ambiqa.data import load_asqa, load_dataset, load_hotpotqa, load_nq

    root = data_root()
    asqa_dev = load_asqa(root / "asqa" / "dev.json")
    sets = {
        "ASQA dev (ambiguous questions)": [ex.question for ex in asqa_dev],
        "ASQA dev disambiguated questions (stand-in for Diva/ToC rewrites)":
            [qa["question"] for ex in asqa_dev for qa in ex.qa_pairs],
        "NQ oracle": [ex.question for ex in load_nq(root / "nq" / "oracle.jsonl")],
        "HotpotQA dev": [ex.question for ex in load_hotpotqa(root / "hotpotqa" / "dev.jsonl")],
        "ASQA train + disambiguations (training)":
            [q for ex in load_dataset("asqa:train") for q in
             [ex.question, *(qa["question"] for qa in ex.qa_pairs)]],
        "HotpotQA train (training)": [ex.question for ex in load_dataset("hotpotqa:train")],
        "WebQ train (training)": [ex.question for ex in load_dataset("webq:train")],
    }
    store = PARTS / "diva-interpretations-embedded_qwen2.5-coder-0.5b.json"
    if store.is_file():
        known = json.loads(store.read_text())
        sets["Diva pseudo-interpretations (0.5B, stored, ASQA dev 20)"] = [
            q for v in known.values() for q in v.get("interpretations", [])]
    return sets


def query_lengths() -> dict[str, Any]:
    """Share of queries colbert-ai would cut at each query_maxlen, with the checkpoint's
    tokenizer (MiniLM's BERT word pieces; 3 of query_maxlen go to [CLS], [Q] and [SEP])."""
    from transformers import AutoTokenizer

    from ambiqa.retrieval.checkpoint import identity_checkpoint
    from ambiqa.retrieval.colbert import QUERY_HARD_MAX, query_token_count

    tok = AutoTokenizer.from_pretrained(str(identity_checkpoint()))
    rows = {}
    for name, qs in query_length_sets().items():
        n = sorted(query_token_count(tok, q) for q in qs)
        rows[name] = {"queries": len(n), "max_tokens": n[-1],
                      "p95_tokens": n[int(0.95 * (len(n) - 1))],
                      "cut_share": {str(lim): round(sum(x > lim - 3 for x in n) / len(n), 4)
                                    for lim in (*QUERY_LENGTH_LIMITS, QUERY_HARD_MAX)}}
    return {"hard_max": QUERY_HARD_MAX, "sets": rows}


def query_lengths_markdown(res: dict[str, Any]) -> str:
    lims = [*map(str, QUERY_LENGTH_LIMITS)]
    lines = ["| queries | n | max / p95 word pieces | cut at query_maxlen "
             + " / ".join(lims) + " (before: 32) | cut after (fit, up to "
             f"{res['hard_max']}) |", "|---|---|---|---|---|"]
    for name, r in res["sets"].items():
        cut = r["cut_share"]
        lines.append(f"| {name} | {r['queries']} | {r['max_tokens']} / {r['p95_tokens']} | "
                     + " / ".join(f"{100 * cut[k]:.1f}%" for k in lims)
                     + f" | {100 * cut[str(res['hard_max'])]:.1f}% |")
    return "\n".join(lines) + "\n"


# ---- what fitting long queries buys (same index, same questions) ----------------------------
def query_fit_ablation(spec: str) -> dict[str, Any]:
    """HotpotQA dev recall with queries cut at the checkpoint's query_maxlen (colbert-ai's
    behaviour) against queries grown to fit (ambiqa's), on one ColBERT index."""
    from ambiqa.retrieval.colbert import QUERY_HARD_MAX, install_query_fit
    from ambiqa.retrieval.factory import open_retriever

    retriever = open_retriever(spec)
    searcher = retriever._ensure_searcher()
    qt = searcher.checkpoint.query_tokenizer
    min_len = int(retriever.manifest["query_maxlen"])
    items = eval_sets()["hotpotqa"]
    out: dict[str, Any] = {"index": spec, "fingerprint": retriever.fingerprint,
                           "query_maxlen": min_len}
    for label, max_len in (("cut at query_maxlen", min_len), ("fit", QUERY_HARD_MAX)):
        install_query_fit(qt, min_len, max_len)
        hits = [retriever.search(it["question"], max(KS)) for it in items]
        out[label] = score("hotpotqa", items, hits)
    install_query_fit(qt, min_len)
    return out


# ---- PLAID search settings, chosen on training questions ------------------------------------
SWEEP_K5 = [{"ncells": c, "centroid_score_threshold": t, "ndocs": d}
            for c in (1, 2, 4) for t in (0.4, 0.5) for d in (128, 256, 1024)]
SWEEP_K20 = [{"ncells": c, "centroid_score_threshold": t, "ndocs": d}
             for c in (2, 4) for t in (0.4, 0.45) for d in (256, 1024)]


def training_questions(n: int) -> list[dict[str, Any]]:
    """ASQA *train* questions and their disambiguations whose answer-bearing gold passages are
    in the corpus (the same positives ColBERT training uses); never evaluation questions."""
    from ambiqa.data import load_corpus, load_dataset
    from ambiqa.retrieval.triples import _query_positives

    corpus = load_corpus(data_root() / "corpus" / "wiki_passages.jsonl")
    by_key = {(p.title, p.text): p.id for p in corpus}
    out = []
    for ex in load_dataset("asqa:train"):
        for q, _, pos in _query_positives("asqa", ex):
            gold = sorted({by_key[k] for k in pos if k in by_key})
            if gold:
                out.append({"question": q, "gold": gold})
    return out[:n]


def sweep(spec: str, n: int) -> dict[str, Any]:
    """Recall and single-query latency of each PLAID setting on ``n`` training questions."""
    from ambiqa.retrieval.factory import open_retriever

    retriever = open_retriever(spec)
    items = training_questions(n)
    retriever.search("warm up the model and the index", 5)
    # encode each question once; every setting then ranks the same query vectors
    searcher = retriever._ensure_searcher()
    qvecs = []
    t = time.perf_counter()
    for it in items:
        qvecs.append(searcher.checkpoint.queryFromText([it["question"]], to_cpu=True))
    encode_ms = (time.perf_counter() - t) * 1000 / len(items)
    rows = []
    for k, grid in ((5, SWEEP_K5), (20, SWEEP_K20)):
        for params in grid:
            retriever.search_settings = ((10**9, params),)
            lat, hits = [], []
            for q in qvecs:
                t = time.perf_counter()
                hits.append(retriever._rank(searcher, q, k))
                lat.append((time.perf_counter() - t) * 1000)
            rec = statistics.fmean(float(bool(set(it["gold"]) & {p.id for p in h[:k]}))
                                   for it, h in zip(items, hits, strict=True))
            rows.append({"k": k, **params, "recall": round(rec, 4),
                         "rank_ms_median": round(statistics.median(lat), 2),
                         "rank_ms_p95": round(sorted(lat)[int(0.95 * (len(lat) - 1))], 2)})
            print(rows[-1], flush=True)
    return {"index": spec, "fingerprint": retriever.fingerprint, "questions": len(items),
            "query_encode_ms_mean": round(encode_ms, 2), "rows": rows,
            "load_avg_1m": round(os.getloadavg()[0], 2),
            "measured_at": time.strftime("%Y-%m-%d %H:%M:%S")}


def sweep_markdown(res: dict[str, Any]) -> str:
    lines = [f"PLAID settings on {res['questions']} ASQA **train** questions (answer-bearing "
             f"gold passages in the corpus), {res['index']}; rank time excludes query "
             f"encoding ({res['query_encode_ms_mean']} ms mean), load {res['load_avg_1m']}:",
             "", "| k | ncells | centroid_score_threshold | ndocs | recall@k | rank ms median "
             "/ p95 |", "|---|---|---|---|---|---|"]
    for r in res["rows"]:
        lines.append(f"| {r['k']} | {r['ncells']} | {r['centroid_score_threshold']} | "
                     f"{r['ndocs']} | {r['recall']:.3f} | {r['rank_ms_median']} / "
                     f"{r['rank_ms_p95']} |")
    return "\n".join(lines) + "\n"


# ---- Diva diversification ------------------------------------------------------------------
def diva_part(spec: str, n: int, lm_spec: str) -> dict[str, Any]:
    import dspy

    from ambiqa.evaluation.metrics import mrecall_at_k
    from ambiqa.lm import make_lm
    from ambiqa.programs.diva import Diva
    from ambiqa.retrieval.cache import CachedRetriever, RetrievalCache
    from ambiqa.retrieval.factory import open_retriever

    retriever = CachedRetriever(open_retriever(spec), RetrievalCache())
    items = eval_sets()["asqa"][:n]
    diva = Diva(retriever=retriever, k_per_query=5, top_k=5)
    store = PARTS / f"diva-interpretations-{lm_spec.replace(':', '_')}.json"
    known = json.loads(store.read_text()) if store.is_file() else {}
    lm = None
    rows = []
    for it in items:
        q = it["question"]
        if q not in known:
            lm = lm or make_lm(lm_spec)
            with dspy.context(lm=lm):
                known[q] = diva.infer(question=q)
            from ambiqa.fsutil import atomic_write_json

            atomic_write_json(store, known)
        interps = known[q]["interpretations"]
        plain = retriever.search(q, 5)
        diversified = diva.prune(interps, diva.diversify(q, interps))
        oracle_q = it["disambiguated"] or [q]
        oracle = diva.prune(oracle_q, diva.diversify(q, oracle_q))
        rows.append({
            "question": q, "interpretations": interps,
            "ambiguity_type": known[q].get("ambiguity_type"),
            "plain": mrecall_at_k([p.text for p in plain], it["answer_sets"], 5),
            "diva": mrecall_at_k([p.text for p in diversified], it["answer_sets"], 5),
            "oracle": mrecall_at_k([p.text for p in oracle], it["answer_sets"], 5),
        })
    mean = {k: round(statistics.fmean(r[k] for r in rows), 4) for k in ("plain", "diva", "oracle")}
    return {"index": spec, "fingerprint": retriever.fingerprint, "lm": lm_spec, "n": len(rows),
            "mrecall@5": mean,
            "mean_interpretations": round(statistics.fmean(len(r["interpretations"])
                                                           for r in rows), 2),
            "rows": rows}


# ---- orchestration -------------------------------------------------------------------------
def _fingerprint_of(spec: str) -> str | None:
    from ambiqa.retrieval.factory import open_retriever

    try:
        return open_retriever(spec).fingerprint
    except Exception:
        return None


def run_part(key: str, spec: str, force: bool) -> dict[str, Any] | None:
    part = PARTS / f"{key}.json"
    if part.is_file() and not force:
        old = json.loads(part.read_text())
        if old.get("index") == spec and old.get("fingerprint") == _fingerprint_of(spec):
            print(f"{key}: reusing {part}")
            return old
    print(f"{key}: measuring {spec} ...", flush=True)
    proc = subprocess.run([sys.executable, "-m", "benchmarks.retrieval", "--worker", key,
                           "--index", f"{key}={spec}"], check=False, cwd=ROOT)
    if proc.returncode != 0 or not part.is_file():
        print(f"{key}: failed (exit {proc.returncode})")
        return None
    return json.loads(part.read_text())


def fmt(x: Any, nd: int = 3) -> str:
    return "—" if x is None else (f"{x:.{nd}f}" if isinstance(x, float) else str(x))


def markdown(parts: dict[str, dict[str, Any]], diva: dict[str, Any] | None) -> str:
    lines = [
        "| retriever | ASQA R@5 / @20 | ASQA ans-R@5 / @20 | ASQA MRecall@5 | NQ R@5 / @20 | "
        "HotpotQA R@5 / @20 | build | size | latency median / p95 | batch q/s | peak RSS | "
        "load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, r in parts.items():
        q = r["quality"]
        a, n, h = q["asqa"], q["nq"], q["hotpotqa"]
        build = r.get("build_seconds")
        extra = f" ({r['checkpoint']}, dim {r['dim']})" if r.get("checkpoint") else ""
        lines.append(
            f"| {r.get('label') or key}{extra} | {fmt(a['recall@5'])} / {fmt(a['recall@20'])} | "
            f"{fmt(a['answer_recall@5'])} / {fmt(a['answer_recall@20'])} | "
            f"{fmt(a['mrecall@5'])} | {fmt(n['recall@5'])} / {fmt(n['recall@20'])} | "
            f"{fmt(h['recall@5'])} / {fmt(h['recall@20'])} | "
            f"{fmt(build, 0)} s | {r['size_mib']} MiB | "
            f"{r['latency_ms']['median']} / {r['latency_ms']['p95']} ms | {r['batch_qps']} | "
            f"{r['peak_rss_mib']:.0f} MiB | {r.get('load_avg_1m', '—')} |")
    any_part = next(iter(parts.values()), None)
    if any_part:
        a, n, h = (any_part["quality"][s] for s in ("asqa", "nq", "hotpotqa"))
        lines.append("")
        lines.append(f"Questions: ASQA dev {a['questions']} ({a['questions_with_gold_in_corpus']}"
                     f" with a gold passage in the corpus; R@k counts those, answer recall and "
                     f"MRecall all), NQ oracle {n['questions']} "
                     f"({n['questions_with_gold_in_corpus']} gold in corpus), HotpotQA dev "
                     f"{h['questions']} (R@k = share of the 2 supporting paragraphs).")
    for key, r in parts.items():
        if r.get("stage_seconds"):
            st = r["stage_seconds"]
            lines.append(f"- {key}: {r.get('centroids') or 'colbert-ai default'} centroids, "
                         f"k-means sample share {r.get('kmeans_share')}; stages (s): "
                         + ", ".join(f"{k} {v:.0f}" for k, v in st.items()))
    if diva:
        m = diva["mrecall@5"]
        lines += ["", f"Diva retrieval diversification, ASQA dev first {diva['n']} questions, "
                      f"{diva['index']}, interpretations from {diva['lm']} "
                      f"(mean {diva['mean_interpretations']} per question):", "",
                  "| retrieval | MRecall@5 |", "|---|---|",
                  f"| plain top-5 for the ambiguous question | {fmt(m['plain'])} |",
                  f"| Diva: union of top-5 per pseudo-interpretation, pruned to 5 | "
                  f"{fmt(m['diva'])} |",
                  f"| oracle: same with the gold disambiguated questions | {fmt(m['oracle'])} |"]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--retrievers", default=",".join(INDEXES),
                    help=f"comma-separated keys (default {','.join(INDEXES)}; also "
                         f"{', '.join(OPTIONAL_INDEXES)} when those indexes exist)")
    ap.add_argument("--index", action="append", default=[],
                    help="KEY=kind:name, e.g. colbert=colbert:wiki-trained")
    ap.add_argument("--diva", type=int, default=20, help="ASQA dev questions (0: skip)")
    ap.add_argument("--diva-index", default=None,
                    help="retriever for the Diva comparison (default: the colbert row's)")
    ap.add_argument("--lm", default="embedded:qwen2.5-coder-0.5b")
    ap.add_argument("--force", action="store_true", help="remeasure even if a part exists")
    ap.add_argument("--query-lengths", action="store_true",
                    help="only measure how many queries each query_maxlen would cut "
                         "(benchmarks/results/query_lengths.{json,md}; no model run)")
    ap.add_argument("--sweep", default=None, metavar="SPEC",
                    help="only measure PLAID search settings for a ColBERT index on training "
                         "questions (benchmarks/results/colbert_search_settings.{json,md})")
    ap.add_argument("--sweep-n", type=int, default=200)
    ap.add_argument("--query-fit-ablation", default=None, metavar="SPEC",
                    help="only measure HotpotQA dev recall with long queries cut vs fitted on "
                         "a ColBERT index (benchmarks/results/query_fit_ablation.json)")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--diva-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    indexes = {**INDEXES, **OPTIONAL_INDEXES}
    for item in args.index:
        key, _, spec = item.partition("=")
        indexes[key] = spec
    PARTS.mkdir(parents=True, exist_ok=True)
    from ambiqa.fsutil import atomic_write_json, atomic_write_text

    if args.query_lengths:
        res = query_lengths()
        atomic_write_json(RESULTS / "query_lengths.json", res)
        md = query_lengths_markdown(res)
        atomic_write_text(RESULTS / "query_lengths.md", md)
        print(md)
        return 0
    if args.query_fit_ablation:
        res = query_fit_ablation(args.query_fit_ablation)
        atomic_write_json(RESULTS / "query_fit_ablation.json", res)
        print(json.dumps(res, indent=1))
        return 0
    if args.sweep:
        res = sweep(args.sweep, args.sweep_n)
        atomic_write_json(RESULTS / "colbert_search_settings.json", res)
        md = sweep_markdown(res)
        atomic_write_text(RESULTS / "colbert_search_settings.md", md)
        print(md)
        return 0
    if args.worker:
        atomic_write_json(PARTS / f"{args.worker}.json", measure(args.worker,
                                                                 indexes[args.worker]))
        return 0
    if args.diva_worker:
        atomic_write_json(PARTS / "diva.json", diva_part(args.diva_index, args.diva, args.lm))
        return 0

    parts = {}
    for key in [k.strip() for k in args.retrievers.split(",") if k.strip()]:
        found = run_part(key, indexes[key], args.force)
        if found:
            parts[key] = found
    diva = None
    if args.diva:
        spec = args.diva_index or indexes["colbert"]
        part = PARTS / "diva.json"
        old = json.loads(part.read_text()) if part.is_file() else {}
        if (args.force or old.get("index") != spec or old.get("n") != args.diva
                or old.get("fingerprint") != _fingerprint_of(spec)):
            subprocess.run([sys.executable, "-m", "benchmarks.retrieval", "--diva-worker",
                            "--diva-index", spec, "--diva", str(args.diva), "--lm", args.lm],
                           check=False, cwd=ROOT)
        diva = json.loads(part.read_text()) if part.is_file() else None
    out = {"retrievers": parts, "diva": diva, "machine": {"cpus": os.cpu_count()}}
    atomic_write_json(RESULTS / "retrieval.json", out)
    md = markdown(parts, diva)
    atomic_write_text(RESULTS / "retrieval.md", md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
