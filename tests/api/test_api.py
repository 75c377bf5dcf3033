"""The Python API: corpora as users have them, an index named once, question files, the
verbs returning typed results, artifacts that record and reopen their index."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

import ambiqa
from ambiqa.data.corpus import load_corpus, stable_id
from ambiqa.errors import ArtifactError, ConfigError, DataError, RetrievalIndexError
from ambiqa.testing import vanilla_rag_lm

ROWS = [("Paris", "Paris is the capital of France."), ("Lyon", "Lyon is a city in France."),
        ("Nice", "Nice is on the French Riviera.")]


# --- corpora ---------------------------------------------------------------------------------

def test_jsonl_with_contents_and_no_title_or_id(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [
        {"contents": '"Paris"\nParis is the capital of France.'},  # FlashRAG's layout
        {"text": "Lyon is a city in France."},
        {"id": 7, "title": "Nice", "text": "Nice is on the Riviera."}]) + "\n")
    got = load_corpus(path)
    assert [(p.title, p.text) for p in got][:2] == [("Paris", "Paris is the capital of France."),
                                                    ("", "Lyon is a city in France.")]
    assert got[1].id == stable_id("", "Lyon is a city in France.") and got[2].id == "7"
    assert load_corpus(path)[1].id == got[1].id  # stable across reads


@pytest.mark.parametrize("delim,suffix", [(",", "csv"), ("\t", "tsv")])
def test_csv_and_tsv_with_a_header(tmp_path, delim, suffix):
    path = tmp_path / f"c.{suffix}"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, delimiter=delim)
        w.writerow(["title", "passage"])
        w.writerows(ROWS)
    assert [p.title for p in load_corpus(path)] == ["Paris", "Lyon", "Nice"]
    (tmp_path / f"n.{suffix}").write_text(f"a{delim}b\n1{delim}2\n")
    with pytest.raises(DataError, match="lacks column"):
        load_corpus(tmp_path / f"n.{suffix}")


def test_folder_of_text_files_whole_or_split(tmp_path):
    (tmp_path / "notes" / "sub").mkdir(parents=True)
    (tmp_path / "notes" / "a.txt").write_text(" ".join(f"w{i}" for i in range(250)))
    (tmp_path / "notes" / "sub" / "b_c.md").write_text("Some markdown.")
    (tmp_path / "notes" / "skip.pdf").write_bytes(b"%PDF")
    whole = load_corpus(tmp_path / "notes")
    assert [(p.id, p.title) for p in whole] == [("a.txt", "a"), ("sub/b_c.md", "b c")]
    split = load_corpus(tmp_path / "notes", split_words=100)
    assert [p.id for p in split] == ["a.txt#1", "a.txt#2", "a.txt#3", "sub/b_c.md#1"]
    assert len(split[0].text.split()) == 100 and len(split[2].text.split()) == 50


def test_wrong_formats_name_what_was_seen_and_what_is_accepted(tmp_path):
    csvish = tmp_path / "c.jsonl"
    csvish.write_text("title,text\nParis,Paris is a city.\n")
    with pytest.raises(DataError, match="looks like CSV.*accepted: JSONL") as err:
        load_corpus(csvish)
    assert "\n" not in err.value.message
    with pytest.raises(DataError, match=r"'\.pdf' file; accepted: JSONL"):
        load_corpus(tmp_path / "x.pdf" if (tmp_path / "x.pdf").write_bytes(b"%") else None)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no .txt or .md files"):
        load_corpus(tmp_path / "empty")
    (tmp_path / "c.parquet").write_bytes(b"PAR1")
    with pytest.raises(DataError, match="pyarrow|not a readable Parquet file"):
        load_corpus(tmp_path / "c.parquet")


def test_parquet_when_pyarrow_is_installed(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    table = pa.table({"title": [t for t, _ in ROWS], "text": [x for _, x in ROWS]})
    pq.write_table(table, tmp_path / "c.parquet")
    assert [p.title for p in load_corpus(tmp_path / "c.parquet")] == ["Paris", "Lyon", "Nice"]


# --- an index named once ---------------------------------------------------------------------

@pytest.fixture()
def bm25(tmp_path):
    return ambiqa.index([{"title": t, "text": x} for t, x in ROWS] + ["Texas has a Paris too."],
                        name="towns", kind="bm25", index_root=tmp_path / "idx")


def test_index_from_a_list_and_open_by_name_alone(bm25, tmp_path):
    assert bm25.spec == "bm25:towns" and bm25.n_passages == 4
    opened = ambiqa.open_index("towns", root=tmp_path / "idx")
    assert opened.fingerprint == bm25.fingerprint and opened.index_name == "towns"
    assert opened.search("capital of France", 1)[0].title == "Paris"
    assert ambiqa.open_index("bm25:towns", root=tmp_path / "idx").fingerprint == bm25.fingerprint
    with pytest.raises(RetrievalIndexError, match="no index named 'nope'.*") as err:
        ambiqa.open_index("nope", root=tmp_path / "idx")
    assert "towns" in err.value.hint  # the indexes that are there


def test_cli_index_name_once(tmp_path, capsys):
    from ambiqa.cli import main

    notes = tmp_path / "notes"
    notes.mkdir()
    for title, text in ROWS:
        (notes / f"{title}.txt").write_text(text)
    root = str(tmp_path / "idx")
    assert main(["index", str(notes), "--name", "n", "--kind", "bm25",
                 "--index-root", root]) == 0
    assert "--index n" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["index", "--help"])
    assert "a folder of .txt / .md files" in capsys.readouterr().out


# --- questions, evaluate, compile, export, load ----------------------------------------------

def _questions(tmp_path: Path) -> Path:
    path = tmp_path / "questions.jsonl"
    rows = [{"question": "What is the capital of France?", "answers": ["Paris"]},
            {"question": "Which city is in France?", "answers": ["Lyon"]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_evaluate_a_question_file_picks_metrics_from_its_fields(bm25, tmp_path, fresh_dspy):
    result = ambiqa.evaluate("vanilla_rag", _questions(tmp_path), lm=vanilla_rag_lm(),
                             retriever=bm25.retriever, out=tmp_path / "run")
    assert set(result.metrics) == {"em", "f1"} and result.n == 2
    assert result.spec.data.startswith("jsonl:")
    assert json.loads((tmp_path / "run" / "run.json").read_text())["metrics"] == ["em", "f1"]
    with pytest.raises(ConfigError, match="unknown setting"):
        ambiqa.evaluate("vanilla_rag", _questions(tmp_path), nope=1)


def test_compile_save_load_reopens_the_recorded_index(bm25, tmp_path, fresh_dspy):
    from ambiqa.data import load_dataset

    train = load_dataset("demo:train:4")
    art = tmp_path / "rag.json"
    result = ambiqa.compile("vanilla_rag", train, optimizer="labeled", k=1, out=art,
                            lm=vanilla_rag_lm(), retriever=bm25.retriever, select=False)
    assert isinstance(result, ambiqa.CompileResult) and result.path == art
    assert result.manifest["retriever"] == {"kind": "bm25", "index": "towns",
                                            "fingerprint": bm25.fingerprint}
    import os

    os.environ["AMBIQA_INDEX_ROOT"] = str(tmp_path / "idx")
    try:
        prog = ambiqa.load(art)  # no retriever given: the recorded index is opened
        assert prog.retriever.fingerprint == bm25.fingerprint
        ambiqa.index(["Other text."], name="towns", kind="bm25")  # rebuilt: another corpus
        with pytest.raises(ArtifactError, match="compiled against index"):
            ambiqa.load(art)
        assert ambiqa.load(art, strict_fingerprint=False).retriever.index_name == "towns"
        import shutil

        shutil.rmtree(tmp_path / "idx" / "towns")
        with pytest.raises(ArtifactError, match="index 'towns' .*cannot be opened"):
            ambiqa.load(art)
    finally:
        os.environ.pop("AMBIQA_INDEX_ROOT")
    exported = ambiqa.export(art, format="json")
    assert isinstance(exported, ambiqa.ExportResult) and exported.prompts
    assert exported.manifest["optimizer"]["name"] == "labeled"


def test_a_target_is_resolved_in_one_place(tmp_path):
    from ambiqa.api.targets import is_file_target, resolve

    assert is_file_target("x.json") and not is_file_target("diva")
    with pytest.raises(ConfigError, match="needs a retriever"):
        resolve("diva")
    with pytest.raises(ConfigError, match="did you mean 'diva'"):
        resolve("divaa")
    assert resolve("closed_book").kind == "program"
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "other"}')
    with pytest.raises(ArtifactError, match="neither an ambiqa artifact nor a saved program"):
        resolve(bad)


def test_import_is_light():
    import subprocess
    import sys

    code = ("import sys, ambiqa; heavy = [m for m in ('dspy', 'torch', 'litellm') "
            "if m in sys.modules]; print(heavy); ambiqa.Diva; print('dspy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["[]", "True"]


def test_an_artifact_without_an_index_says_so_at_load(tmp_path, fresh_dspy):
    from ambiqa.data import load_dataset

    def search(query, k):
        return [x for _, x in ROWS][:k]

    art = tmp_path / "cb.json"
    ambiqa.compile(ambiqa.VanillaRAG(retriever=search), load_dataset("demo:train:2"),
                   optimizer="labeled", k=1, out=art, lm=vanilla_rag_lm())
    with pytest.raises(ArtifactError, match="records no index"):
        ambiqa.load(art)
    assert ambiqa.load(art, retriever=search).retriever.fn is search


def test_tune_takes_keywords_and_returns_its_result(bm25, tmp_path, fresh_dspy):
    with pytest.raises(ConfigError, match="unknown setting.*no_such_knob"):
        ambiqa.tune("vanilla_rag", study="s", storage="sqlite://", no_such_knob=1)
    result = ambiqa.tune("vanilla_rag", study="s", storage=f"sqlite:///{tmp_path}/t.db",
                         trials=1, train="demo:train:4", teleprompters=("labeled",),
                         n_val=2, metric="str-em", lm=vanilla_rag_lm(), retriever=bm25.retriever,
                         out=tmp_path / "t.json")
    assert result.n_complete == 1 and (tmp_path / "t.json").is_file()
