"""What the commands print is true and in the right place (issue 43): a plain ``.save()``
exported says what it is, compare's warnings come first, and DSPy's warnings become one
ambiqa note each."""

from __future__ import annotations

import dataclasses
import json
import logging

import pytest

from ambiqa.cli import main
from ambiqa.cli.notes import TRUNCATED, folded_dspy_warnings

# --- export: a plain .save() file -----------------------------------------------------------


def _header(markdown: str) -> list[str]:
    """The lines before the first predictor's section."""
    return markdown.split("\n## ", 1)[0].splitlines()


def test_exporting_a_plain_save_says_it_has_no_compile_manifest(tmp_path, capsys):
    import ambiqa

    path = tmp_path / "mine.json"
    ambiqa.ClosedBook().save(str(path))
    assert main(["export", str(path)]) == 0
    header = _header(capsys.readouterr().out)
    assert any("a plain DSPy save" in line and "no compile manifest" in line for line in header)
    assert not any("None" in line for line in header), header
    assert not any("compiled with" in line for line in header)


def test_exporting_a_program_name_says_it_is_not_compiled(capsys):
    assert main(["export", "closed_book"]) == 0
    header = _header(capsys.readouterr().out)
    assert "- not compiled: the program as written" in header
    assert not any("None" in line for line in header), header


def test_exporting_an_artifact_keeps_what_it_records():
    from ambiqa.optimizers.export import provenance

    manifest = {"program": "vanilla_rag", "optimizer": {"name": "labeled"}, "metric": "d-f1",
                "reader": "extractive:x", "lm": "embedded:qwen", "created": "2026-01-01"}
    assert provenance(manifest) == ["- compiled with: labeled against d-f1 (reader: "
                                    "extractive:x)", "- LM: embedded:qwen",
                                    "- created: 2026-01-01"]
    assert provenance({"optimizer": {"name": "bootstrap"}, "metric": "f1"}) == [
        "- compiled with: bootstrap against f1"]


# --- compare: warnings first ----------------------------------------------------------------


