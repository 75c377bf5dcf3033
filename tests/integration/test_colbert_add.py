"""Adding passages to a real ColBERT index (colbert-ai 0.2.22's IndexUpdater on CPU, issue 43
item 2): searched before and after, the fingerprint changed, the hashes and colbert-ai's own
metadata true on reopen, a duplicate or a replacement refused in one line, the CLI, and a
failed add that leaves the index as it was.

One 24-passage index is built per module (~15 s on 2 cores) and copied for each test; each add
loads the checkpoint once (~10 s).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import ambiqa
from ambiqa.cli import main
from ambiqa.errors import DataError, RetrievalIndexError
from ambiqa.jsonio import read_json
from ambiqa.retrieval.adding import ADDITIONS
from ambiqa.retrieval.colbert import MANIFEST, ColBERTRetriever

pytestmark = pytest.mark.integration

TOPICS = ["Paris is the capital of France and sits on the Seine.",
          "Berlin is the capital of Germany.",
          "Mount Everest is the highest mountain above sea level.",
          "The Amazon is the largest river by discharge of water.",
          "Marie Curie won Nobel Prizes in physics and chemistry.",
          "Python is a programming language created by Guido van Rossum.",
          "Rome is the capital city of Italy.",
          "The Nile flows north through Egypt into the Mediterranean.",
          "Tokyo is the capital of Japan and its largest city.",
          "The Pacific is the largest and deepest ocean on Earth.",
          "Johann Sebastian Bach composed the Brandenburg Concertos.",
          "The cheetah is the fastest land animal.",
          "Photosynthesis turns light, water and carbon dioxide into sugar.",
          "The Great Wall of China stretches thousands of kilometres.",
          "Leonardo da Vinci painted the Mona Lisa.",
          "The Sahara is the largest hot desert in the world.",
          "Isaac Newton described the laws of motion and gravity.",
          "Mercury is the planet closest to the Sun.",
          "The violin has four strings tuned in fifths.",
          "Antarctica is the coldest continent.",
          "William Shakespeare wrote Hamlet and Macbeth.",
          "The blue whale is the largest animal ever known.",
          "Mozart was born in Salzburg in 1756.",
          "Honey bees communicate by dancing."]
ROWS = [{"id": f"p{i}", "title": text.split()[0 if i % 2 else 1], "text": text}
        for i, text in enumerate(TOPICS)]
ZEBRA = {"id": "zebra", "title": "Zebra",
         "text": "Zebras are African equines with black-and-white striped coats grazing the "
                 "savanna of Kenya."}
ZEBRA_Q = "striped zebras on the savanna of Kenya"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("colbert-add") / "base"
    ambiqa.index(ROWS, name="notes", kind="colbert", index_root=root)
    return root


@pytest.fixture()
def root(built, tmp_path, monkeypatch) -> Path:
    root = tmp_path / "idx"
    shutil.copytree(built, root)
    monkeypatch.setenv("AMBIQA_INDEX_ROOT", str(root))
    return root


def _snapshot(index_dir: Path) -> dict[str, bytes]:  # colbert.log is appended to by searches
    return {p.name: p.read_bytes() for p in sorted(index_dir.iterdir())
            if p.is_file() and p.name != "colbert.log"}


def test_an_added_passage_is_found_and_the_index_stays_consistent(root):
    index = ambiqa.open_index("notes", root=root)
    before = index.fingerprint
    assert index.search("capital of Japan", 1)[0].id == "p8"
    assert "zebra" not in [p.id for p in index.search(ZEBRA_Q, 3)]
    index.add([ZEBRA])
    assert index.added == {"added": 1, "replaced": 0, "fingerprint_before": before}
    assert index.n_passages == 25 and index.fingerprint != before
    assert index.search(ZEBRA_Q, 1)[0].id == "zebra"  # PLAID's candidates (k < n)
    assert index.search(ZEBRA_Q, 100)[0].id == "zebra"  # every passage scored (k >= n)
    assert index.search("capital of Japan", 1)[0].id == "p8"

    reopened = ambiqa.open_index("notes", root=root)  # every file's sha256 checked again
    assert (reopened.n_passages, reopened.fingerprint) == (25, index.fingerprint)
    assert reopened.search(ZEBRA_Q, 1)[0].id == "zebra"
    assert reopened.search("fastest land animal", 1)[0].id == "p11"
    assert reopened.get("zebra").title == "Zebra"

    index_dir = root / "notes"
    manifest = json.loads((index_dir / MANIFEST).read_text())
    (entry,) = manifest[ADDITIONS]
    assert (entry["added"], entry["count"], entry["fingerprint_before"]) == (1, 25, before)
    meta = read_json(index_dir / "metadata.json", max_bytes=None)  # colbert-ai's own record
    doclens = json.loads((index_dir / "doclens.0.json").read_text())
    assert len(doclens) == 25 and meta["num_embeddings"] == sum(doclens)
    assert not [p for p in root.iterdir() if ".tmp-" in p.name or ".old-" in p.name]
    assert set(manifest["files"]) == {p.name for p in index_dir.iterdir() if p.is_file()
                                      and p.name not in (MANIFEST, "colbert.log")
                                      and not p.name.startswith(".")}


def test_duplicates_and_replacements_are_refused_in_one_line(root):
    before = _snapshot(root / "notes")
    index = ambiqa.open_index("notes", root=root)
    with pytest.raises(DataError) as err:
        index.add([ZEBRA, {"id": "p3", "text": "Again."}])
    assert err.value.message == ("passage id 'p3' is already in index 'notes'; nothing was "
                                 "added")
    with pytest.raises(RetrievalIndexError) as err:
        index.add([{"id": "p3", "text": "The Amazon again."}], replace=True)
    assert err.value.message.startswith("cannot replace passages of the ColBERT index 'notes'")
    assert "\n" not in err.value.message
    assert "ambiqa index CORPUS --name notes --kind colbert" in err.value.hint
    assert _snapshot(root / "notes") == before


def test_a_failed_add_leaves_the_index_as_it_was(root, monkeypatch):
    """The copy shares the files colbert-ai only reads (hard links): none is written."""
    before = _snapshot(root / "notes")
    fingerprint = ColBERTRetriever.load(root, "notes").fingerprint

    def fail(index_dir, exclude):  # everything but the manifest is written into the copy
        raise OSError("disk full (simulated)")

    monkeypatch.setattr("ambiqa.retrieval.adding.record_files", fail)
    with pytest.raises(OSError, match="disk full"):
        ambiqa.open_index("notes", root=root).add([ZEBRA])
    assert _snapshot(root / "notes") == before
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == ["notes"]
    assert ambiqa.open_index("notes", root=root).fingerprint == fingerprint


def test_the_cli_adds_a_file(root, tmp_path, capsys):
    more = tmp_path / "more.jsonl"
    more.write_text(json.dumps(ZEBRA) + "\n")
    assert main(["index", "add", "notes", str(more)]) == 0
    out = capsys.readouterr().out
    assert "index 'notes' (colbert): 1 added, 24 -> 25 passages; fingerprint colbert:notes:" in out
    assert ambiqa.open_index("notes").search(ZEBRA_Q, 1)[0].id == "zebra"
