"""``ambiqa index``'s entry point for ColBERT: build one index or a sharded one.

It sits above both :mod:`ambiqa.retrieval.colbert` (one index) and
:mod:`ambiqa.retrieval.sharded` (several shards searched as one), so neither of those imports
the other, and outside the ``colbert`` package, whose ``__init__`` would otherwise import
:mod:`~ambiqa.retrieval.sharded` while ``sharded`` imports the package.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ambiqa.checks import check_int
from ambiqa.paths import index_root as default_root
from ambiqa.retrieval.checkpoint import default_checkpoint
from ambiqa.retrieval.colbert.retriever import ColBERTRetriever
from ambiqa.retrieval.sharded import build_sharded


def build_index(corpus_path: str | os.PathLike[str], name: str,
                index_root: str | os.PathLike[str] | None = None,
                checkpoint: str | os.PathLike[str] | None = None,
                progress: bool = True, nranks: int = 1, kmeans_share: float | None = None,
                shards: int = 1) -> Any:
    """What ``ambiqa index CORPUS --name NAME`` runs (the CLI prints the summary).

    ``index_root`` defaults to ``$AMBIQA_INDEX_ROOT`` or ``$AMBIQA_CACHE/indexes``;
    ``checkpoint`` to :func:`~ambiqa.retrieval.checkpoint.default_checkpoint` (the trained
    checkpoint when it is in the cache, else the identity one). ``shards > 1`` splits the
    corpus into consecutive parts indexed one after another as ``NAME-0`` ... and records them
    in ``NAME.shards.json``; ``open_retriever("NAME")`` then searches all parts and merges by
    score. Each part is streamed from the file, so memory is bounded by one part.
    """
    root = Path(index_root).expanduser() if index_root else default_root()
    ckpt = Path(checkpoint) if checkpoint else default_checkpoint()
    check_int("shards", shards)
    if shards > 1:
        return build_sharded(corpus_path, name, root, shards, checkpoint=ckpt,
                             progress=progress, nranks=nranks, kmeans_share=kmeans_share)
    return ColBERTRetriever.build(
        str(corpus_path), index_root=root, name=name, checkpoint=ckpt, progress=progress,
        nranks=nranks, kmeans_share=kmeans_share)
