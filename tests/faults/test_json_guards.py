"""One guarded JSON reader everywhere (issue 42, "guards with holes").

Before: a 10,000-deep JSON document ended in a RecursionError traceback in nine places (data
files, artifacts through ``ask``/``export``/``evaluate``, index manifests, corpora, a part's
``run.json``), and a 20 MB ``prog.save()`` file loaded in ``ask``/``export`` past the 16 MiB
artifact cap. Now every JSON file or line read from a user or from disk goes through
:mod:`ambiqa.jsonio` (depth counted on the text before parsing, size on the file before
reading): a one-line error and exit 2, never a traceback.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from tests.faults.conftest import cli_env, run_cli, small_passages

pytestmark = pytest.mark.fault("Bad inputs")

DEEP = "[" * 10_000 + "]" * 10_000
DEAD_LM = ["--lm", "openai/x", "--api-base", "http://127.0.0.1:9/v1"]


def _main(argv: list[str]) -> tuple[int, str]:
    from ambiqa.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    return code, err.getvalue()


def _one_line_exit_2(code: int, err: str, named: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err and "RecursionError" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines and lines[0].startswith("ambiqa: error:"), err
    assert len(lines) <= 2, err  # the message and its fix
    assert named in lines[0], (named, err)


def _deep_question_file(tmp_path: Path) -> Path:
    path = tmp_path / "deep.jsonl"
    path.write_text('{"question": "Who?", "answers": ["x"]}\n'
                    '{"question": "Who?", "answers": ' + DEEP + "}\n")
    return path


def _bm25_index(root: Path, name: str = "tiny") -> Path:
    from ambiqa.retrieval.bm25 import BM25Retriever

    BM25Retriever.build(small_passages(), root / name)
    return root / name


# ---- the reader itself ---------------------------------------------------------------------
def test_guarded_reader_limits(tmp_path):
    from ambiqa.errors import DataError
    from ambiqa.jsonio import depth_ok, loads, read_json

    assert depth_ok("[" * 64 + "]" * 64) and not depth_ok("[" * 65 + "]" * 65)
    assert depth_ok('{"a": "[[[[[[[[[[ \\" [[[["}', 1)  # brackets inside strings do not nest
    with pytest.raises(DataError, match="nests deeper than 64"):
        loads(DEEP, source="x")
    with pytest.raises(DataError, match="not UTF-8"):
        loads(b"\xff\xfe{}", source="x")
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"a": "x" * 3000}))
    with pytest.raises(DataError, match=r"over the 0.00195312 MiB cap for a manifest"):
        read_json(big, max_bytes=2048, what="manifest")
    assert read_json(big, max_bytes=None)["a"]


# ---- the nine places -----------------------------------------------------------------------
def test_deep_data_file_through_evaluate(tmp_path, record_property):
    data = _deep_question_file(tmp_path)
    code, err = _main(["evaluate", "closed_book", "--data", f"jsonl:{data}", "--out",
                       str(tmp_path / "run"), *DEAD_LM])
    _one_line_exit_2(code, err, "line 2")
    record_property("cases", 1)


def test_deep_whole_json_data_file(tmp_path):
    from ambiqa.data import load_dataset
    from ambiqa.errors import DataError

    path = tmp_path / "deep.json"
    path.write_text('[{"question": "Who?", "answers": ' + DEEP + "}]")
    with pytest.raises(DataError, match="nests deeper"):
        load_dataset(f"jsonl:{path}")


def test_deep_corpus_through_index(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps(small_passages()[0].to_dict()) + "\n"
                      '{"id": "p9", "text": ' + DEEP + "}\n")
    code, err = _main(["index", str(corpus), "--name", "x", "--kind", "bm25",
                       "--index-root", str(tmp_path / "ix")])
    _one_line_exit_2(code, err, "line 2")
    assert not (tmp_path / "ix" / "x").exists()


@pytest.mark.parametrize("command", ["export", "ask", "evaluate"])
@pytest.mark.parametrize("kind", ["artifact", "saved"])
def test_deep_program_file(tmp_path, command, kind):
    path = tmp_path / "deep.json"
    head = ('{"format": "ambiqa-artifact", "schema_version": 2, "manifest": '
            if kind == "artifact" else '{"metadata": {}, "predict": ')
    path.write_text(head + DEEP + "}")
    argv = {"export": ["export", str(path)],
            "ask": ["ask", "Who?", "--artifact", str(path), *DEAD_LM],
            "evaluate": ["evaluate", str(path), "--data", "demo:dev:2", "--out",
                         str(tmp_path / "run"), "--no-cache", *DEAD_LM]}[command]
    code, err = _main(argv)
    _one_line_exit_2(code, err, "nests deeper")


@pytest.mark.parametrize("command", ["export", "ask"])
def test_oversized_saved_program_is_refused(tmp_path, command):
    """A plain ``prog.save()`` file (not an ambiqa artifact) over the 16 MiB cap: refused with
    the variable that raises the cap, as an artifact is."""
    path = tmp_path / "big.json"
    demo = {"question": "q", "answer": "x" * 1000}
    path.write_text(json.dumps({"metadata": {}, "ambiqa": {"program": "closed_book"},
                                "predict": {"demos": [demo] * 17_500}}))
    assert path.stat().st_size > 16 * 2**20
    argv = ["export", str(path)] if command == "export" else [
        "ask", "Who?", "--artifact", str(path), *DEAD_LM]
    code, err = _main(argv)
    _one_line_exit_2(code, err, "over the 16 MiB cap")
    assert "AMBIQA_MAX_ARTIFACT_MB=" in err


@pytest.mark.parametrize("where", ["bm25-manifest", "shard-list", "colbert-manifest"])
def test_deep_index_manifest(tmp_path, where):
    from ambiqa.errors import RetrievalIndexError
    from ambiqa.retrieval.factory import open_retriever

    root = tmp_path / "indexes"
    if where == "bm25-manifest":
        index = _bm25_index(root)
        (index / "manifest.json").write_text('{"kind": "bm25", "x": ' + DEEP + "}")
        spec = "tiny"
    elif where == "shard-list":
        root.mkdir()
        (root / "wiki.shards.json").write_text('{"kind": "bm25", "shards": ' + DEEP + "}")
        spec = "wiki"
    else:
        from ambiqa.retrieval.colbert.manifest import MANIFEST

        (root / "cb").mkdir(parents=True)
        (root / "cb" / MANIFEST).write_text('{"format": 1, "x": ' + DEEP + "}")
        spec = "cb"
    with pytest.raises(RetrievalIndexError, match="nests deeper") as err:
        open_retriever(spec, root=root)
    assert "ambiqa index CORPUS --name" in str(err.value)


def test_deep_verified_cache_is_ignored(tmp_path, monkeypatch):
    """A damaged ``.verified.json`` (a cache) is no error: the files are hashed again."""
    from ambiqa.retrieval import integrity
    from ambiqa.retrieval.bm25 import BM25Retriever

    monkeypatch.setattr(integrity, "ALWAYS_HASH_BYTES", 0)
    index = _bm25_index(tmp_path)
    (index / ".verified.json").write_text(DEEP)
    assert BM25Retriever.load(index).search("Weasley", 2)


def _part(tmp_path: Path, name: str, part: str, ids: list[str]) -> Path:
    run = tmp_path / name
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"program": "closed_book", "data": "demo:dev:4",
                                              "metrics": ["em"], "reader": None, "lm": None,
                                              "part": part, "part_ids": ids}))
    (run / "results.jsonl").write_text("".join(
        json.dumps({"id": i, "question": "q", "prediction": {"answer": "x"}, "error": None,
                    "metrics": {"em": 1.0}, "cost": {}}) + "\n" for i in ids))
    return run


def test_deep_part_run_json_through_merge(tmp_path):
    a = _part(tmp_path, "a", "1/2", ["q1", "q2"])
    b = _part(tmp_path, "b", "2/2", ["q3", "q4"])
    (b / "run.json").write_text('{"part": "2/2", "x": ' + DEEP + "}")
    code, err = _main(["merge", str(a), str(b), "--out", str(tmp_path / "m")])
    _one_line_exit_2(code, err, "nests deeper")
    assert not (tmp_path / "m").exists() or not any((tmp_path / "m").iterdir())


@pytest.mark.parametrize("name", ["run.json", "summary.json"])
def test_deep_run_files_through_report(tmp_path, name):
    run = _part(tmp_path, "r", "1/1", ["q1", "q2"])
    if name == "summary.json":  # a run without run.json: its summary's copy is optional
        (run / "run.json").unlink()
        (run / "summary.json").write_text('{"run": ' + DEEP + "}")
        code, err = _main(["report", str(run), "--no-plots"])
        assert code == 0 and "Traceback" not in err, err
        return
    (run / "run.json").write_text(DEEP)
    code, err = _main(["report", str(run), "--no-plots"])
    _one_line_exit_2(code, err, "nests deeper")


def test_deep_program_config_option():
    code, err = _main(["ask", "Who?", "--program", "closed_book", "--program-config",
                       '{"k": ' + DEEP + "}", *DEAD_LM])
    _one_line_exit_2(code, err, "--program-config nests deeper")


def test_deep_inputs_in_a_subprocess_print_no_traceback(tmp_path, record_property):
    """Through the real entry point: exit 2, one line on stderr."""
    env = cli_env(tmp_path)
    data = _deep_question_file(tmp_path)
    deep = tmp_path / "deep.json"
    deep.write_text('{"metadata": ' + DEEP + "}")
    cases = [["export", str(deep)],
             ["evaluate", "closed_book", "--data", f"jsonl:{data}", "--out",
              str(tmp_path / "run"), *DEAD_LM]]
    for argv in cases:
        res = run_cli(argv, env, timeout=120)
        assert res.returncode == 2, (argv, res.stderr[-2000:])
        assert "Traceback" not in res.stderr and res.stderr.startswith("ambiqa: error:")
    record_property("cases", len(cases))


def test_every_json_read_goes_through_the_guard():
    """No ``json.load(s)`` of a file's text is left outside the guarded reader in the modules
    that read user or on-disk JSON (a new one would reopen the hole)."""
    import re

    root = Path(__file__).resolve().parents[2] / "ambiqa"
    guarded = ["data/_io.py", "retrieval/factory.py", "retrieval/sharded.py",
               "retrieval/colbert/manifest.py", "retrieval/dense.py", "retrieval/ann.py",
               "retrieval/cache.py", "retrieval/integrity.py", "evaluation/reports/merge.py",
               "evaluation/reports/report.py", "evaluation/extractive.py", "api/targets.py",
               "doctor.py"]
    pattern = re.compile(r"json\.loads?\((?!json\.dumps)")
    left = [f"{rel}:{n}" for rel in guarded
            for n, line in enumerate((root / rel).read_text().splitlines(), start=1)
            if pattern.search(line)]
    assert not left, left
