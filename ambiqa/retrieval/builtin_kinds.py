"""The hooks of the built-in retriever kinds (colbert, bm25, dense) that their retriever classes
do not already provide; :mod:`ambiqa.retrieval.kinds` declares the kinds and names these by
``"module:attribute"``, so they load only when an index of that kind is built, opened or
checked.

Doctor checks raise :class:`~ambiqa.errors.RetrievalIndexError` whose hint is the fix
(``ambiqa.doctor`` prints it); they sit here, beside the retrievers they check, because the
doctor sits a layer above and must not name kinds.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from ambiqa.data.corpus import iter_corpus
from ambiqa.errors import RetrievalIndexError
from ambiqa.retrieval.bm25 import STOPWORDS, BM25Retriever
from ambiqa.retrieval.checkpoint import checkpoint_info, default_checkpoint
from ambiqa.retrieval.colbert.manifest import (
    check_colbert_files,
    check_corpus,
    read_collection,
    read_manifest,
)
from ambiqa.retrieval.colbert.progress import fmt_seconds
from ambiqa.retrieval.colbert.retriever import ColBERTRetriever
from ambiqa.retrieval.dense import DenseRetriever, passages_fingerprint
from ambiqa.retrieval.kinds import BuildOptions

Corpus = str | os.PathLike[str] | None


# ---- colbert ---------------------------------------------------------------------------------
def colbert_defaults(options: BuildOptions) -> BuildOptions:
    """The checkpoint, chosen once per build: the trained one when it is in the cache (and
    measured better), else the identity one (every shard of a build gets the same)."""
    return options if options.checkpoint else replace(options, checkpoint=default_checkpoint())


def colbert_build(passages: Any, root: Path, name: str, options: BuildOptions) -> Any:
    """colbert-ai indexing, streamed from ``passages``; the build commits itself."""
    return ColBERTRetriever.build(passages, index_root=root, name=name,
                                  checkpoint=options.checkpoint, progress=options.progress,
                                  nranks=options.nranks, kmeans_share=options.kmeans_share)


def colbert_open(root: Path, name: str) -> Any:
    return ColBERTRetriever.load(root, name)


def colbert_built(retriever: Any) -> str:
    """Passages, where, how long, size on disk and the checkpoint (after ``indexed``)."""
    m = retriever.manifest
    index_dir: Path = retriever.index_dir
    size = sum(f.stat().st_size for f in index_dir.iterdir() if f.is_file())
    return (f"{m['n_passages']:,} passages into {index_dir} in "
            f"{fmt_seconds(m['build_seconds'])} ({size / 2**20:.1f} MiB, checkpoint "
            f"{m['checkpoint']['id']}, {m['checkpoint']['kind']})")


def colbert_shards(index_name: str, shards: list[Any]) -> None:
    """MaxSim scores compare across shards only when one checkpoint encoded them all."""
    ckpts = {getattr(s, "manifest", {}).get("checkpoint", {}).get("id") for s in shards}
    if len(ckpts) > 1:
        raise RetrievalIndexError(
            f"the shards of {index_name!r} were built with different checkpoints "
            f"({sorted(map(str, ckpts))}); scores would not be comparable",
            hint="rebuild every shard with one --checkpoint")


def colbert_check(index_dir: Path, corpus: Corpus) -> str:
    """colbert-ai's files present and consistent, the stored collection matching the
    manifest, the checkpoint present with the weights it was built with, and (``corpus``)
    the index built from exactly that corpus."""
    manifest = read_manifest(index_dir)
    check_colbert_files(index_dir, manifest["n_passages"])
    read_collection(index_dir, manifest)
    ckpt = manifest["checkpoint"]
    detail = f"colbert, {manifest['n_passages']:,} passages, checkpoint {ckpt['id']}"
    if Path(ckpt["path"]).is_dir():
        info = checkpoint_info(ckpt["path"])
        if info["id"] != ckpt["id"]:
            raise RetrievalIndexError(
                f"built with checkpoint {ckpt['id']} but {ckpt['path']} now holds {info['id']}",
                hint=f"rebuild: ambiqa index CORPUS --name {index_dir.name} "
                     f"--checkpoint {ckpt['path']}")
    elif ckpt["kind"] != "identity":
        raise RetrievalIndexError(f"its checkpoint {ckpt['path']} is missing",
                                  hint="restore the checkpoint (ambiqa colbert train) or "
                                       f"rebuild the index: ambiqa index CORPUS --name "
                                       f"{index_dir.name}")
    else:
        detail += " (identity checkpoint rebuilt on first search)"
    if corpus is not None:
        check_corpus(manifest, corpus, index_dir)
        detail += "; matches the given corpus"
    return detail


# ---- bm25 and dense --------------------------------------------------------------------------
def bm25_check(index_dir: Path, corpus: Corpus) -> str:
    retriever = BM25Retriever.load(index_dir)
    return _simple_check(index_dir, corpus, "bm25", retriever, f"stopwords={STOPWORDS}")


def dense_check(index_dir: Path, corpus: Corpus) -> str:
    retriever = DenseRetriever.load(index_dir)
    return _simple_check(index_dir, corpus, "dense", retriever, retriever.encoder_name)


def _simple_check(index_dir: Path, corpus: Corpus, kind: str, retriever: Any,
                  extra: str) -> str:
    """The index loads (its files' hashes checked) and, with ``corpus``, was built from it:
    the fingerprint recomputed over the corpus equals the index's."""
    detail = f"{kind}, {len(retriever.passages):,} passages"
    if corpus is not None:
        fp = passages_fingerprint(kind, list(iter_corpus(corpus)), extra)
        if fp != retriever.fingerprint:
            raise RetrievalIndexError(f"built from a different corpus than {corpus}",
                                      hint=f"rebuild the {kind} index from that corpus")
        detail += "; matches the given corpus"
    return detail


def dense_shards(index_name: str, shards: list[Any]) -> None:
    """Cosine scores compare across shards only when one encoder (and dimension) made them."""
    encoders = {(getattr(s, "encoder_name", None), s.embeddings.shape[1]) for s in shards}
    if len(encoders) > 1:
        raise RetrievalIndexError(
            f"the shards of {index_name!r} were encoded differently ({sorted(encoders)}); "
            "cosine scores would not be comparable",
            hint="rebuild every shard with one encoder")
