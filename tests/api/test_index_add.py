"""Adding passages to a built index (issue 43 item 2): ``ambiqa.open_index(NAME).add(...)`` and
``ambiqa index add NAME FILES...`` for BM25 and dense (ColBERT, which needs a real index:
``tests/integration/test_colbert_add.py``), a refusal naming the rebuild for sharded indexes.

Each kind: searched before and after (the new passage found after, the old ones still), the
fingerprint changed (an artifact compiled before is refused on load, as after a rebuild), the
file hashes true on reopen, a duplicate id refused in one line (or replaced with ``replace``),
and a failed or killed add leaves the index byte for byte as it was.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import dspy
import pytest

import ambiqa
from ambiqa.cli import main
from ambiqa.cli.retrieval_cmds import index_add_parser
from ambiqa.data.corpus import iter_corpora
from ambiqa.errors import ArtifactError, DataError, RetrievalIndexError
from ambiqa.optimizers.artifact import save_artifact
from ambiqa.programs.vanilla_rag import VanillaRAG
from ambiqa.retrieval.adding import ADDITIONS, add_passages, changes_since, index_lock
from ambiqa.retrieval.dense import MANIFEST, DenseRetriever
from ambiqa.retrieval.factory import describe
from ambiqa.retrieval.integrity import clear_verified, verify_files
from ambiqa.testing import HashEncoder

ROWS = [{"id": "paris", "title": "Paris", "text": "Paris is the capital of France."},
        {"id": "lyon", "title": "Lyon", "text": "Lyon is a city in France on the Rhone."},
        {"id": "nice", "title": "Nice", "text": "Nice is on the French Riviera."}]
ZEBRA = {"id": "zebra", "title": "Zebra",
         "text": "Zebras are striped equines grazing the savanna of Kenya."}
KINDS = ["bm25", "dense"]


@pytest.fixture()
def hash_encoder(monkeypatch):
    """Dense indexes encode with a bag-of-words stand-in for MiniLM (no model): builds, adds,
    the CLI and reopened indexes all get it through ``get_encoder``."""
    encoder = HashEncoder(dim=64)
    for where in ("ambiqa.retrieval.encoder", "ambiqa.retrieval.dense"):
        monkeypatch.setattr(f"{where}.get_encoder", lambda path=None: encoder)
    return encoder


@pytest.fixture()
def root(tmp_path, monkeypatch, hash_encoder):
    root = tmp_path / "idx"
    monkeypatch.setenv("AMBIQA_INDEX_ROOT", str(root))
    return root


def _build(kind: str, root: Path) -> ambiqa.IndexResult:
    return ambiqa.index(ROWS, name="notes", kind=kind, index_root=root)


def _snapshot(index_dir: Path) -> dict[str, bytes]:
    return {p.relative_to(index_dir).as_posix(): p.read_bytes()
            for p in sorted(index_dir.rglob("*")) if p.is_file()}


def _manifest(root: Path) -> dict:
    return json.loads((root / "notes" / MANIFEST).read_text())


# --- search before and after, fingerprint, hashes, the record -------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_an_added_passage_is_found_and_the_old_ones_still_are(kind, root):
    built = _build(kind, root)
    before = {q: [p.id for p in built.search(q, 1)] for q in ("capital of France",
                                                               "French Riviera")}
    assert before == {"capital of France": ["paris"], "French Riviera": ["nice"]}
    assert "zebra" not in [p.id for p in built.search("striped zebras in Kenya", 3)]

    index = ambiqa.open_index("notes", root=root)
    assert index.add([ZEBRA]) is index
    assert index.added == {"added": 1, "replaced": 0, "fingerprint_before": built.fingerprint}
    assert index.n_passages == 4 and index.fingerprint != built.fingerprint
    assert index.search("striped zebras in Kenya", 1)[0].id == "zebra"
    assert index.get("zebra").title == "Zebra"
    for query, ids in before.items():
        assert [p.id for p in index.search(query, 1)] == ids

    reopened = ambiqa.open_index("notes", root=root)  # every file's sha256 checked again
    assert (reopened.kind, reopened.n_passages, reopened.fingerprint) == \
        (kind, 4, index.fingerprint)
    assert reopened.search("striped zebras in Kenya", 1)[0].id == "zebra"
    assert [p.id for p in reopened.search("capital of France", 1)] == ["paris"]
    # the fingerprint is the one a build of the same passages gives
    rebuilt = ambiqa.index([*ROWS, ZEBRA], name="again", kind=kind, index_root=root)
    assert rebuilt.fingerprint == index.fingerprint

    manifest = _manifest(root)
    assert manifest["count"] == 4 and manifest["fingerprint"] == index.fingerprint
    (entry,) = manifest[ADDITIONS]
    assert (entry["added"], entry["replaced"], entry["count"], entry["source"]) == \
        (1, 0, 4, "<passages>")
    assert entry["at"].endswith("+00:00")
    assert not [p.name for p in root.iterdir() if ".tmp-" in p.name or ".old-" in p.name]


@pytest.mark.parametrize("kind", KINDS)
def test_the_manifest_hashes_cover_the_new_files(kind, root):
    _build(kind, root)
    ambiqa.open_index("notes", root=root).add([ZEBRA])
    index_dir = root / "notes"
    manifest = _manifest(root)
    verify_files(index_dir, manifest, kind)  # true after the add
    listed = set(manifest["files"])
    on_disk = {p.relative_to(index_dir).as_posix() for p in index_dir.rglob("*")
               if p.is_file() and p.name != MANIFEST and not p.name.startswith(".")}
    assert listed == on_disk
    passages = index_dir / "passages.jsonl"  # a damaged new file is caught on open
    passages.write_bytes(passages.read_bytes().replace(b"Kenya", b"Kenyb"))
    clear_verified(index_dir)
    with pytest.raises(RetrievalIndexError, match="does not match its manifest"):
        ambiqa.open_index("notes", root=root)


@pytest.mark.parametrize("kind", KINDS)
def test_two_adds_are_both_recorded(kind, root):
    _build(kind, root)
    index = ambiqa.open_index("notes", root=root)
    built = index.fingerprint
    index.add([ZEBRA])
    middle = index.fingerprint
    index.add(["Okapis are forest giraffids of the Congo."])
    assert index.n_passages == 5
    assert index.search("okapi forest giraffids", 1)[0].text.startswith("Okapis")
    history = _manifest(root)[ADDITIONS]
    assert [e["count"] for e in history] == [4, 5]
    assert [e["fingerprint_before"] for e in history] == [built, middle]
    # what an artifact's refusal says, from either fingerprint on
    reopened = ambiqa.open_index("notes", root=root).retriever
    last = history[-1]["at"]
    assert changes_since(reopened, built) == \
        f"2 passage(s) added by `ambiqa index add` since, the last at {last}"
    assert changes_since(reopened, middle).startswith("1 passage(s) added")
    assert changes_since(reopened, "bm25:another") is None


# --- ids: duplicates refused, or replaced on request -----------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_a_duplicate_id_is_refused_in_one_line_and_nothing_changes(kind, root):
    _build(kind, root)
    before = _snapshot(root / "notes")
    index = ambiqa.open_index("notes", root=root)
    fingerprint = index.fingerprint
    with pytest.raises(DataError) as err:
        index.add([ZEBRA, {"id": "lyon", "text": "Lyon again."},
                   {"id": "nice", "text": "Nice again."}])
    assert err.value.message == ("passage id 'lyon' (and 1 more) is already in index 'notes'; "
                                 "nothing was added")
    assert "\n" not in err.value.message and "--replace" in err.value.hint
    assert _snapshot(root / "notes") == before and index.fingerprint == fingerprint
    with pytest.raises(DataError, match="duplicate passage id 'zebra'"):  # twice in one add
        index.add([ZEBRA, ZEBRA])
    assert _snapshot(root / "notes") == before


@pytest.mark.parametrize("kind", KINDS)
def test_replace_puts_the_new_text_in_place(kind, root):
    built = _build(kind, root)
    index = ambiqa.open_index("notes", root=root)
    index.add([{"id": "lyon", "title": "Lyon", "text": "Lyon is famous for its silk weavers."},
               ZEBRA], replace=True)
    assert index.added["added"] == 1 and index.added["replaced"] == 1
    assert index.n_passages == 4 and index.fingerprint != built.fingerprint
    assert index.get("lyon").text == "Lyon is famous for its silk weavers."
    assert index.search("silk weavers", 1)[0].id == "lyon"
    reopened = ambiqa.open_index("notes", root=root)
    assert [p.id for p in reopened.retriever.passages] == ["paris", "lyon", "nice", "zebra"]
    assert reopened.search("silk weavers", 1)[0].id == "lyon"
    unchanged = reopened.fingerprint  # replacing with identical passages writes nothing
    before = _snapshot(root / "notes")
    assert reopened.add([ROWS[0]], replace=True).fingerprint == unchanged
    assert _snapshot(root / "notes") == before


# --- atomic: a failed or a killed add leaves the index as it was -----------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_a_failed_add_leaves_the_index_as_it_was(kind, root, monkeypatch):
    built = _build(kind, root)
    before = _snapshot(root / "notes")

    def fail(tmp, target):
        raise OSError("disk full (simulated)")

    monkeypatch.setattr("ambiqa.retrieval.adding.swap_dir_into_place", fail)
    with pytest.raises(OSError, match="disk full"):
        ambiqa.open_index("notes", root=root).add([ZEBRA])
    assert _snapshot(root / "notes") == before
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == ["notes"]
    assert ambiqa.open_index("notes", root=root).fingerprint == built.fingerprint


KILLED_ADD = """
import sys, time
import ambiqa
from ambiqa.retrieval import adding
from ambiqa.testing import HashEncoder

