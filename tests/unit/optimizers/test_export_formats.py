"""Export formats (md/json/jinja), verification against the LM, uncompiled programs, and
artifact schema handling (older schema, extra keys)."""

from __future__ import annotations

import json
import logging

import pytest

from ambiqa.cli import main
from ambiqa.data import demo_corpus_path, load_corpus, load_dataset
from ambiqa.errors import ArtifactError
from ambiqa.optimizers.artifact import load_artifact, read_artifact, save_artifact
from ambiqa.optimizers.compile import compile_program
from ambiqa.optimizers.export import (
    capture_inputs,
    export_prompts,
    fill,
    messages_from_jinja,
    render,
    verify_export,
)
from ambiqa.programs.closed_book import ClosedBook
from ambiqa.programs.vanilla_rag import VanillaRAG
from ambiqa.retrieval.base import InMemoryRetriever
from ambiqa.testing import vanilla_rag_lm as _fake_lm


@pytest.fixture()
def demo_retriever():
    return InMemoryRetriever(load_corpus(demo_corpus_path()))


def _manifest(**extra):
    return {"program": "vanilla_rag", "program_config": {"k": 2}, "ambiqa_version": "0.1.0",
            "lm": "scripted/fake", "retriever": {"kind": "memory", "index": None,
                                                 "fingerprint": None},
            "metric": "str-em", "optimizer": {"name": "labeled", "k": 2}, "created": "now",
            **extra}


def test_jinja_export_renders_the_same_messages_as_the_json_export(use_lm, demo_retriever):
    use_lm(_fake_lm())
    compiled, _ = compile_program(VanillaRAG(demo_retriever, k=2), load_dataset("demo:train"),
                                  optimizer="labeled", k=2)
    prompts = export_prompts(compiled)
    template = render(prompts, "jinja", manifest={"program": "vanilla_rag"})
    inputs = {"question": "Who {{wrote}} {% raw %} it?", "passages": "[1] T: {x} y"}
    for p in prompts:
        got = messages_from_jinja(template, p["predictor"], {k: inputs.get(k, "v") for k in
                                                              p["input_fields"]})
        want = fill(p["messages"], {k: inputs.get(k, "v") for k in p["input_fields"]})
        assert got == want
    import jinja2

    jinja2.Environment().parse(template)  # valid Jinja


def test_verify_export_matches_dspy_outputs_via_json_and_jinja(use_lm, demo_retriever):
    lm = use_lm(_fake_lm())
    compiled, _ = compile_program(VanillaRAG(demo_retriever, k=2), load_dataset("demo:train"),
                                  optimizer="labeled", k=1)
    captured = capture_inputs(compiled, [q.question for q in load_dataset("demo:dev")[:2]])
    assert [sorted(c) for c in captured] == [["clarify.clarify", "long_answer.write"]] * 2
    for via in ("json", "jinja"):
        results = verify_export(compiled, captured, lm, via=via)
        assert len(results) == 4 and all(r["match"] for r in results), results
        assert all(r["prompt_match"] and r["output_match"] for r in results)


def test_verify_export_fails_on_a_prompt_that_differs_from_what_dspy_sends(
        use_lm, demo_retriever, monkeypatch):
    """Same outputs are not enough: one changed character in the exported text is caught
    by the exact prompt comparison, even though the scripted LM answers alike."""
    import ambiqa.optimizers.export as export

    lm = use_lm(_fake_lm())
    compiled, _ = compile_program(VanillaRAG(demo_retriever), load_dataset("demo:train"),
                                  optimizer="labeled", k=1)
    captured = capture_inputs(compiled, [load_dataset("demo:dev")[0].question])
    real_fill = export.fill

    def drifted(messages, inputs):
        out = real_fill(messages, inputs)
        out[0]["content"] = out[0]["content"].replace("Your input fields", "Your inputs", 1)
        return out

    monkeypatch.setattr(export, "fill", drifted)
    results = verify_export(compiled, captured, lm, via="json")
    assert results and all(r["output_match"] for r in results)
    assert not any(r["prompt_match"] or r["match"] for r in results)
    assert "message 0 (system)" in results[0]["prompt_difference"]


