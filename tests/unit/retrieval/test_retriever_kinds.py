"""The retriever-kind registry (issue 44 item 3): a kind is declared once and every caller finds
it -- the factory, ``ambiqa.index`` / ``open_index``, sharding, ``index add``, the ``ambiqa
index`` command's ``--kind`` choices and help, program targets and loaded artifacts, and
``ambiqa doctor``.

The toy kind below lives in this file only: adding a kind touches its retriever module and one
registration (here both are this file), nothing else in ambiqa.
"""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

import ambiqa
from ambiqa import doctor
from ambiqa.api.targets import resolve
from ambiqa.cli import build_parser, main
from ambiqa.cli.retrieval_cmds import index_add_parser
from ambiqa.errors import ConfigError, RetrievalIndexError
from ambiqa.optimizers.artifact import save_artifact
from ambiqa.programs.vanilla_rag import VanillaRAG
from ambiqa.retrieval import kinds
from ambiqa.retrieval.adding import add_passages, addable
from ambiqa.retrieval.base import InMemoryRetriever
from ambiqa.retrieval.colbert.manifest import MANIFEST as COLBERT_MANIFEST
from ambiqa.retrieval.factory import describe, index_kind, open_retriever
from ambiqa.retrieval.sharded import ShardedRetriever, check_shardable
from ambiqa.types import Passage

ROWS = [{"id": "paris", "title": "Paris", "text": "Paris is the capital of France."},
        {"id": "lyon", "title": "Lyon", "text": "Lyon is a city in France on the Rhone."},
        {"id": "nice", "title": "Nice", "text": "Nice is on the French Riviera."},
        {"id": "lille", "title": "Lille", "text": "Lille is a city in the north of France."}]


# ---- the toy kind: a token-overlap retriever stored as JSON -----------------------------------
class ToyRetriever(InMemoryRetriever):
    """Token overlap (the unit tests' in-memory retriever) persisted as one JSON file."""

    name = "toy"

    @classmethod
    def build(cls, passages: list[Passage], index_dir: Path) -> ToyRetriever:
        Path(index_dir).mkdir(parents=True, exist_ok=True)
        (Path(index_dir) / "passages.json").write_text(json.dumps(
            [[p.id, p.title, p.text] for p in passages]))
        (Path(index_dir) / kinds.DIRECTORY_MANIFEST).write_text(json.dumps({"kind": "toy"}))
        return cls(passages)

    @classmethod
    def load(cls, index_dir: Path) -> ToyRetriever:
        rows = json.loads((Path(index_dir) / "passages.json").read_text())
        return cls([Passage(*row) for row in rows])


def toy_check(index_dir: Path, corpus: object) -> str:
    return f"toy, {len(ToyRetriever.load(index_dir).passages)} passages"


def toy_add(index_dir: Path, passages: list[Passage], replace: bool, source: str,
            encoder: object) -> types.SimpleNamespace:
    old = ToyRetriever.load(index_dir)
    new = ToyRetriever.build(old.passages + passages, index_dir)
    new.index_name = index_dir.name
    return types.SimpleNamespace(retriever=new, added=len(passages), replaced=0,
                                 fingerprint_before=old.fingerprint,
                                 fingerprint_after=new.fingerprint)


@pytest.fixture()
def toy(monkeypatch):
    """The toy kind registered for one test (the registry is restored afterwards)."""
    monkeypatch.setattr(kinds, "_KINDS", dict(kinds._KINDS))
    return kinds.register_retriever_kind(kinds.directory_kind(
        "toy", "token overlap, for tests", ToyRetriever, checker=toy_check, adder=toy_add,
        requires=("json",)))


