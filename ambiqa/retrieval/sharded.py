"""Corpora that outgrow one index: shards built one after another, searched side by side.

The path for a corpus the size of a Wikipedia dump (tens of millions of passages) on machines
like this one:

1. ``ambiqa index dump.jsonl --name wiki --shards N`` streams the file once to count it, then
   builds ``wiki-0`` ... ``wiki-{N-1}`` from consecutive slices, each streamed from the file
   (only the current shard's id set and colbert-ai's per-shard state are in memory). Shards can
   also be built on different machines with the same checkpoint (``--checkpoint``) and copied
   under one index root; ``wiki.shards.json`` lists them.
2. ``--nranks R`` runs each shard's indexing in R processes (colbert-ai's launcher with ambiqa's
   gloo shim); useful with spare cores or several machines' worth of memory per shard.
3. :class:`ShardedRetriever` searches every shard for the top ``k`` and merges by score.
   ColBERT MaxSim scores of one checkpoint are comparable across shards (they do not depend on
   the collection), so the merge is exact for top-k as long as each shard returns its own top-k.

Shards must share one checkpoint; opening a shard set whose manifests name different
checkpoints is an :class:`~ambiqa.errors.RetrievalIndexError`.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ambiqa.errors import RetrievalIndexError
from ambiqa.fsutil import atomic_write_json
from ambiqa.retrieval.base import check_query
from ambiqa.types import Passage, SharedResource

SHARDS_SUFFIX = ".shards.json"


def shards_file(index_root: Path, name: str) -> Path:
    return Path(index_root) / f"{name}{SHARDS_SUFFIX}"


def _count_passages(path: str | os.PathLike[str]) -> int:
    with open(path, encoding="utf-8") as fh:
        return sum(1 for line in fh if line.strip())


def build_sharded(corpus_path: str | os.PathLike[str], name: str, index_root: Path,
                  shards: int, checkpoint: Path | None = None, progress: bool = True,
                  nranks: int = 1, kmeans_share: float | None = None) -> ShardedRetriever:
    """Build ``name-0..name-{shards-1}`` from consecutive slices of a corpus file."""
    from ambiqa.retrieval.colbert import ColBERTRetriever, iter_corpus

    total = _count_passages(corpus_path)
    if total < shards:
        raise RetrievalIndexError(f"cannot split {total} passages into {shards} shards")
    per = -(-total // shards)
    names = []
    for i in range(shards):
        part = itertools.islice(iter_corpus(corpus_path), i * per, min(total, (i + 1) * per))
        shard_name = f"{name}-{i}"
        ColBERTRetriever.build(part, index_root=index_root, name=shard_name,
                               checkpoint=checkpoint, progress=progress, nranks=nranks,
                               kmeans_share=kmeans_share)
        names.append(shard_name)
    atomic_write_json(shards_file(index_root, name),
                      {"name": name, "shards": names, "n_passages": total,
                       "source": str(Path(corpus_path).resolve())})
    return ShardedRetriever.load(index_root, name)


class ShardedRetriever(SharedResource):
    """Search several ColBERT indexes (shards of one corpus) and merge the results by score."""

    name = "colbert"

    def __init__(self, index_name: str, shards: Sequence[Any]) -> None:
        if not shards:
            raise RetrievalIndexError(f"sharded index {index_name!r} lists no shards")
        ckpts = {getattr(s, "manifest", {}).get("checkpoint", {}).get("id") for s in shards}
        if len(ckpts) > 1:
            raise RetrievalIndexError(f"the shards of {index_name!r} were built with different "
                              f"checkpoints ({sorted(map(str, ckpts))}); scores would not be "
                              "comparable", hint="rebuild every shard with one --checkpoint")
        self.index_name = index_name
        self.shards = list(shards)

    @classmethod
    def load(cls, index_root: Path, name: str) -> ShardedRetriever:
        from ambiqa.retrieval.colbert import ColBERTRetriever

        path = shards_file(index_root, name)
        try:
            spec = json.loads(path.read_text(encoding="utf-8"))
            names = [str(n) for n in spec["shards"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise RetrievalIndexError(f"cannot read the shard list {path}: {exc}",
                              hint=f"rebuild: ambiqa index CORPUS --name {name} --shards N"
                              ) from exc
        return cls(name, [ColBERTRetriever.load(index_root, n) for n in names])

    @property
    def fingerprint(self) -> str:
        return "sharded:" + "+".join(s.fingerprint for s in self.shards)

    def __len__(self) -> int:
        return sum(len(s) for s in self.shards)

    def search(self, query: str, k: int = 5) -> list[Passage]:
        query, k = check_query(query, k)
        merged = [p for s in self.shards for p in s.search(query, k)]
        merged.sort(key=lambda p: -(p.score or 0.0))
        return merged[:k]

    def batch_search(self, queries: Sequence[str], k: int = 5) -> list[list[Passage]]:
        return [self.search(q, k) for q in queries]

    def get(self, pid: str) -> Passage | None:
        for s in self.shards:
            found = s.get(pid)
            if found is not None:
                return found
        return None
