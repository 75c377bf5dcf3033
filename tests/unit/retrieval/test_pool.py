"""EoR retriever-pool specs: the grammar (App. C.1's operation order) and running specs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ambiqa.errors import ConfigError
from ambiqa.retrieval.base import InMemoryRetriever
from ambiqa.retrieval.pool import (
    Background,
    Compress,
    Concat,
    NoRetrieval,
    PoolMemo,
    PoolRetriever,
    Source,
    parse_spec,
    run_spec,
)
from ambiqa.testing import CountingRetriever
from ambiqa.types import Passage


# ---- grammar ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("spec", "tree"), [
    ("Wiki@10", Source("Wiki", 10)),
    ("Wiki@RR@5", Source("Wiki", 5, rerank=True)),
    ("BM25@5&Wiki@5", Concat((Source("BM25", 5), Source("Wiki", 5)))),
    ("Wiki@10@CP", Compress(Source("Wiki", 10))),
    ("PK", Background()),
    ("ReFree", NoRetrieval()),
    # @RR > @k > & > @CP: re-rank, truncate, concatenate, then compress the whole
    ("SE@RR@5&Wiki@5@CP", Compress(Concat((Source("SE", 5, rerank=True), Source("Wiki", 5))))),
    ("PK&Wiki@5", Concat((Background(), Source("Wiki", 5)))),
    (" Wiki @ 3 & BM25@2 ", Concat((Source("Wiki", 3), Source("BM25", 2)))),
    ("refree", NoRetrieval()),
    ("pk", Background()),
    ("Wiki@rr@4@cp", Compress(Source("Wiki", 4, rerank=True))),
])
def test_valid_specs_parse_to_the_expected_tree(spec, tree):
    assert parse_spec(spec) == tree


@pytest.mark.parametrize("spec", ["Wiki@10", "Wiki@RR@5", "BM25@5&Wiki@5", "Wiki@10@CP", "PK",
                                  "ReFree", "SE@RR@5&Wiki@5@CP", "PK&Wiki@5"])
def test_canonical_spelling_round_trips(spec):
    assert str(parse_spec(spec)) == spec
    assert parse_spec(str(parse_spec(spec))) == parse_spec(spec)


def test_source_names_resolve_to_the_given_spelling():
    assert parse_spec("wiki@3&bm25@2", sources=["Wiki", "BM25"]) == Concat(
        (Source("Wiki", 3), Source("BM25", 2)))


@pytest.mark.parametrize(("spec", "fragment"), [
    ("", "empty"),
    ("   ", "empty"),
    ("Wiki", "position 4: expected '@' and a number of passages"),
    ("Wiki@", "position 5: expected a number of passages or 'RR'"),
    ("Wiki@0", "position 5: k must be a positive"),
    ("Wiki@-2", "k must be a positive number of passages, got -2"),
    ("Wiki@RR", "after '@RR'"),
    ("Wiki@RR@", "expected a number of passages"),
    ("Wiki@10@RR", "'@RR' must come before '@k'"),
    ("Wiki@5@CP&BM25@5", "must come last"),
    ("ReFree&Wiki@5", "stands alone"),
    ("Wiki@5&ReFree", "stands alone"),
    ("PK@5", "takes no '@k'"),
    ("@5", "position 0: expected a source name"),
    ("Wiki@5&", "found the end of the spec"),
    ("Wiki@5@XX", "expected 'CP'"),
    ("Wiki@5@5", "already has its '@k'"),
    ("Wiki@5000", "limit of 1000"),
    ("Wiki@99999999999999999999999", "limit of 1000"),
    ("Wiki#5", "unexpected character '#'"),
    ("Wiki@5 BM25@5", "expected '&', '@CP' or the end"),
    ("RR@5", "is an operation"),
    ("SE@5", "unknown source 'SE'"),
])
def test_bad_specs_raise_config_error_with_position(spec, fragment):
    with pytest.raises(ConfigError) as info:
        parse_spec(spec, sources=["Wiki", "BM25"])
    assert fragment in str(info.value)


def test_unknown_source_hint_mentions_offline_web_search():
    with pytest.raises(ConfigError) as info:
        parse_spec("SE@RR@5&Wiki@5", sources=["Wiki"])
    assert "not available offline" in str(info.value.hint)


@pytest.mark.parametrize("bad", [None, 5, ["Wiki@5"]])
def test_non_string_spec_is_a_config_error(bad):
    with pytest.raises(ConfigError):
        parse_spec(bad)


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=30))
def test_random_text_never_raises_anything_but_config_error(text):
    try:
        node = parse_spec(text, sources=["Wiki", "BM25"])
    except ConfigError:
        return
    assert parse_spec(str(node), sources=["Wiki", "BM25"]) == node


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["Wiki", "BM25", "@", "&", "RR", "CP", "PK", "ReFree", "5",
                                 "0", "12", " ", "-"]), max_size=10))
def test_spec_like_token_soup_never_raises_anything_but_config_error(parts):
    try:
        parse_spec("".join(parts), sources=["Wiki", "BM25"])
    except ConfigError:
        pass


# ---- running specs ---------------------------------------------------------------------------
CORPUS = [
    Passage("p1", "Paris", "Paris is the capital of France."),
    Passage("p2", "France", "France is a country in Europe whose capital is Paris."),
    Passage("p3", "Berlin", "Berlin is the capital of Germany."),
    Passage("p4", "Rome", "Rome is the capital of Italy."),
]


class ReverseEncoder:
    """Scores a text by how late its first letter is in the alphabet (so order is known)."""

    def encode(self, texts, **_):
        vecs = []
        for i, t in enumerate(texts):
            if i == 0:
                vecs.append([1.0, 0.0])
            else:
                a = (ord(t[0].lower()) - ord("a")) / 25
                vecs.append([a, float(np.sqrt(max(0.0, 1 - a * a)))])
        return np.asarray(vecs, dtype=np.float32)


def test_truncation_and_concatenation_dedupe_by_id():
    wiki = CountingRetriever(CORPUS)
    other = CountingRetriever(list(reversed(CORPUS)), name="other")
    out = run_spec(parse_spec("Wiki@2&Other@2"), "capital of France", {"Wiki": wiki,
                                                                       "Other": other})
    assert [p.id for p in out][:2] == [p.id for p in wiki.search("capital of France", 2)]
    assert len({p.id for p in out}) == len(out)  # a shared passage is not read twice


def test_rerank_reorders_a_deeper_list_then_truncates():
    wiki = CountingRetriever(CORPUS)
    pool = PoolRetriever({"Wiki": wiki}, encoder=ReverseEncoder(), rerank_depth=4)
    out = pool.run("Wiki@RR@2", "capital")
    assert wiki.calls == [("capital", 4)]
    # ReverseEncoder ranks titles starting late in the alphabet first: Rome, Paris
    assert [p.title for p in out] == ["Rome", "Paris"]


def test_pk_is_one_background_passage_and_refree_none():
    pool = PoolRetriever({}, background=lambda q: f"Background about {q}.")
    pk = pool.run("PK", "Paris")
    assert len(pk) == 1 and pk[0].text == "Background about Paris." and pk[0].id.startswith("pk:")
    assert pool.run("ReFree", "Paris") == []


def test_compress_applies_to_the_whole_concatenation_and_drops_empty():
    seen = []

    def compress(question, passage):
        seen.append(passage.id)
        return "" if passage.id == "p3" else passage.text.split(" is ")[0]

    pool = PoolRetriever({"Wiki": InMemoryRetriever(CORPUS)}, compress=compress)
    out = pool.run("Wiki@4@CP", "capital")
    assert sorted(seen) == ["p1", "p2", "p3", "p4"]
    assert "p3" not in [p.id for p in out]
    assert all(" is " not in p.text for p in out)


def test_memo_shares_searches_and_pk_between_members():
    wiki = CountingRetriever(CORPUS)
    pk_calls = []
    pool = PoolRetriever({"Wiki": wiki}, background=lambda q: pk_calls.append(q) or "bg",
                         compress=lambda q, p: p.text)
    memo = PoolMemo()
    for spec in ["Wiki@3", "Wiki@3@CP", "PK", "PK&Wiki@3"]:
        pool.run(spec, "capital", memo)
    assert wiki.calls == [("capital", 3)]
    assert pk_calls == ["capital"]


def test_memo_remembers_failures():
    calls = []

    def fail():
        calls.append(1)
        raise RuntimeError("boom")

    memo = PoolMemo()
    for _ in range(2):
        with pytest.raises(RuntimeError):
            memo.get("k", fail)
    assert calls == [1]


def test_missing_source_or_lm_step_is_a_config_error():
    with pytest.raises(ConfigError, match="uses source 'BM25'"):
        PoolRetriever({"Wiki": InMemoryRetriever(CORPUS)}).run("BM25@5", "q")
    with pytest.raises(ConfigError, match="background"):
        PoolRetriever({}).run("PK", "q")
    with pytest.raises(ConfigError, match="compressor"):
        PoolRetriever({"Wiki": InMemoryRetriever(CORPUS)}).run("Wiki@2@CP", "capital")


def test_prefetch_runs_searches_but_no_lm_steps():
    wiki = CountingRetriever(CORPUS)
    lm_steps = []
    pool = PoolRetriever({"Wiki": wiki}, background=lambda q: lm_steps.append("pk") or "bg",
                         compress=lambda q, p: lm_steps.append("cp") or p.text,
                         encoder=ReverseEncoder(), rerank_depth=3)
    memo = PoolMemo()
    for spec in ["Wiki@2@CP", "PK&Wiki@RR@1", "ReFree"]:
        pool.prefetch(parse_spec(spec), "capital", memo)
    assert sorted(wiki.calls) == [("capital", 2), ("capital", 3)] and lm_steps == []
    pool.run("Wiki@2@CP", "capital", memo)
    pool.run("PK&Wiki@RR@1", "capital", memo)
    assert len(wiki.calls) == 2 and sorted(lm_steps) == ["cp", "cp", "pk"]


# ---- re-ranking over merged sources, PK included (the paper's HB@RR; issue 12 item 15) --------
from ambiqa.retrieval.pool import GroupRerank  # noqa: E402


@pytest.mark.parametrize(("spec", "tree"), [
    ("(BM25@20&PK&Wiki@20)@RR@10", GroupRerank(Concat((Source("BM25", 20), Background(),
                                                        Source("Wiki", 20))), 10)),
    ("(SE@10&Wiki@20)@RR@5&Wiki@5@CP", Compress(Concat((
        GroupRerank(Concat((Source("SE", 10), Source("Wiki", 20))), 5), Source("Wiki", 5))))),
    (" ( pk & wiki@3 ) @ rr @ 2 ", GroupRerank(Concat((Background(), Source("wiki", 3))), 2)),
])
def test_group_rerank_specs_parse_and_round_trip(spec, tree):
    node = parse_spec(spec)
    assert node == tree
    assert parse_spec(str(node)) == node


@pytest.mark.parametrize(("spec", "fragment"), [
    ("(Wiki@5)@RR@3", "at least two parts"),
    ("(Wiki@5&PK)", "expected '@RR@k'"),
    ("(Wiki@5&PK)@5", "expected '@RR@k'"),
    ("(Wiki@5&PK@RR@3", "to close the group"),
    ("Wiki@5)", "no group is open"),
    ("(ReFree&PK)@RR@2", "stands alone"),
    ("(Wiki@5&PK)@RR@0", "positive"),
])
def test_bad_group_specs_say_what_is_wrong(spec, fragment):
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        parse_spec(spec)


class _Vectors:
    """Unit vectors by keyword: the question is [1, 0]; passages lean by their words."""

    def encode(self, texts, **_):
        rows = []
        for t in texts:
            if "capital" in t:
                rows.append([1.0, 0.0])
            elif "Background" in t:
                rows.append([0.9, 0.19 ** 0.5])  # unit length: cosine 0.9 to the question
            else:
                rows.append([0.0, 1.0])
        return np.asarray(rows, dtype=np.float32)


def test_group_rerank_merges_sources_and_pk_and_reranks_them_together():
    wiki = InMemoryRetriever([Passage("w1", "River", "The Seine is a river."),
                              Passage("w2", "Town", "Paris is the capital.")])
    bm25 = InMemoryRetriever([Passage("b1", "Food", "Lyon has good food.")])
    asked: list[str] = []
    pool = PoolRetriever({"Wiki": wiki, "BM25": bm25}, encoder=_Vectors(),
                         background=lambda q: asked.append(q) or "Some model knowledge.")
    got = pool.run("(BM25@1&PK&Wiki@2)@RR@2", "capital?")
    # merged b1, PK, w1, w2; cosine to the question [1, 0]: w2 1.0, PK 0.9, others 0
    assert got[0].id == "w2" and got[1].id.startswith("pk:")
    assert got[0].score == pytest.approx(1.0) and got[1].score == pytest.approx(0.9)
    assert asked == ["capital?"]


def test_group_rerank_reads_a_long_pk_document_as_one_unchunked_passage():
    """Declared deviation (docs/methods.md#eor): App. C.1 cuts the PK document into ~100-word
    chunks before re-ranking; here the whole document is one passage. A 320-word document
    (well past one chunk) must come back whole, once, and leave room for every other part."""
    words = [f"capital{i}" if i % 40 == 0 else f"word{i}" for i in range(320)]
    document = " ".join(words)
    wiki = InMemoryRetriever([Passage("w1", "River", "The Seine is a river."),
                              Passage("w2", "Town", "Paris is the capital.")])
    bm25 = InMemoryRetriever([Passage("b1", "Food", "Lyon has good food.")])
    pool = PoolRetriever({"Wiki": wiki, "BM25": bm25}, encoder=_Vectors(),
                         background=lambda q: document)
    got = pool.run("(BM25@1&PK&Wiki@2)@RR@10", "capital?")
    background = [p for p in got if p.id.startswith("pk:")]
    assert len(background) == 1 and background[0].text == document
    assert len(background[0].text.split()) == 320
    assert sorted(p.id for p in got if not p.id.startswith("pk:")) == ["b1", "w1", "w2"]
    assert len(got) == 4  # b1, PK, w1, w2: nothing split, nothing added