@pytest.fixture()
def corpus(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return path


# ---- every caller finds it --------------------------------------------------------------------
def test_the_api_builds_opens_and_the_factory_finds_a_registered_kind(toy, corpus, tmp_path):
    built = ambiqa.index(str(corpus), name="notes", kind="toy", index_root=tmp_path)
    assert isinstance(built.retriever, ToyRetriever) and built.kind == "toy"
    assert built.n_passages == 4 and (tmp_path / "notes" / "passages.json").is_file()
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]  # committed by rename
    assert index_kind("notes", tmp_path) == "toy"  # read from its manifest
    for spec in ("notes", "toy:notes", {"kind": "toy", "index": "notes"}):
        opened = open_retriever(spec, root=tmp_path)
        assert isinstance(opened, ToyRetriever) and opened.index_name == "notes"
    assert describe(opened) == {"kind": "toy", "index": "notes",
                                "fingerprint": built.fingerprint}
    assert ambiqa.open_index("notes", root=tmp_path).kind == "toy"
    assert opened.search("capital of France", 1)[0].id == "paris"


def test_ambiqa_index_offers_the_kind_and_builds_it(toy, corpus, tmp_path, capsys):
    index = next(a for a in build_parser()._subparsers._group_actions[0].choices["index"]._actions
                 if a.dest == "kind")
    assert "toy" in index.choices and "token overlap, for tests" in index.help
    assert main(["index", str(corpus), "--name", "cli-toy", "--kind", "toy",
                 "--index-root", str(tmp_path)]) == 0
    assert "index 'cli-toy' (toy, 4 passages" in capsys.readouterr().out
    assert isinstance(open_retriever("cli-toy", root=tmp_path), ToyRetriever)


def test_a_kind_unregistered_is_refused_everywhere(corpus, tmp_path):
    with pytest.raises(ConfigError, match="unknown index kind 'toy'"):
        ambiqa.IndexSettings(name="x", kind="toy")
    with pytest.raises(ConfigError, match="unknown retriever kind 'toy'"):
        open_retriever("toy:x", root=tmp_path)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["index", str(corpus), "--name", "x", "--kind", "toy"])


def test_program_targets_and_artifacts_open_the_kind(toy, corpus, tmp_path, monkeypatch):
    ambiqa.index(str(corpus), name="notes", kind="toy", index_root=tmp_path)
    target = resolve("vanilla_rag", index="notes", index_root=tmp_path)
    assert isinstance(target.program.retriever, ToyRetriever)
    prog = VanillaRAG(retriever=target.program.retriever, k=2)
    art = save_artifact(tmp_path / "art.json", prog, {
        "program": "vanilla_rag", "program_config": prog.config(), "ambiqa_version": "test",
        "lm": "scripted/fake", "retriever": describe(prog.retriever), "metric": "f1",
        "optimizer": {"name": "labeled"}, "created": "2026-01-01T00:00:00+00:00"})
    # the artifact records {"kind": "toy", "index": "notes"}: loading opens it by name
    monkeypatch.setenv("AMBIQA_INDEX_ROOT", str(tmp_path))
    loaded = ambiqa.load(art)
    assert isinstance(loaded.retriever, ToyRetriever)
    assert loaded.retriever.fingerprint == describe(prog.retriever)["fingerprint"]


def test_shards_of_a_shardable_kind_build_and_search_as_one(toy, corpus, tmp_path):
    check_shardable("toy", 2)
    built = ambiqa.index(str(corpus), name="wiki", kind="toy", index_root=tmp_path, shards=2)
    assert (tmp_path / "wiki.shards.json").is_file()
    opened = open_retriever("wiki", root=tmp_path)
    assert isinstance(opened, ShardedRetriever) and opened.kind == "toy" and len(opened) == 4
    assert {type(s) for s in opened.shards} == {ToyRetriever}
    assert opened.search("north of France", 1)[0].id == "lille"
    assert built.kind == "toy" and built.n_passages == 4  # a shard set counts its shards


