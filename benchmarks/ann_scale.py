"""Dense retrieval at scale: ambiqa's HNSW index against the exact scan, at 100k and 1M vectors.

    python -m benchmarks.ann_scale                       # 100k and 1M (1M: ~10 min, 2.5 GB)
    python -m benchmarks.ann_scale --sizes 100000 --queries 200

For each size it builds :class:`ambiqa.retrieval.ann.HNSWIndex` (the component the dense
retriever uses above ``ANN_MIN_PASSAGES``) over synthetic vectors and reports build seconds,
memory (the float32 vectors, the graph's extra bytes, the process's peak RSS), milliseconds
per single query (one query at a time, as a program asks) for the exact numpy scan and for
HNSW at several ``efSearch`` values, and recall@10 of HNSW against the exact top 10.

Synthetic data, 384-d and unit length like all-MiniLM-L6-v2's: points drawn around 1,000
random cluster centres (noise of the same scale as the centre, so neighbourhoods overlap)
and queries drawn fresh from the same mixture, not copied from the indexed points. Uniform
random vectors would be the wrong test: in 384 dimensions all their distances concentrate,
no index (and no real embedding model) behaves that way. Real embeddings are clustered by
topic, which is what this mixture imitates; it is still not a real corpus, so read the recall
as the index's behaviour on clustered data, not as a promise about every corpus.

Each size's result is saved as soon as it is measured (``benchmarks/results/ann/ann_scale.json``
and ``.md``); a rerun skips sizes already measured with the same settings (``--force`` redoes).
Threads: faiss and numpy use ``--threads`` (default 2, the machine's cores).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

OUT_DIR = Path(__file__).resolve().parent / "results" / "ann"
DIM = 384
CLUSTERS = 1000
K = 10
EF_SEARCH_SWEEP = (16, 32, 64, 128, 256)
SPECTRUM = OUT_DIR / "minilm_spectrum.json"
DATA_KINDS = ("clusters", "spectrum", "real")


def _rss_peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def synthetic(n: int, seed: int, centres: np.ndarray, chunk: int = 100_000) -> np.ndarray:
    """``n`` unit vectors around ``centres`` (generated in chunks to bound temporary memory)."""
    rng = np.random.default_rng(seed)
    out = np.empty((n, centres.shape[1]), dtype=np.float32)
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        x = centres[rng.integers(0, len(centres), m)]
        x += rng.standard_normal((m, centres.shape[1]), dtype=np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        out[start:start + m] = x
    return out


def spectrum_sampler(seed: int) -> Any:
    """``sample(n, seed)``: unit vectors from a Gaussian whose covariance has the eigenvalues
    of real all-MiniLM-L6-v2 embeddings of the shared corpus (``minilm_spectrum.json``) and
    whose mean has their mean's norm. Nearest neighbours are rotation-invariant, so a random
    orthonormal basis stands in for the real eigenvectors."""
    spec = json.loads(SPECTRUM.read_text())
    scale = np.sqrt(np.maximum(np.asarray(spec["eigenvalues"], dtype=np.float64), 0.0))
    rng = np.random.default_rng(seed)
    basis, _ = np.linalg.qr(rng.standard_normal((DIM, DIM)))
    mean = rng.standard_normal(DIM)
    mean *= spec["mean_norm"] / np.linalg.norm(mean)
    transform = (basis * scale[None, :]).astype(np.float32)  # column j scaled by sqrt(eig j)

    def sample(n: int, sample_seed: int, chunk: int = 100_000) -> np.ndarray:
        g = np.random.default_rng(sample_seed)
        out = np.empty((n, DIM), dtype=np.float32)
        for start in range(0, n, chunk):
            m = min(chunk, n - start)
            x = g.standard_normal((m, DIM), dtype=np.float32) @ transform.T + mean
            x /= np.linalg.norm(x, axis=1, keepdims=True)
            out[start:start + m] = x
        return out

    return sample


def real_vectors(n_queries: int) -> tuple[np.ndarray, np.ndarray]:
    """The real thing at the size we have it: the ``dense:wiki-dense`` index's MiniLM passage
    vectors (12.8k) and ASQA questions (train + dev) encoded by the same encoder."""
    from ambiqa.data import load_dataset
    from ambiqa.paths import index_root
    from ambiqa.retrieval.encoder import get_encoder

    path = index_root() / "wiki-dense" / "embeddings.npy"
    if not path.is_file():
        raise SystemExit(f"--data real needs {path}: ambiqa index CORPUS --name wiki-dense "
                         "--kind dense")
    vecs = np.load(path, allow_pickle=False).astype(np.float32)
    questions = [ex.question for split in ("asqa:dev", "asqa:train")
                 for ex in load_dataset(split)][:n_queries]
    queries = np.asarray(get_encoder().encode(questions), dtype=np.float32)
    return vecs, queries


def exact_top_k(queries: np.ndarray, vecs: np.ndarray, k: int, chunk: int = 100_000
                ) -> np.ndarray:
    """The exact top ``k`` row ids per query (chunked so the score matrix stays small)."""
    best_s = np.full((len(queries), k), -np.inf, dtype=np.float32)
    best_i = np.zeros((len(queries), k), dtype=np.int64)
    for start in range(0, len(vecs), chunk):
        s = queries @ vecs[start:start + chunk].T
        kk = min(k, s.shape[1])
        part = np.argpartition(-s, kk - 1, axis=1)[:, :kk]
        cand_s = np.concatenate([best_s, np.take_along_axis(s, part, 1)], axis=1)
        cand_i = np.concatenate([best_i, part + start], axis=1)
        order = np.argsort(-cand_s, axis=1)[:, :k]
        best_s = np.take_along_axis(cand_s, order, 1)
        best_i = np.take_along_axis(cand_i, order, 1)
    return best_i


def exact_ms(queries: np.ndarray, vecs: np.ndarray, k: int) -> float:
    """Milliseconds per single query of the exact numpy scan the dense retriever runs."""
    t0 = time.perf_counter()
    for q in queries:
        s = vecs @ q
        idx = np.argpartition(-s, k - 1)[:k]
        idx[np.argsort(-s[idx])]
    return (time.perf_counter() - t0) / len(queries) * 1000


def recall_at_k(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(f[f >= 0].tolist()) & set(t.tolist())) / len(t)
                          for f, t in zip(found, truth, strict=True)]))


def measure(n: int, n_queries: int, seed: int = 0, data: str = "clusters") -> dict[str, Any]:
    from ambiqa.retrieval.ann import EF_CONSTRUCTION, EF_SEARCH, HNSW_M, HNSWIndex

    t0 = time.perf_counter()
    if data == "real":
        vecs, queries = real_vectors(n_queries)
        n, n_queries = len(vecs), len(queries)
    elif data == "spectrum":
        sample = spectrum_sampler(seed)
        vecs, queries = sample(n, seed + 1), sample(n_queries, seed + 2)
    else:
        centres = np.random.default_rng(seed).standard_normal((CLUSTERS, DIM),
                                                              dtype=np.float32)
        vecs = synthetic(n, seed + 1, centres)
        queries = synthetic(n_queries, seed + 2, centres)
    gen_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    truth = exact_top_k(queries, vecs, K)
    truth_s = time.perf_counter() - t0
    timed = queries[:min(100, n_queries)]
    row: dict[str, Any] = {
        "data": data, "n": n, "dim": DIM, "queries": n_queries, "k": K,
        "generate_s": round(gen_s, 1), "ground_truth_s": round(truth_s, 1),
        "exact": {"ms_per_query": round(exact_ms(timed, vecs, K), 3), "recall_at_10": 1.0},
    }
    t0 = time.perf_counter()
    ann = HNSWIndex.build(vecs, m=HNSW_M, ef_construction=EF_CONSTRUCTION, ef_search=EF_SEARCH)
    build_s = time.perf_counter() - t0
    graph_bytes = int(ann.index.hnsw.neighbors.size()) * 4 + int(ann.index.hnsw.levels.size()) * 4
    row["hnsw"] = {"m": HNSW_M, "ef_construction": EF_CONSTRUCTION, "default_ef_search": EF_SEARCH,
                   "build_s": round(build_s, 1), "sweep": []}
    row["memory"] = {"vectors_mb": round(vecs.nbytes / 2**20, 1),
                     "graph_mb": round(graph_bytes / 2**20, 1)}
    for ef in sorted({*EF_SEARCH_SWEEP, EF_SEARCH}):
        ann.ef_search = ef
        t0 = time.perf_counter()
        for q in timed:  # one query at a time, as a program asks
            ann.search(q[None, :], K)
        ms = (time.perf_counter() - t0) / len(timed) * 1000
        _, found = ann.search(queries, K)
        row["hnsw"]["sweep"].append({"ef_search": ef, "ms_per_query": round(ms, 3),
                                     "recall_at_10": round(recall_at_k(found, truth), 4)})
    row["memory"]["peak_rss_mb"] = round(_rss_peak_mb(), 0)
    return row


DATA_TEXT = {
    "clusters": f"isotropic clusters: points around {CLUSTERS} random centres with noise of the "
                "centre's scale (participation ratio near 384: a hard case, higher-dimensional "
                "than real text embeddings)",
    "spectrum": "a Gaussian with the eigenvalue spectrum of real all-MiniLM-L6-v2 embeddings of "
                "the shared corpus (`minilm_spectrum.json`, participation ratio ~137; no "
                "clusters, so a fresh query has no close neighbours: a pessimistic case)",
    "real": "real all-MiniLM-L6-v2 vectors of the shared corpus (12,843 passages, the "
            "`wiki-dense` index) searched with real ASQA questions (--sizes is ignored)",
}


def render(results: dict[str, Any]) -> str:
    env = results["environment"]
    lines = [
        "# Dense retrieval at scale: HNSW (faiss) against the exact scan",
        "",
        f"`python -m benchmarks.ann_scale [--data clusters|spectrum|real]` on {env['machine']} "
        f"({env['cpus']} CPUs visible, {env['threads']} threads for faiss/numpy, faiss "
        f"{env['faiss']}); 384-d unit vectors; queries (count per row in the JSON: 1,000 for the "
        "synthetic sets) drawn fresh from the data's distribution, never copies of indexed "
        "points; recall@10 against "
        "the exact top 10; ms = one query at a time. Timings were taken on a shared machine: "
        "see the load noted with each data set.",
    ]
    rows = list(results["sizes"].values())
    for data in DATA_KINDS:
        mine = sorted((r for r in rows if r.get("data", "clusters") == data),
                      key=lambda r: r["n"])
        if not mine:
            continue
        lines += ["", f"## {data}: {DATA_TEXT[data]}", "",
                  "| n | build s | vectors MB | graph MB | peak RSS MB | exact ms/query "
                  "| efSearch | HNSW ms/query | recall@10 |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for row in mine:
            for i, s in enumerate(row["hnsw"]["sweep"]):
                mark = " (default)" if s["ef_search"] == row["hnsw"]["default_ef_search"] else ""
                head = (f"| {row['n']:,} | {row['hnsw']['build_s']} "
                        f"| {row['memory']['vectors_mb']} | {row['memory']['graph_mb']} "
                        f"| {row['memory']['peak_rss_mb']:.0f} | {row['exact']['ms_per_query']} "
                        ) if i == 0 else "| | | | | | "
                lines.append(f"{head}| {s['ef_search']}{mark} | {s['ms_per_query']} "
                             f"| {s['recall_at_10']} |")
        loads = [f"{r['n']:,}: {r['load_avg']}" for r in mine if r.get("load_avg")]
        if loads:
            lines += ["", "1-minute load average of the 2-core machine when each size "
                          "finished: " + "; ".join(loads) + "."]
    lines += [f"\n{note}" for note in results.get("notes", [])]
    lines += ["", "HNSW: M = 32, efConstruction = 40 (`ambiqa/retrieval/ann.py`); the graph "
              "adds `graph MB` to the float32 vectors the dense retriever holds anyway. Peak "
              "RSS is the benchmark process's (vectors, queries, ground-truth scratch and the "
              "graph).", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(OUT_DIR))
    ap.add_argument("--force", action="store_true", help="remeasure sizes already saved")
    ap.add_argument("--data", choices=DATA_KINDS, default="clusters",
                    help="synthetic data (isotropic clusters, or MiniLM's spectrum), or the "
                         "real MiniLM vectors of the shared corpus")
    args = ap.parse_args(argv)
    import faiss

    faiss.omp_set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "ann_scale.json"
    from ambiqa.fsutil import atomic_write_json, atomic_write_text
    from ambiqa.retrieval.ann import EF_CONSTRUCTION, EF_SEARCH, HNSW_M

    # what makes rows comparable (each row records its own query count)
    settings = {"m": HNSW_M, "ef_construction": EF_CONSTRUCTION, "ef_search": EF_SEARCH,
                "threads": args.threads, "clusters": CLUSTERS}
    results: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
    if results.get("settings") != settings:
        results = {"settings": settings, "sizes": {}}
    results["environment"] = {"machine": platform.machine(), "cpus": os.cpu_count(),
                              "threads": args.threads, "faiss": faiss.__version__,
                              "python": sys.version.split()[0]}
    for n in (int(s) for s in args.sizes.split(",") if s.strip()):
        key = str(n) if args.data == "clusters" else f"{args.data}:{n}"
        if key in results["sizes"] and not args.force:
            print(f"{key}: already measured (use --force to redo)", flush=True)
            continue
        print(f"{key}: measuring ...", flush=True)
        row = measure(n, args.queries, data=args.data)
        row["load_avg"] = round(os.getloadavg()[0], 1)
        results["sizes"][key] = row
        atomic_write_json(path, results)
        atomic_write_text(out / "ann_scale.md", render(results))
        print(json.dumps(row), flush=True)
    atomic_write_text(out / "ann_scale.md", render(results))
    print(render(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