def test_uncompiled_export_is_allowed_and_marked(tmp_path, capsys):
    assert main(["export", "closed_book", "--format", "md"]) == 0
    out = capsys.readouterr().out
    assert "uncompiled: zero-shot prompts" in out and "ClosedBookLongAnswer" in out
    path = save_artifact(tmp_path / "none.json", ClosedBook(), {
        **_manifest(program="closed_book", program_config={}), "optimizer": {"name": "none"}})
    assert main(["export", str(path), "--format", "jinja"]) == 0
    assert "uncompiled: zero-shot prompts" in capsys.readouterr().out
    assert main(["export", "not_a_program_or_file"]) == 2


def test_cli_export_verify_against_a_fake_endpoint(tmp_path, capsys):
    from ambiqa.testing_server import serve

    path = save_artifact(tmp_path / "cb.json", ClosedBook(), {
        **_manifest(program="closed_book", program_config={})})
    url, shutdown = serve(delay=0.0)
    try:
        code = main(["export", str(path), "--verify", "--data", "demo:dev", "--n", "2",
                     "--format", "jinja", "--lm", "openai/fake", "--api-base", url,
                     "--no-cache"])
    finally:
        shutdown()
    out = capsys.readouterr().out
    assert code == 0, out
    assert "verified 2/2 predictor calls on 2 questions" in out
    assert main(["export", str(path), "--verify"]) == 2  # no --data: a clear error


def test_older_schema_is_read_with_a_warning_and_newer_refused(tmp_path, caplog,
                                                               demo_retriever):
    path = save_artifact(tmp_path / "a.json", VanillaRAG(demo_retriever), _manifest())
    doc = json.loads(path.read_text())
    assert doc["schema_version"] == 2
    doc["schema_version"] = 1
    doc["manifest"].pop("optuna", None)
    doc["manifest"]["from_the_future"] = 1
    path.write_text(json.dumps(doc))
    with caplog.at_level(logging.WARNING):
        read = read_artifact(path)
    assert read["manifest"]["optuna"] is None and read["manifest"]["scores"] is None
    assert "older than 2" in caplog.text and "unknown manifest keys" in caplog.text
    doc["schema_version"] = 3
    path.write_text(json.dumps(doc))
    with pytest.raises(ArtifactError, match="schema version 3 is not supported"):
        read_artifact(path)


def test_load_refuses_program_kwargs_that_override_stored_settings(tmp_path, demo_retriever):
    path = save_artifact(tmp_path / "a.json", VanillaRAG(demo_retriever), _manifest())
    with pytest.raises(ArtifactError, match="repeat stored settings"):
        load_artifact(path, retriever=demo_retriever, program_kwargs={"k": 9})


def test_compile_cli_uses_recipe_defaults_dry_run_and_budget(tmp_path, capsys):
    from ambiqa.testing_server import serve

    url, shutdown = serve(delay=0.0)
    lm_args = ["--lm", "openai/fake", "--api-base", url, "--no-cache"]
    try:
        assert main(["compile", "closed_book", "--train", "demo:train", "--metric", "str-em",
                     "--optimizer", "bootstrap-rs", "--dry-run", *lm_args]) == 0
        est = json.loads(capsys.readouterr().out)
        assert est["per_question"]["lm_calls"] == 1 and est["lm_calls"] > 0
        # 3 of the 10 training questions are held out for the choice against zero-shot
        # (zero-shot and the compiled program, 1 call each; closed book has no writer, so
        # no writer-only variants), then bootstrap-rs holds out its own part of the other 7
        assert est["n_select"] == 3 and est["selection_lm_calls"] == 3 * 2
        assert est["n_val"] == 2 and est["n_train"] == 5
        out = tmp_path / "cb.json"
        assert main(["compile", "closed_book", "--train", "demo:train", "--metric", "str-em",
                     "--optimizer", "bootstrap", "--max-lm-calls", "3", "--out", str(out),
                     *lm_args]) == 0
        m = read_artifact(out)["manifest"]
        assert m["optimizer"]["stopped_by_budget"] is True
        assert "budget ran out" in m["optimizer"]["selection"]["skipped"]
        assert m["compile_cost"]["lm_calls"] <= 4
        capsys.readouterr()
        assert main(["tune", "closed_book", "--study", "x", "--storage",
                     f"sqlite:///{tmp_path}/d.db", "--trials", "5", "--train", "demo:train",
                     "--metric", "str-em", "--dry-run", *lm_args]) == 0
        est = json.loads(capsys.readouterr().out)
        # pools (one bootstrap pass over 7) + 5 trials x 3 held-out questions, 1 call each
        assert est["lm_calls"] == 7 + 5 * 3
        assert not (tmp_path / "d.db").exists()  # a dry run creates no study
    finally:
        shutdown()