encoder = HashEncoder(dim=64)
import ambiqa.retrieval.dense, ambiqa.retrieval.encoder
ambiqa.retrieval.encoder.get_encoder = lambda path=None: encoder
ambiqa.retrieval.dense.get_encoder = lambda path=None: encoder

def stall(tmp, target):  # the new index is written; die before it is renamed into place
    print("WRITTEN", flush=True)
    time.sleep(600)

adding.swap_dir_into_place = stall
ambiqa.open_index("notes", root=sys.argv[1]).add(
    [{"id": "zebra", "title": "Zebra", "text": "Zebras are striped."}])
"""


@pytest.mark.parametrize("kind", KINDS)
def test_a_killed_add_leaves_the_index_as_it_was(kind, root, tmp_path):
    built = _build(kind, root)
    before = _snapshot(root / "notes")
    script = tmp_path / "killed_add.py"
    script.write_text(textwrap.dedent(KILLED_ADD))
    proc = subprocess.Popen([sys.executable, str(script), str(root)], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "WRITTEN"
        tmp_dirs = [p for p in root.iterdir() if ".tmp-" in p.name]
        assert len(tmp_dirs) == 1 and (tmp_dirs[0] / MANIFEST).is_file()
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    assert _snapshot(root / "notes") == before
    index = ambiqa.open_index("notes", root=root)
    assert index.fingerprint == built.fingerprint and index.get("zebra") is None
    index.add([ZEBRA])  # the next add works and clears the dead one's leftovers
    assert index.search("striped zebras in Kenya", 1)[0].id == "zebra"
    assert not [p for p in root.iterdir() if ".tmp-" in p.name]


# --- artifacts that name the index ------------------------------------------------------------

def test_an_artifact_compiled_before_the_add_is_told_the_index_changed(root, fresh_dspy):
    built = _build("bm25", root)
    prog = VanillaRAG(retriever=built.retriever, k=2)
    demo = dspy.Example(question="Q?", passages="[1] P", pairs=[]).with_inputs("question")
    prog.named_predictors()[0][1].demos = [demo]
    art = save_artifact(root.parent / "art.json", prog, {
        "program": "vanilla_rag", "program_config": prog.config(), "ambiqa_version": "test",
        "lm": "scripted/fake", "retriever": describe(prog.retriever), "metric": "f1",
        "optimizer": {"name": "labeled"}, "created": "2026-01-01T00:00:00+00:00"})
    assert ambiqa.load(art).retriever.fingerprint == built.fingerprint
    after = ambiqa.open_index("notes", root=root).add([ZEBRA])
    with pytest.raises(ArtifactError) as err:
        ambiqa.load(art)
    assert (f"compiled against index {built.fingerprint}, but the retriever at hand is "
            f"{after.fingerprint}") in err.value.message
    assert "1 passage(s) added" in err.value.message
    assert ambiqa.load(art, strict_fingerprint=False).retriever.get("zebra") is not None


# --- what cannot be added to ------------------------------------------------------------------

def test_sharded_and_missing_indexes_are_refused_naming_the_fix(root):
    root.mkdir(parents=True)
    (root / "big.shards.json").write_text(json.dumps({"kind": "dense", "shards": []}))
    with pytest.raises(RetrievalIndexError, match="sharded") as err:
        add_passages("big", [ZEBRA], root=root)
    assert "\n" not in err.value.message and "--shards N" in err.value.hint
    assert "ambiqa index CORPUS --name big --kind dense" in err.value.hint
    with pytest.raises(RetrievalIndexError, match="no index named 'nope'"):
        add_passages("nope", [ZEBRA], root=root)


def test_a_dense_index_refuses_passages_from_another_encoder(root):
    _build("dense", root)
    with pytest.raises(RetrievalIndexError, match="built with encoder 'hash-encoder'"):
        ambiqa.open_index("notes", root=root).add([ZEBRA], encoder=HashEncoder(name="other"))


def test_a_large_dense_index_keeps_its_hnsw_graph_in_step(root, monkeypatch):
    from ambiqa.retrieval.ann import ANN_FILE, ANN_MIN_ENV

    monkeypatch.setenv(ANN_MIN_ENV, "3")  # "large" from 3 passages on
    _build("dense", root)
    index = ambiqa.open_index("notes", root=root)
    assert index.retriever.ann is not None and index.retriever.ann.ntotal == 3
    index.add([ZEBRA])
    assert index.retriever.ann.ntotal == 4 and _manifest(root)["ann"]["n"] == 4
    reopened = DenseRetriever.load(root / "notes")
    assert reopened.ann.ntotal == 4 and (root / "notes" / ANN_FILE).is_file()
    assert reopened.search("striped zebras in Kenya", 1)[0].id == "zebra"
    index.add([{"id": "zebra", "title": "Zebra", "text": "Zebras bark at night."}],
              replace=True)  # a replaced vector: the graph is rebuilt
    assert DenseRetriever.load(root / "notes").search("bark at night", 1)[0].id == "zebra"


# --- files as the CLI and Python take them ----------------------------------------------------

def test_files_in_every_corpus_format_and_single_text_files(tmp_path):
    notes = tmp_path / "notes"
    (notes / "sub").mkdir(parents=True)
    (notes / "sub" / "zebra.md").write_text("Zebras are striped.\n")
    (notes / "okapi.txt").write_text("Okapis live in the Congo.")
    jsonl = tmp_path / "more.jsonl"
    jsonl.write_text(json.dumps({"id": "j1", "text": "From JSONL."}) + "\n")
    csv = tmp_path / "more.csv"
    csv.write_text("id,title,text\nc1,C,From CSV.\n")
    got = list(iter_corpora([notes / "sub" / "zebra.md", jsonl, csv]))
    assert [p.id for p in got] == ["zebra.md", "j1", "c1"]
    assert got[0].title == "zebra" and got[0].text == "Zebras are striped."
    got = list(iter_corpora([notes / "sub" / "zebra.md"], base=notes))
    assert [p.id for p in got] == ["sub/zebra.md"]  # the id a build over notes/ gives
    assert [p.id for p in iter_corpora([notes])] == ["okapi.txt", "sub/zebra.md"]
    assert [p.id for p in iter_corpora([notes / "okapi.txt"], split_words=2)] == \
        ["okapi.txt#1", "okapi.txt#2", "okapi.txt#3"]
    with pytest.raises(DataError, match="not inside"):
        list(iter_corpora([notes / "okapi.txt"], base=notes / "sub"))
    with pytest.raises(DataError, match="duplicate passage id 'j1'"):
        list(iter_corpora([jsonl, jsonl]))
    with pytest.raises(DataError, match="split_words applies"):
        list(iter_corpora([jsonl], split_words=10))
    with pytest.raises(DataError, match="corpus file not found"):
        list(iter_corpora([tmp_path / "missing.jsonl"]))


@pytest.mark.parametrize("kind", KINDS)
def test_the_cli_adds_files(kind, root, tmp_path, capsys):
    notes = tmp_path / "notes"
    notes.mkdir()
    for row in ROWS:
        (notes / f"{row['id']}.md").write_text(row["text"])
    assert main(["index", str(notes), "--name", "notes", "--kind", kind]) == 0
    fingerprint = ambiqa.open_index("notes").fingerprint
    (notes / "zebra.md").write_text(ZEBRA["text"])
    more = tmp_path / "more.jsonl"
    more.write_text(json.dumps({"id": "okapi", "text": "Okapis live in the Congo."}) + "\n")
    capsys.readouterr()
    assert main(["index", "add", "notes", str(notes / "zebra.md"), str(more),
                 "--base", str(notes)]) == 0
    out = capsys.readouterr().out
    index = ambiqa.open_index("notes")
    assert f"index 'notes' ({kind}): 2 added, 3 -> 5 passages; fingerprint {fingerprint} -> " \
           f"{index.fingerprint}" in out
    assert index.search("striped zebras in Kenya", 1)[0].id == "zebra.md"
    assert index.search("okapis Congo", 1)[0].id == "okapi"
    assert _manifest(root)[ADDITIONS][0]["source"] == f"{notes / 'zebra.md'}, {more}"

    before = _snapshot(root / "notes")  # the same file again: refused, one line, exit 2
    assert main(["index", "add", "notes", str(notes / "zebra.md"), "--index-root",
                 str(root)]) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[0] == ("ambiqa: error: passage id 'zebra.md' is already in index "
                                   "'notes'; nothing was added")
    assert _snapshot(root / "notes") == before
    (notes / "zebra.md").write_text("Zebras are horses in pyjamas.")
    assert main(["index", "add", "notes", str(notes / "zebra.md"), "--replace"]) == 0
    assert "0 added, 1 replaced, 5 -> 5 passages" in capsys.readouterr().out
    assert ambiqa.open_index("notes").get("zebra.md").text == "Zebras are horses in pyjamas."


def test_the_cli_refuses_a_sharded_index_in_one_line_and_every_flag_has_help(root, capsys):
    root.mkdir(parents=True)
    (root / "big.shards.json").write_text(json.dumps({"kind": "colbert", "shards": []}))
    assert main(["index", "add", "big", str(root / "nothing.jsonl")]) == 2
    first, fix = capsys.readouterr().err.splitlines()[:2]
    assert first.startswith("ambiqa: error: index 'big' is sharded")
    assert "ambiqa index CORPUS --name big --kind colbert --shards N" in fix
    parser = index_add_parser()
    assert [a.dest for a in parser._actions if not a.help] == []
    with pytest.raises(SystemExit):
        main(["index", "--help"])
    assert "ambiqa index add NAME FILES" in " ".join(capsys.readouterr().out.split())
    with pytest.raises(SystemExit) as done:
        main(["index", "add", "--help"])
    assert done.value.code == 0 and "--replace" in capsys.readouterr().out


def test_an_add_waits_for_another_add_to_the_same_index(root):
    """Two adds at once: the second waits for the lock and adds to the first one's result."""
    _build("bm25", root)
    errors: list[BaseException] = []

    def add(index, row):
        try:
            index.add([row])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    rows = [ZEBRA, {"id": "okapi", "text": "Okapis live in the Congo."}]
    threads = [threading.Thread(target=add, args=(ambiqa.open_index("notes", root=root), r))
               for r in rows]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    index = ambiqa.open_index("notes", root=root)
    assert index.n_passages == 5 and index.get("zebra") and index.get("okapi")


