"""The CLI turns user errors into one clear line and exit code 2 — never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ambiqa.cli import EXIT_USER_ERROR, main


@pytest.mark.parametrize("argv, message", [
    (["ask", ""], "question is empty"),
    (["ask", "   "], "question is empty"),
    (["ask", "x" * 50_000], "characters long"),
    (["ask", "Who?", "--artifact", "missing.json"], "artifact not found"),
    (["ask", "Who?", "--program", "vanila_rag", "--index", "x"], "did you mean 'vanilla_rag'"),
    (["compile", "vanila_rag", "--train", "asqa:train"], "did you mean 'vanilla_rag'"),
    (["compile", "vanilla_rag", "--train", "asqa:dev"], "not a training split"),
    (["compile", "vanilla_rag", "--train", "nosuchset:train"], "unknown"),
    (["compile", "vanilla_rag", "--threads", "0"], "--threads must be a positive integer"),
    (["evaluate", "vanilla_rag", "--data", "asqa:nosplit", "--out", "runs/x"], "asqa"),
    (["index", "no/such/corpus.jsonl", "--name", "x"], "not found"),
    (["ask", "Who?", "--program", "vanilla_rag", "--index", "no-such-index",
      "--index-root", "/nonexistent"], "no-such-index"),
    (["ask", "Who?", "--program", "closed_book", "--program-config", "{bad"], "not valid JSON"),
])
def test_user_errors_exit_2_with_a_message(argv, message, capsys):
    assert main(argv) == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_invalid_artifact_json(tmp_path, capsys):
    bad = tmp_path / "a.json"
    bad.write_text("{not json")
    assert main(["export", str(bad)]) == EXIT_USER_ERROR
    assert "valid JSON" in capsys.readouterr().err
    assert main(["ask", "Who?", "--artifact", str(bad)]) == EXIT_USER_ERROR


def test_cli_subprocess_has_no_traceback_and_nonzero_exit():
    res = subprocess.run([sys.executable, "-m", "ambiqa.cli", "ask", ""], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == EXIT_USER_ERROR
    assert "question is empty" in res.stderr and "Traceback" not in res.stderr


def test_help_lists_commands(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for cmd in ("index", "compile", "evaluate", "export", "ask", "demo", "doctor"):
        assert cmd in out


def test_index_builds_a_bm25_index_that_opens_and_refuses_path_names(tmp_path, capsys):
    from ambiqa.data import demo_corpus_path
    from ambiqa.retrieval.factory import open_retriever

    rc = main(["index", str(demo_corpus_path()), "--name", "demo-bm25", "--kind", "bm25",
               "--index-root", str(tmp_path)])
    assert rc == 0
    assert [p.name for p in tmp_path.iterdir()] == ["demo-bm25"]  # no temp dir left behind
    hits = open_retriever("bm25:demo-bm25", root=tmp_path).search("Belgium language", k=3)
    assert len(hits) == 3
    rc = main(["index", str(demo_corpus_path()), "--name", "../escape", "--kind", "bm25",
               "--index-root", str(tmp_path)])
    assert rc == EXIT_USER_ERROR and "invalid index name" in capsys.readouterr().err


def test_doctor_prepare_assembles_the_model_and_builds_the_extensions_first(monkeypatch,
                                                                            capsys):
    """``ambiqa doctor --prepare`` (scripts/demo.sh runs it after the install) does the
    first run's one-time work, then the checks."""
    import ambiqa.cli.retrieval_cmds as retrieval_cmds
    import ambiqa.evaluation.shipped_reader as shipped_reader
    import ambiqa.lm.models as models
    import ambiqa.retrieval.colbert.extensions as extensions
    from ambiqa.cli import main

    calls = []
    monkeypatch.setattr(models, "assemble_model", lambda name: calls.append(name) or "m.gguf")
    monkeypatch.setattr(extensions, "build_extensions",
                        lambda: calls.append("extensions") or ["ColBERT"])
    monkeypatch.setattr(retrieval_cmds, "run_checks",
                        lambda **kw: calls.append("checks") or True)
    monkeypatch.setattr(shipped_reader, "install_shipped_reader",
                        lambda: calls.append("reader") or "minilm-asqa-v4")
    assert main(["doctor", "--prepare"]) == 0
    assert calls == [models.DEFAULT_MODEL, "extensions", "reader", "checks"]
    assert "prepared: colbert-ai's C++ extensions for ColBERT" in capsys.readouterr().out
