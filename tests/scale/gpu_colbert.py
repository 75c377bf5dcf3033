"""colbert-ai's GPU index + search path through ambiqa, with a tiny randomly initialised BERT.

    python -m tests.scale.gpu_colbert --out DIR      # on a machine with a GPU (or on a CPU)

No weights travel: the encoder is a 2-layer, 64-wide BERT with random weights (seeded) and a
vocabulary made from the demo corpus's words, saved in colbert-ai's checkpoint layout with a
random 32-d projection. ambiqa builds an index over the demo corpus with it
(:meth:`ColBERTRetriever.build`, i.e. ``run_indexer`` with ``RunConfig(gpus=<visible>)``) and
searches it; the script records which device each step ran on and writes ``gpu_colbert.json``
into ``--out``. Random weights retrieve poorly by meaning, but a passage's own text as the
query still finds that passage (identical tokens, identical vectors), so self-retrieval@1 is a
correctness check of the encode -> compress -> search path on whatever device ran it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

SPECIAL = ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def tiny_random_checkpoint(out: Path, texts: list[str], dim: int = 32, seed: int = 0) -> Path:
    """A colbert-ai checkpoint directory with a random tiny BERT and projection."""
    import torch
    from colbert.infra.config import ColBERTConfig
    from colbert.modeling.hf_colbert import class_factory
    from transformers import BertConfig, BertModel, BertTokenizerFast

    from ambiqa.fsutil import atomic_write_json, sha256_file
    from ambiqa.retrieval.checkpoint import INFO_FILE, RUN_KEYS, WEIGHTS_FILE

    words = sorted({w for t in texts for w in re.findall(r"[a-z0-9]+", t.lower())})
    chars = sorted({c for w in words for c in w})
    vocab = SPECIAL + words + [f"##{c}" for c in chars if c not in words]
    base = out.with_name(out.name + "-bert")
    base.mkdir(parents=True, exist_ok=True)
    (base / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tok = BertTokenizerFast(vocab_file=str(base / "vocab.txt"), do_lower_case=True)
    torch.manual_seed(seed)
    bert = BertModel(BertConfig(vocab_size=len(vocab), hidden_size=64, num_hidden_layers=2,
                                num_attention_heads=2, intermediate_size=128,
                                max_position_embeddings=512))
    bert.save_pretrained(str(base), safe_serialization=True)
    tok.save_pretrained(str(base))
    config = ColBERTConfig(dim=dim, doc_maxlen=180, query_maxlen=32, similarity="cosine",
                           checkpoint=str(base))
    torch.manual_seed(seed + 1)
    model = class_factory(str(base)).from_pretrained(str(base), colbert_config=config)
    if not hasattr(model, "all_tied_weights_keys"):
        model.post_init()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out), safe_serialization=True)
    tok.save_pretrained(str(out))
    config.configure(checkpoint=str(out))
    metadata = {k: v for k, v in config.export().items() if k not in RUN_KEYS}
    metadata["checkpoint"] = str(out)
    metadata["meta"] = {"version": "colbert-v0.4", "built_by": "ambiqa gpu_colbert"}
    atomic_write_json(out / "artifact.metadata", metadata)
    atomic_write_json(out / INFO_FILE, {"kind": "trained", "name": "tiny-random-bert",
                                        "dim": dim, "weights_sha256":
                                        sha256_file(out / WEIGHTS_FILE)})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default=None, help="scratch directory (default: --out/work)")
    ap.add_argument("--queries", type=int, default=40)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.work) if args.work else out / "work"
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("AMBIQA_CACHE", str(work / "cache"))
    result: dict[str, Any] = {"python": sys.version.split()[0]}
    try:
        run(work, args.queries, result)
        result["ok"] = True
    except Exception as exc:  # report what broke, then fail
        import traceback

        result["ok"] = False
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["traceback"] = traceback.format_exc()[-4000:]
    (out / "gpu_colbert.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    print(json.dumps({k: v for k, v in result.items() if k != "traceback"}, indent=2))
    if not result["ok"]:
        print(result["traceback"], file=sys.stderr)
    return 0 if result["ok"] else 1


def run(work: Path, n_queries: int, result: dict[str, Any]) -> None:
    import torch

    from ambiqa.data import demo_corpus_path
    from ambiqa.data.corpus import load_corpus
    from ambiqa.retrieval.colbert import devices
    from ambiqa.retrieval.colbert.patches import import_colbert

    result["torch"] = torch.__version__
    result["cuda"] = torch.version.cuda
    result["visible_gpus"] = devices.visible_gpus()
    result["device_name"] = (torch.cuda.get_device_name(0) if result["visible_gpus"] else "cpu")
    result["run_config"] = devices.run_config_kwargs()
    result["faiss_has_gpu"] = devices.faiss_has_gpu()
    import_colbert()
    from colbert.infra.config.settings import RunSettings

    result["colbert_total_visible_gpus"] = RunSettings.total_visible_gpus
    passages = load_corpus(demo_corpus_path())
    result["passages"] = len(passages)
    t0 = time.perf_counter()
    ckpt = tiny_random_checkpoint(work / "ckpt", [p.title + " " + p.text for p in passages])
    result["checkpoint_s"] = round(time.perf_counter() - t0, 1)

    import colbert.indexing.collection_indexer as ci

    used: dict[str, str] = {}
    original = ci.CollectionIndexer._train_kmeans

    def spy(self: Any, sample: Any, shared_lists: Any) -> Any:
        used["kmeans"] = getattr(ci.compute_faiss_kmeans, "__qualname__", "?")
        used["indexer_use_gpu"] = str(self.use_gpu)
        return original(self, sample, shared_lists)

    ci.CollectionIndexer._train_kmeans = spy
    from ambiqa.retrieval.colbert import ColBERTRetriever

    t0 = time.perf_counter()
    retriever = ColBERTRetriever.build(passages, index_root=work / "indexes", name="demo-tiny",
                                       checkpoint=ckpt, progress=False)
    result["build_s"] = round(time.perf_counter() - t0, 1)
    ci.CollectionIndexer._train_kmeans = original
    result.update(used)
    t0 = time.perf_counter()
    retriever.warm()
    result["load_s"] = round(time.perf_counter() - t0, 1)
    searcher = retriever._searcher
    result["searcher_model_device"] = str(next(searcher.checkpoint.parameters()).device)
    result["searcher_use_gpu"] = bool(getattr(searcher.ranker, "use_gpu", False))
    sample = passages[:n_queries]
    hits, times = 0, []
    for p in sample:
        t0 = time.perf_counter()
        got = retriever.search(p.text[:200], k=5)
        times.append(time.perf_counter() - t0)
        hits += bool(got) and got[0].id == p.id
    times.sort()
    result["self_retrieval_at_1"] = round(hits / len(sample), 3)
    result["search_ms_p50"] = round(1000 * times[len(times) // 2], 2)
    batch = retriever.batch_search([p.text[:200] for p in sample], k=5)
    result["batch_self_retrieval_at_1"] = round(
        sum(bool(r) and r[0].id == p.id for r, p in zip(batch, sample, strict=True))
        / len(sample), 3)


if __name__ == "__main__":
    sys.exit(main())
