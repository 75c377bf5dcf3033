"""``ambiqa.index()`` and ``ambiqa.open_index()`` give the same thing, and the top-level
namespace holds ambiqa's own names only (issue 43)."""

from __future__ import annotations

from types import ModuleType

import pytest

import ambiqa
from ambiqa.testing import vanilla_rag_lm

ROWS = [{"id": "paris", "title": "Paris", "text": "Paris is the capital of France."},
        {"id": "lyon", "title": "Lyon", "text": "Lyon is a city in France."},
        {"id": "nice", "title": "Nice", "text": "Nice is on the French Riviera."}]


@pytest.fixture()
def built(tmp_path):
    return ambiqa.index(ROWS, name="notes", kind="bm25", index_root=tmp_path / "idx")


@pytest.fixture()
def opened(built, tmp_path):
    return ambiqa.open_index("notes", root=tmp_path / "idx")


def test_built_and_opened_are_one_type_with_one_record(built, opened, tmp_path):
    assert type(built) is type(opened) is ambiqa.IndexResult
    record = ("notes", "bm25", built.fingerprint, 3, tmp_path / "idx")
    assert (built.name, built.kind, built.fingerprint, built.n_passages, built.root) == record
    assert (opened.name, opened.kind, opened.fingerprint, opened.n_passages,
            opened.root) == record
    assert opened.spec == built.spec == "bm25:notes" and opened.index_name == "notes"
    assert ambiqa.open_index("bm25:notes", root=tmp_path / "idx").spec == "bm25:notes"


def test_the_readme_search_pattern_works_on_a_built_and_an_opened_index(built, opened):
    for notes in (built, opened):
        def search(query, k, notes=notes):  # README: "Compile, export, load in your code"
            return [p.to_dict() for p in notes.retriever.search(query, k)]

        assert search("capital of France", 1)[0]["title"] == "Paris"
        assert notes.search("capital of France", 1)[0].id == "paris"  # it searches itself too
        assert [hits[0].id for hits in notes.batch_search(["Riviera", "Lyon city"], 1)] == \
            ["nice", "lyon"]
        assert notes.get("lyon").title == "Lyon" and notes.get("nope") is None


def test_an_index_stands_for_its_retriever_in_programs_and_artifacts(built, opened, tmp_path,
                                                                     fresh_dspy):
    from ambiqa.data import load_dataset
    from ambiqa.retrieval.factory import describe

    assert ambiqa.VanillaRAG(retriever=opened).retriever is opened.retriever
    assert ambiqa.as_retriever(built) is built.retriever
    art = tmp_path / "rag.json"
    result = ambiqa.compile("vanilla_rag", load_dataset("demo:train:2"), optimizer="labeled",
                            k=1, out=art, lm=vanilla_rag_lm(), retriever=opened)
    recorded = {"kind": "bm25", "index": "notes", "fingerprint": built.fingerprint}
    assert result.manifest["retriever"] == recorded == describe(opened.retriever)
    assert ambiqa.load(art, retriever=built).retriever is built.retriever


def test_the_top_level_namespace_holds_only_ambiqa_names():
    def own(name: str) -> bool:
        value = getattr(ambiqa, name)
        return (name in ambiqa.__all__ or (name.startswith("__") and name.endswith("__"))
                or (isinstance(value, ModuleType) and value.__name__.startswith("ambiqa.")))

    assert [name for name in dir(ambiqa) if not own(name)] == []
    for leaked in ("Any", "annotations", "os", "cache_root", "importlib"):
        assert leaked not in dir(ambiqa) and leaked not in ambiqa.__all__
        assert not hasattr(ambiqa, leaked), leaked
    for name in ambiqa.__all__:  # each public name is defined by ambiqa
        value = getattr(ambiqa, name)
        if callable(value):
            assert value.__module__.startswith("ambiqa"), (name, value.__module__)
    assert sorted(set(ambiqa.__all__)) == sorted(ambiqa.__all__)  # no name twice