def test_a_retrieval_cache_never_answers_for_the_index_before_the_add(root, tmp_path,
                                                                      monkeypatch):
    """The on-disk retrieval cache is keyed by the fingerprint, which the add changes."""
    from ambiqa.retrieval.cache import CachedRetriever
    from ambiqa.retrieval.factory import CACHE_ENV

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "rcache"))
    _build("bm25", root)
    index = ambiqa.open_index("notes", root=root)
    assert isinstance(index.retriever, CachedRetriever)
    assert [p.id for p in index.search("striped zebras in Kenya", 1)] == []  # cached
    built = index.fingerprint
    index.add([ZEBRA])
    assert isinstance(index.retriever, CachedRetriever)  # still cached, under the new key
    assert index.search("striped zebras in Kenya", 1)[0].id == "zebra"
    reopened = ambiqa.open_index("notes", root=root)
    assert isinstance(reopened.retriever, CachedRetriever)
    assert reopened.search("striped zebras in Kenya", 1)[0].id == "zebra"
    assert changes_since(reopened.retriever, built).startswith("1 passage(s) added")


def test_a_rebuild_waits_for_an_add_under_way(root):
    """``ambiqa.index`` takes the add's lock: a rebuild never renames over an add's result
    mid-way (nor an add over a rebuild's)."""
    _build("bm25", root)
    done = threading.Event()

    def rebuild():
        ambiqa.index([ZEBRA], name="notes", kind="bm25", index_root=root)
        done.set()

    with index_lock(root, "notes"):  # what an add holds while it writes and renames
        thread = threading.Thread(target=rebuild)
        thread.start()
        assert not done.wait(1.0)
        assert ambiqa.open_index("notes", root=root).n_passages == 3
    thread.join(timeout=60)
    assert done.is_set() and ambiqa.open_index("notes", root=root).n_passages == 1
    assert not [p for p in root.iterdir() if p.name.startswith(".")]  # no lock file here