def _run(d, program, index, reader=None):
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"program": program, "data": "toy:dev:3",
                                            "metrics": ["em", "f1"], "reader": reader,
                                            "lm": "scripted", "index": index}))
    rows = [{"id": f"q{i}", "question": f"q{i}", "error": None, "prediction": {"answer": "x"},
             "metrics": {"em": float(i % 2), "f1": 0.5}, "cost": {"lm_calls": 1}}
            for i in range(3)]
    (d / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(d)


def test_compare_puts_its_warnings_at_the_top(tmp_path, capsys):
    a = _run(tmp_path / "a", "vanilla_rag", "wiki-bm25")
    b = _run(tmp_path / "b", "diva", "wiki-dense")
    assert main(["compare", a, b, "--out", str(tmp_path / "c")]) == 0
    printed = capsys.readouterr().out
    md = (tmp_path / "c" / "compare.md").read_text()
    for text in (printed, md):
        warning = text.index("different indexes (wiki-bm25, wiki-dense)")
        assert warning < text.index("Side by side") < text.index("Setup"), text[:400]
        assert text.count("different indexes") == 1
    html = (tmp_path / "c" / "compare.html").read_text()
    body = html[html.index("</nav>"):]  # after the table of contents
    assert body.index("different indexes") < body.index("Side by side")


def test_compare_without_a_caveat_has_no_warnings_section(tmp_path, capsys):
    a = _run(tmp_path / "a", "vanilla_rag", "wiki")
    b = _run(tmp_path / "b", "diva", "wiki")
    assert main(["compare", a, b, "--out", str(tmp_path / "c")]) == 0
    assert "Warnings" not in (tmp_path / "c" / "compare.md").read_text()


# --- DSPy's warnings, folded ----------------------------------------------------------------

def _dspy_logger():
    import dspy  # noqa: F401  (installs DSPy's handler on the "dspy" logger)

    return logging.getLogger("dspy.clients.lm")


def test_dspy_warnings_become_one_note_per_kind(capsys):
    log = _dspy_logger()
    with folded_dspy_warnings() as fold:
        for _ in range(3):
            log.warning(f"{TRUNCATED} due to exceeding max_tokens=8. You can inspect ...")
        log.warning("Failed to set LM usage. Please return `dspy.Prediction` ...")
        log.warning("Failed to set LM usage. Please return `dspy.Prediction` ...")
        log.error("an error stays as DSPy wrote it")
    err = capsys.readouterr().err
    assert fold.truncated == 3
    notes = [line for line in err.splitlines() if line.startswith("ambiqa: note:")]
    assert notes == ["ambiqa: note: 3 LM replies were cut off at their token limit (DSPy: "
                     "\"LM response was truncated\"); answers built on them may be incomplete",
                     "ambiqa: note: DSPy warned 2 times: Failed to set LM usage."]
    assert "You can inspect" not in err and "Please return" not in err
    assert "an error stays as DSPy wrote it" in err
    log.warning("after the block DSPy prints again")
    assert "after the block DSPy prints again" in capsys.readouterr().err


def _truncating_lm():
    """The scripted closed-book LM, every reply marked as cut at max_tokens."""
    from ambiqa.testing import scripted_lm

    lm = scripted_lm({"ClosedBookLongAnswer": {"long_answer": "Paris, on the Seine."}})
    inner = lm.engine
    complete = inner.complete

    def cut(request):
        return dataclasses.replace(complete(request), finish_reason="length")

    inner.complete = cut
    return lm


@pytest.mark.parametrize("as_json", [False, True])
def test_ask_prints_one_note_instead_of_dspys_truncation_warning(monkeypatch, capsys,
                                                                 as_json):
    import dspy

    from ambiqa.cli import run_cmds
    from ambiqa.lm import configure

    lm = _truncating_lm()
    monkeypatch.setattr(run_cmds, "lm_from_args", lambda args: configure(lm))
    saved = dspy.settings.lm
    try:
        assert main(["ask", "What is the capital of France?", "--program", "closed_book",
                     *(["--json"] if as_json else [])]) == 0
    finally:
        dspy.configure(lm=saved)
    out, err = capsys.readouterr()
    assert "Paris, on the Seine." in out
    if as_json:
        json.loads(out)  # stdout stays JSON: the note goes to stderr
    assert "LM response was truncated due to" not in out + err
    assert err.strip().splitlines() == [
        "ambiqa: note: 1 LM reply was cut off at its token limit (DSPy: \"LM response was "
        "truncated\"); answers built on them may be incomplete"]


def test_evaluate_folds_them_too_and_serve_does_not(tmp_path, monkeypatch, capsys):
    import dspy

    from ambiqa.api import LMSpec
    from ambiqa.cli.notes import LIVE_WARNINGS

    questions = tmp_path / "q.jsonl"
    questions.write_text('{"question": "Capital of France?", "answers": ["Paris"]}\n'
                         '{"question": "Capital of Italy?", "answers": ["Rome"]}\n')
    lm = _truncating_lm()
    # evaluate passes its LM flags down as an LMSpec; the api builds it (issue 44)
    monkeypatch.setattr(LMSpec, "build", lambda self: lm)
    saved = dspy.settings.lm
    try:
        assert main(["evaluate", "closed_book", "--data", f"jsonl:{questions}", "--metrics",
                     "em", "--out", str(tmp_path / "run")]) == 0
    finally:
        dspy.configure(lm=saved)
    out, err = capsys.readouterr()
    assert "LM response was truncated due to" not in out + err
    assert [line for line in err.splitlines() if line.startswith("ambiqa: note:")] == [
        "ambiqa: note: 2 LM replies were cut off at their token limit (DSPy: \"LM response "
        "was truncated\"); answers built on them may be incomplete"]
    assert LIVE_WARNINGS == {"serve"}  # a server logs DSPy's warnings as they come
