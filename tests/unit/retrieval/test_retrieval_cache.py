"""The on-disk retrieval cache: one search per (fingerprint, query, k), across threads and
processes, atomic entries, invalidation by fingerprint."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ambiqa.errors import ConfigError
from ambiqa.retrieval.base import Retriever
from ambiqa.retrieval.cache import CachedRetriever, RetrievalCache, cached
from ambiqa.testing import CountingRetriever
from ambiqa.types import Passage

CORPUS = [Passage(f"p{i}", f"T{i}", f"passage number {i} about topic {i % 3}") for i in range(12)]


def counting(passages, fingerprint="fp-1") -> CountingRetriever:
    """An in-memory retriever with a fixed fingerprint that records every search."""
    return CountingRetriever(passages, fingerprint=fingerprint)


def test_second_search_is_served_from_disk_even_by_a_new_instance(tmp_path):
    base = counting(CORPUS)
    first = CachedRetriever(base, tmp_path)
    assert isinstance(first, Retriever)
    hits = first.search("topic 1", 3)
    assert len(base.calls) == 1 and first.search("topic 1", 3) == hits and len(base.calls) == 1
    again = CachedRetriever(base, RetrievalCache(tmp_path))  # fresh memory layer
    assert again.search("topic 1", 3) == hits and len(base.calls) == 1
    assert again.cache.stats() == {"hits": 1, "misses": 0}
    # k and the query are part of the key
    again.search("topic 1", 4)
    again.search("topic 2", 3)
    assert len(base.calls) == 3
    assert first.fingerprint == base.fingerprint and first.name == base.name


def test_fingerprint_change_invalidates(tmp_path):
    cache = RetrievalCache(tmp_path)
    a = counting(CORPUS, "fp-a")
    b = counting(CORPUS, "fp-b")
    CachedRetriever(a, cache).search("topic", 2)
    CachedRetriever(b, cache).search("topic", 2)
    assert len(a.calls) == len(b.calls) == 1


def test_entries_are_plain_json_and_corrupt_ones_are_misses(tmp_path):
    base = counting(CORPUS)
    c = CachedRetriever(base, RetrievalCache(tmp_path, memory_items=0))
    hits = c.search("number 5", 2)
    files = list(Path(tmp_path).rglob("*.json"))
    assert len(files) == 1
    data = json.loads(files[0].read_text())
    assert data["query"] == "number 5" and data["k"] == 2 and data["fingerprint"] == "fp-1"
    files[0].write_text("{not json")
    assert c.search("number 5", 2) == hits and len(base.calls) == 2  # recomputed and rewritten
    assert c.search("number 5", 2) == hits and len(base.calls) == 2
    assert not list(Path(tmp_path).rglob("*.tmp"))


def test_batch_search_mixes_hits_and_misses(tmp_path):
    base = counting(CORPUS)
    c = cached(base, tmp_path)
    assert cached(c) is c
    c.search("topic 0", 3)
    out = c.batch_search(["topic 0", "topic 1", "number 7"], 3)
    assert out == [base.search(q, 3) for q in ["topic 0", "topic 1", "number 7"]]
    with pytest.raises(ConfigError):
        c.search("", 3)
    with pytest.raises(ConfigError):
        c.batch_search(["ok", "  "], 3)


def test_threads_share_one_cache_safely(tmp_path):
    base = counting(CORPUS)
    c = CachedRetriever(base, tmp_path)
    queries = [f"topic {i % 4}" for i in range(64)]
    results: dict[int, list] = {}

    def work(i):
        results[i] = c.search(queries[i], 3)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(results[i] == base.search(queries[i], 3) for i in range(64))
    assert len(list(Path(tmp_path).rglob("*.json"))) == 4


_CHILD = """
import sys
from ambiqa.retrieval.base import InMemoryRetriever
from ambiqa.retrieval.cache import CachedRetriever
from ambiqa.types import Passage
corpus = [Passage(f"p{i}", f"T{i}", f"passage number {i} about topic {i % 3}") for i in range(12)]
c = CachedRetriever(InMemoryRetriever(corpus), sys.argv[1])
for r in range(30):
    for q in ("topic 0", "topic 1", "number 3"):
        c.search(q, 3)
print(c.cache.stats()["misses"])
"""


def test_processes_share_one_cache_safely(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-c", _CHILD, str(tmp_path)],
                              stdout=subprocess.PIPE, text=True) for _ in range(3)]
    misses = [int(p.communicate(timeout=120)[0].strip()) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert all(m <= 3 for m in misses)
    entries = list(Path(tmp_path).rglob("*.json"))
    assert len(entries) == 3 and all(json.loads(e.read_text())["k"] == 3 for e in entries)


def test_open_retriever_can_wrap_in_the_cache(tmp_path, monkeypatch):
    from ambiqa.retrieval.bm25 import BM25Retriever
    from ambiqa.retrieval.factory import describe, open_retriever

    BM25Retriever.build(CORPUS, tmp_path / "idx" / "b")
    plain = open_retriever("bm25:b", root=tmp_path / "idx")
    assert not isinstance(plain, CachedRetriever)
    monkeypatch.setenv("AMBIQA_RETRIEVAL_CACHE", str(tmp_path / "rc"))
    wrapped = open_retriever("bm25:b", root=tmp_path / "idx")
    assert isinstance(wrapped, CachedRetriever) and describe(wrapped) == describe(plain)
    assert wrapped.search("topic 1", 2) == plain.search("topic 1", 2)
    assert list((tmp_path / "rc").rglob("*.json"))
    with pytest.raises(ConfigError, match="unknown retriever kind"):
        open_retriever("elastic:b", root=tmp_path / "idx")