def test_a_kind_that_says_why_it_cannot_shard_is_refused_with_its_reason(monkeypatch):
    monkeypatch.setattr(kinds, "_KINDS", dict(kinds._KINDS))
    kinds.register_retriever_kind(kinds.directory_kind(
        "flat", "no shards", ToyRetriever, not_shardable="flat scores are per corpus"))
    with pytest.raises(ConfigError, match="flat scores are per corpus"):
        check_shardable("flat", 2)
    with pytest.raises(TypeError, match="say why"):
        kinds.RetrieverKind("nameless-reason", "x", builder=print, opener=print)


def test_index_add_finds_the_kinds_adder(toy, corpus, tmp_path):
    ambiqa.index(str(corpus), name="notes", kind="toy", index_root=tmp_path)
    assert addable("notes", tmp_path) == "toy"
    done = add_passages("notes", [Passage("zebra", "Zebra", "Zebras graze in Kenya.")],
                        root=tmp_path)
    assert done.added == 1 and open_retriever("notes", root=tmp_path).get("zebra")
    assert "toy" in index_add_parser().description


def test_a_kind_without_an_adder_is_refused_by_index_add(monkeypatch, corpus, tmp_path):
    monkeypatch.setattr(kinds, "_KINDS", dict(kinds._KINDS))
    kinds.register_retriever_kind(kinds.directory_kind("toy", "no adds", ToyRetriever))
    ambiqa.index(str(corpus), name="notes", kind="toy", index_root=tmp_path)
    with pytest.raises(RetrievalIndexError, match="cannot be added to a toy index"):
        addable("notes", tmp_path)


def test_doctor_checks_an_index_of_the_kind(toy, corpus, tmp_path, monkeypatch):
    ambiqa.index(str(corpus), name="notes", kind="toy", index_root=tmp_path / "idx")
    assert doctor.check_index(tmp_path / "idx" / "notes") == "toy, 4 passages"
    monkeypatch.setenv("AMBIQA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "cache" / "ext"))
    monkeypatch.setattr(doctor, "_model", lambda name: (lambda: "skipped in tests"))
    for name in ("_torch", "_faiss", "_encoder"):
        monkeypatch.setattr(doctor, name, lambda: "skipped in tests")
    imported: list[str] = []
    monkeypatch.setattr(doctor, "importlib", types.SimpleNamespace(
        import_module=lambda m: imported.append(m) or types.SimpleNamespace(__version__="1")))
    out: list[str] = []
    doctor.run_checks(print_fn=out.append, index_root=tmp_path / "idx")
    assert "[ok] index notes: toy, 4 passages" in out
    assert "json" in imported  # the kind's own requirement is checked too


def test_doctor_names_an_unregistered_kind(corpus, tmp_path):
    d = tmp_path / "odd"
    d.mkdir()
    (d / kinds.DIRECTORY_MANIFEST).write_text(json.dumps({"kind": "toy"}))
    with pytest.raises(doctor.CheckFailed, match="unknown kind 'toy'"):
        doctor.check_index(d)


# ---- the built-in kinds -----------------------------------------------------------------------
def test_the_builtin_kinds_are_declared_once_in_the_registry():
    assert kinds.retriever_kind_names() == ("colbert", "bm25", "dense")
    assert kinds.DEFAULT_KIND == "colbert"
    assert kinds.shardable_kinds() == ("colbert", "dense")
    assert kinds.addable_kinds() == ("colbert", "bm25", "dense")
    assert "document frequencies" in kinds.retriever_kind("bm25").not_shardable
    assert kinds.retriever_kind("colbert").marker == COLBERT_MANIFEST
    assert not kinds.retriever_kind("colbert").replaces


def test_the_registry_and_the_cli_help_import_no_retrieval_library():
    import subprocess
    import sys

    code = ("import sys; from ambiqa.cli import build_parser; build_parser(); "
            "print(sorted(m for m in ('dspy', 'torch', 'bm25s', 'numpy', "
            "'ambiqa.retrieval.bm25', 'ambiqa.retrieval.builtin_kinds') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
