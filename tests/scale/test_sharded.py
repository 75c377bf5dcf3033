"""`--shards` for every index kind: dense shards merge to exactly one index's ranking, bm25 is
refused with its reason, shards are searched at the same time, and a sharded search is one
retriever call in the cost trace."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from ambiqa.cli import EXIT_USER_ERROR, main
from ambiqa.data import demo_corpus_path
from ambiqa.data.corpus import load_corpus
from ambiqa.errors import ConfigError, RetrievalIndexError
from ambiqa.retrieval import encoder as encoder_mod
from ambiqa.retrieval.dense import DenseRetriever
from ambiqa.retrieval.factory import open_retriever
from ambiqa.retrieval.sharded import ShardedRetriever, check_shardable
from ambiqa.testing import HashEncoder
from ambiqa.tracing import track
from ambiqa.types import Passage, SharedResource

QUERIES = ["Belgium language", "capital of France", "who wrote the novel", "river in Egypt",
           "the first president", "football world cup winner"]


@pytest.fixture()
def hash_encoder(monkeypatch):
    """The shared encoder is a bag-of-words hash (no model to load, every vector known)."""
    enc = HashEncoder(dim=128)
    monkeypatch.setitem(encoder_mod._CACHE, "minilm", enc)
    return enc


def test_bm25_shards_are_refused_with_the_reason(tmp_path, capsys):
    rc = main(["index", str(demo_corpus_path()), "--name", "b", "--kind", "bm25",
               "--shards", "2", "--index-root", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == EXIT_USER_ERROR and "document frequencies" in err and "Traceback" not in err
    assert not any(tmp_path.iterdir())  # refused before any work
    check_shardable("bm25", 1)  # one bm25 index is fine
    for kind in ("dense", "colbert"):
        check_shardable(kind, 4)
    with pytest.raises(ConfigError):
        check_shardable("dense", 0)


def test_dense_shards_built_by_the_cli_rank_exactly_like_one_index(tmp_path, hash_encoder):
    corpus = demo_corpus_path()
    root = str(tmp_path)
    assert main(["index", str(corpus), "--name", "one", "--kind", "dense",
                 "--index-root", root]) == 0
    assert main(["index", str(corpus), "--name", "sh", "--kind", "dense", "--shards", "3",
                 "--index-root", root]) == 0
    assert (tmp_path / "sh.shards.json").is_file()
    single = open_retriever("dense:one", root=tmp_path)
    sharded = open_retriever("dense:sh", root=tmp_path)
    by_name = open_retriever("sh", root=tmp_path)  # the kind is read from the shard list
    assert isinstance(sharded, ShardedRetriever) and sharded.name == "dense"
    assert isinstance(by_name, ShardedRetriever) and by_name.kind == "dense"
    assert len(sharded.shards) == 3 and len(sharded) == len(single.passages)
    for q in QUERIES:
        for k in (1, 5, 50):
            want = [(p.id, round(p.score, 5)) for p in single.search(q, k)]
            assert [(p.id, round(p.score, 5)) for p in sharded.search(q, k)] == want
    got = sharded.batch_search(QUERIES, k=5)
    assert [[p.id for p in r] for r in got] == [[p.id for p in single.search(q, 5)]
                                                for q in QUERIES]
    pid = single.passages[-1].id
    assert sharded.get(pid) == single.get(pid)
    with pytest.raises(RetrievalIndexError, match="not colbert"):
        ShardedRetriever.load(tmp_path, "sh", kind="colbert")


def test_one_sharded_search_is_one_retriever_call(tmp_path, hash_encoder):
    passages = load_corpus(demo_corpus_path())
    half = len(passages) // 2
    shards = [DenseRetriever.build(passages[:half], tmp_path / "a"),
              DenseRetriever.build(passages[half:], tmp_path / "b")]
    sharded = ShardedRetriever("s", shards, kind="dense")
    with track() as trace:
        sharded.search("Belgium language", 3)
        sharded.batch_search(["a river", "a king"], 3)
    assert trace.summary()["retriever_calls"] == 3


def test_shards_of_different_encoders_are_refused(tmp_path):
    passages = load_corpus(demo_corpus_path())[:20]
    a = DenseRetriever.build(passages[:10], tmp_path / "a", encoder=HashEncoder(dim=32))
    b = DenseRetriever.build(passages[10:], tmp_path / "b",
                             encoder=HashEncoder(dim=32, name="other"))
    with pytest.raises(RetrievalIndexError, match="encoded differently"):
        ShardedRetriever("s", [a, b], kind="dense")
    with pytest.raises(RetrievalIndexError, match="cannot be sharded"):
        ShardedRetriever("s", [a], kind="bm25")


class _SlowShard(SharedResource):
    """A shard whose search waits until every shard is searching (or times out)."""

    name = "colbert"

    def __init__(self, i: int, barrier: threading.Barrier) -> None:
        self.i, self.barrier = i, barrier
        self.manifest = {"checkpoint": {"id": "same"}}
        self.fingerprint = f"slow{i}"
        self.warmed = 0

    def warm(self) -> _SlowShard:
        self.warmed += 1
        return self

    def search(self, query: str, k: int = 5) -> list[Passage]:
        self.barrier.wait(timeout=5)  # raises BrokenBarrierError unless all run at once
        time.sleep(0.2)
        return [Passage(f"s{self.i}-{r}", "", query, score=1.0 / (1 + r + self.i))
                for r in range(k)]

    def batch_search(self, queries: list[str], k: int = 5) -> list[list[Passage]]:
        return [self.search(q, k) for q in queries]

    def get(self, pid: str) -> None:
        return None

    def __len__(self) -> int:
        return 1


def test_shards_are_searched_at_the_same_time():
    n = 4
    shards = [_SlowShard(i, threading.Barrier(n)) for i in range(n)]
    barrier = threading.Barrier(n)
    for s in shards:
        s.barrier = barrier
    sharded = ShardedRetriever("slow", shards, kind="colbert")
    t0 = time.perf_counter()
    hits = sharded.search("q", 3)
    elapsed = time.perf_counter() - t0
    assert elapsed < 0.2 * n * 0.75  # one after another would take 0.8 s
    # merged by score: shard 0 rank 0 (1.0), then ties at 0.5 broken by shard order
    assert [p.id for p in hits] == ["s0-0", "s0-1", "s1-0"]
    assert all(s.warmed == 1 for s in shards)  # models loaded once, one after another
    sharded.search("again", 1)
    assert all(s.warmed == 1 for s in shards)
    sharded.close()


def test_merge_equals_exact_top_k_over_random_shards():
    rng = np.random.default_rng(0)
    scores = rng.random(60)
    passages = [Passage(f"p{i}", "", "t", score=float(s)) for i, s in enumerate(scores)]
    from ambiqa.retrieval.sharded import _merge

    parts = [sorted(passages[i::4], key=lambda p: -p.score)[:7] for i in range(4)]
    want = [p.id for p in sorted(passages, key=lambda p: -p.score)[:7]]
    assert [p.id for p in _merge(parts, 7)] == want
