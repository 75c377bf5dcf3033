"""Compile → save → load → same outputs; artifact validation; prompt export."""

from __future__ import annotations

import errno
import json
import subprocess
import sys

import pytest

import ambiqa
from ambiqa.data import demo_corpus_path, load_corpus, load_dataset
from ambiqa.errors import ArtifactError, ConfigError
from ambiqa.evaluation.registry import dspy_metric
from ambiqa.optimizers.artifact import load_artifact, read_artifact, save_artifact
from ambiqa.optimizers.compile import compile_program
from ambiqa.optimizers.export import export_prompts, fill, render
from ambiqa.programs.vanilla_rag import VanillaRAG
from ambiqa.retrieval.base import InMemoryRetriever
from ambiqa.testing import vanilla_rag_lm


@pytest.fixture()
def demo_retriever():
    return InMemoryRetriever(load_corpus(demo_corpus_path()))




def _manifest(retriever, **extra):
    return {"program": "vanilla_rag", "program_config": {"k": 3}, "ambiqa_version": "0.1.0",
            "lm": "scripted/fake", "retriever": {"kind": "memory", "index": None,
                                                 "fingerprint": retriever.fingerprint},
            "metric": "str-em", "optimizer": {"name": "bootstrap"}, "created": "now", **extra}


def test_compile_save_load_gives_same_outputs(tmp_path, use_lm, demo_retriever):
    use_lm(vanilla_rag_lm())
    train = load_dataset("demo:train")[:4]
    program = VanillaRAG(demo_retriever, k=3)
    compiled, report = compile_program(program, train, optimizer="bootstrap",
                                       metric=dspy_metric("str-em"), k=2)
    assert report.demos_per_predictor["clarify.clarify"] >= 1
    assert report.cost["lm_calls"] > 0
    path = save_artifact(tmp_path / "a.json", compiled, _manifest(demo_retriever))
    loaded = load_artifact(path, retriever=demo_retriever)
    q = load_dataset("demo:dev")[0].question
    a, b = compiled(question=q), loaded(question=q)
    assert a.answer == b.answer and a.interpretations == b.interpretations
    assert [len(p.demos) for _, p in loaded.named_predictors()] == [
        len(p.demos) for _, p in compiled.named_predictors()]
    assert loaded.manifest["metric"] == "str-em"
    # signature names survive DSPy's state round trip (traces and exports use them)
    assert [p.signature.__name__ for _, p in loaded.named_predictors()] == [
        "ClarifyFromPassages", "WriteLongAnswer"]
    assert b.trace["calls_by_module"] == {"ClarifyFromPassages": 1, "WriteLongAnswer": 1}


def test_labeled_compile_needs_no_lm_call(use_lm, demo_retriever):
    lm = use_lm(vanilla_rag_lm())
    compiled, report = compile_program(VanillaRAG(demo_retriever), load_dataset("demo:train"),
                                       optimizer="labeled", k=2)
    assert report.cost["lm_calls"] == 0 and not lm.engine.calls
    assert report.demos_per_predictor == {"clarify.clarify": 2, "long_answer.write": 2}


def test_artifact_loads_in_a_new_process(tmp_path, use_lm, demo_retriever):
    use_lm(vanilla_rag_lm())
    compiled, _ = compile_program(VanillaRAG(demo_retriever), load_dataset("demo:train"),
                                  optimizer="labeled", k=1)
    path = save_artifact(tmp_path / "a.json", compiled, _manifest(demo_retriever))
    code = (
        "import ambiqa, sys\n"
        "from ambiqa.retrieval.base import InMemoryRetriever\n"
        "from ambiqa.data import load_corpus, demo_corpus_path\n"
        "from ambiqa.testing import scripted_lm\n"
        "r = InMemoryRetriever(load_corpus(demo_corpus_path()))\n"
        "lm = scripted_lm({'ClarifyFromPassages': {'pairs': [{'question': 'Q?', 'answer': 'A',"
        " 'passage': 1}]}, 'WriteLongAnswer': {'long_answer': 'long'}})\n"
        f"p = ambiqa.load({str(path)!r}, retriever=r, lm=lm)\n"
        "out = p(question='Who wrote Little Women?')\n"
        "print(out.answer, len(out.interpretations), out.interpretations[0]['passages'][0])\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.split()[:2] == ["long", "1"]


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.pop("manifest"), "missing keys"),
    (lambda d: d.update(extra=1), "unexpected keys"),
    (lambda d: d.update(schema_version=99), "schema version 99"),
    (lambda d: d["manifest"].pop("program"), "manifest is missing program"),
    (lambda d: d.update(format="pickle"), "not an ambiqa artifact"),
    (lambda d: d["manifest"].update(program="vanila_rag"), "unknown program"),
])
def test_invalid_artifacts_are_refused(tmp_path, demo_retriever, mutate, message):
    path = save_artifact(tmp_path / "a.json", VanillaRAG(demo_retriever),
                         _manifest(demo_retriever))
    doc = json.loads(path.read_text())
    mutate(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(ArtifactError, match=message):
        load_artifact(path, retriever=demo_retriever)


def test_broken_json_and_missing_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "ambiqa-artifact", ')
    with pytest.raises(ArtifactError, match="not valid JSON"):
        read_artifact(bad)
    with pytest.raises(ArtifactError, match="not found"):
        read_artifact(tmp_path / "nope.json")
    binary = tmp_path / "bin.json"
    binary.write_bytes(b"\x80\x81\xff")
    with pytest.raises(ArtifactError, match="UTF-8"):
        read_artifact(binary)


def test_fingerprint_mismatch_warns_or_refuses(tmp_path, demo_retriever, caplog):
    path = save_artifact(tmp_path / "a.json", VanillaRAG(demo_retriever),
                         _manifest(demo_retriever))
    other = InMemoryRetriever(load_corpus(demo_corpus_path())[:10])
    with pytest.raises(ArtifactError, match="compiled against index"):
        load_artifact(path, retriever=other, strict_fingerprint=True)
    load_artifact(path, retriever=other)
    assert "compiled against index" in caplog.text


def test_failed_save_keeps_the_old_artifact_and_leaves_no_temp(tmp_path, demo_retriever,
                                                               monkeypatch):
    path = save_artifact(tmp_path / "a.json", VanillaRAG(demo_retriever),
                         _manifest(demo_retriever))
    before = path.read_bytes()

    def disk_full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("ambiqa.fsutil.os.fsync", disk_full)
    with pytest.raises(ArtifactError, match="No space left"):
        save_artifact(path, VanillaRAG(demo_retriever, k=9), _manifest(demo_retriever))
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]
    with pytest.raises(ArtifactError, match="cannot write"):
        save_artifact(path / "sub" / "b.json", VanillaRAG(demo_retriever),
                      _manifest(demo_retriever))


def test_no_pickle_in_artifact(tmp_path, use_lm, demo_retriever):
    use_lm(vanilla_rag_lm())
    compiled, _ = compile_program(VanillaRAG(demo_retriever), load_dataset("demo:train"),
                                  optimizer="labeled", k=2)
    path = save_artifact(tmp_path / "a.json", compiled, _manifest(demo_retriever))
    json.loads(path.read_text())  # plain JSON all the way down
    assert b"pickle" not in path.read_bytes() and b"\x80\x04" not in path.read_bytes()


def test_export_renders_every_predictor_with_placeholders(use_lm, demo_retriever):
    use_lm(vanilla_rag_lm())
    compiled, _ = compile_program(VanillaRAG(demo_retriever), load_dataset("demo:train"),
                                  optimizer="labeled", k=2)
    prompts = export_prompts(compiled)
    assert [p["signature"] for p in prompts] == ["ClarifyFromPassages", "WriteLongAnswer"]
    clarify = prompts[0]
    assert clarify["n_demos"] == 2
    assert "{question}" in clarify["messages"][-1]["content"]
    # demos appear as user/assistant turns before the final request
    assert [m["role"] for m in clarify["messages"]] == ["system", "user", "assistant", "user",
                                                        "assistant", "user"]
    md = render(prompts, "md", manifest={"program": "vanilla_rag"})
    assert "## clarify.clarify" in md and "{passages}" in md
    assert json.loads(render(prompts, "json"))["prompts"][1]["signature"] == "WriteLongAnswer"
    filled = fill(clarify["messages"], {"question": "Q?", "passages": "[1] T: x"})
    assert "{question}" not in filled[-1]["content"] and "Q?" in filled[-1]["content"]
    with pytest.raises(ConfigError):
        render(prompts, "pdf")


def test_exported_prompt_is_what_dspy_sends(use_lm, demo_retriever):
    """The filled export equals the messages DSPy's adapter produced for the real call."""
    lm = use_lm(vanilla_rag_lm())
    compiled, _ = compile_program(VanillaRAG(demo_retriever), load_dataset("demo:train"),
                                  optimizer="labeled", k=1)
    compiled(question="Who wrote Little Women?")
    sent = lm.history[0]["messages"]
    inputs = {"question": "Who wrote Little Women?",
              "passages": sent[-1]["content"].split("[[ ## passages ## ]]\n", 1)[1]
              .split("\n\nRespond with", 1)[0]}
    filled = fill(export_prompts(compiled)[0]["messages"], inputs)
    assert [m["content"] for m in filled] == [m["content"] for m in sent]


def test_load_is_exposed_at_top_level():
    assert ambiqa.load is not None and callable(ambiqa.load)


# ---- artifacts carry prompts, not endpoints ---------------------------------------------------
@pytest.mark.parametrize("mutate, message", [
    (lambda s: s["clarify.clarify"].update(lm={"model": "openai/gpt-4o",
                                               "api_base": "http://elsewhere:8000/v1"}),
     "predictor clarify.clarify carries an lm entry"),
    (lambda s: s["long_answer.write"].update(callbacks=["x"]),
     "predictor long_answer.write has unknown state key.*callbacks"),
    (lambda s: s.pop("long_answer.write"), "missing predictor.*long_answer.write"),
    (lambda s: s.update({"judge.predict": dict(s["clarify.clarify"])}),
     "unknown predictor.*judge.predict"),
    (lambda s: s["clarify.clarify"]["signature"].update(model="x"),
     "predictor clarify.clarify signature has unknown key.*model"),
    (lambda s: s["clarify.clarify"].update(demos="not a list"),
     "predictor clarify.clarify demos must be a list"),
])
def test_crafted_predictor_state_is_refused_naming_it(tmp_path, use_lm, demo_retriever, mutate,
                                                      message):
    use_lm(vanilla_rag_lm())
    compiled, _ = compile_program(VanillaRAG(demo_retriever), load_dataset("demo:train"),
                                  optimizer="labeled", k=1)
    path = save_artifact(tmp_path / "a.json", compiled, _manifest(demo_retriever))
    doc = json.loads(path.read_text())
    assert set(doc["state"]["clarify.clarify"]) <= {"demos", "traces", "train", "signature",
                                                    "fields", "lm"}
    assert doc["state"]["clarify.clarify"]["lm"] is None
    load_artifact(path, retriever=demo_retriever)  # the untouched file loads
    mutate(doc["state"])
    path.write_text(json.dumps(doc))
    with pytest.raises(ArtifactError, match=message):
        load_artifact(path, retriever=demo_retriever)
    with pytest.raises(ArtifactError, match=message):  # the export path validates the same
        from ambiqa.cli.optimize_cmds import load_for_export

        load_for_export(str(path))


def test_a_predictor_lm_is_not_saved(tmp_path, demo_retriever, caplog):
    import dspy

    program = VanillaRAG(demo_retriever)
    program.clarify.clarify.lm = dspy.LM("openai/some-other-model", api_base="http://x:1/v1")
    path = save_artifact(tmp_path / "a.json", program, _manifest(demo_retriever))
    assert "not saved" in caplog.text
    state = json.loads(path.read_text())["state"]
    assert all(entry["lm"] is None for entry in state.values())
    loaded = load_artifact(path, retriever=demo_retriever)
    assert all(p.lm is None for _, p in loaded.named_predictors())


# ---- training splits only ---------------------------------------------------------------------
def test_compile_program_refuses_dev_data_and_shared_ids_in_the_api(use_lm, demo_retriever):
    use_lm(vanilla_rag_lm())
    program = VanillaRAG(demo_retriever)
    with pytest.raises(ConfigError, match="'demo:dev' is not a training split"):
        compile_program(program, load_dataset("demo:dev"), optimizer="labeled")
    with pytest.raises(ConfigError, match="'asqa:dev' is not a training split"):
        compile_program(program, load_dataset("demo:train"), optimizer="labeled",
                        train_spec="asqa:dev")
    train = load_dataset("demo:train")
    dev = load_dataset("demo:dev")
    with pytest.raises(ConfigError, match="2 question id.*in both the training data"):
        compile_program(program, train, optimizer="labeled", devset=[*dev, *train[:2]])
    with pytest.raises(ConfigError, match="'demo:dev' is not a training split"):
        compile_program(program, train, optimizer="bootstrap-rs", valset=dev,
                        metric=dspy_metric("str-em"))
    _, report = compile_program(program, train, optimizer="labeled", devset=dev)
    assert report.data_guard["violations"] == []
    assert report.data_guard["train_sources"] == ["demo:train"]
    _, report = compile_program(program, dev, optimizer="labeled", allow_eval_splits=True)
    assert report.data_guard["violations"] == ["'demo:dev' is not a training split"]


def test_cli_research_flag_is_recorded_and_shown(tmp_path, capsys, caplog):
    import logging

    from ambiqa.cli import main

    out = tmp_path / "cb.json"
    # No LM call happens with --optimizer none; a dead endpoint keeps the test off the 1.5B
    # model, which CI does not install.
    lm = ["--lm", "openai/fake", "--api-base", "http://127.0.0.1:9/v1", "--no-cache"]
    assert main(["compile", "closed_book", "--train", "demo:dev", "--optimizer", "none",
                 "--metric", "str-em", "--out", str(out), *lm]) == 2
    assert "not a training split" in capsys.readouterr().err and not out.exists()
    assert main(["compile", "closed_book", "--train", "demo:dev", "--optimizer", "none",
                 "--metric", "str-em", "--out", str(out), "--allow-eval-splits",
                 *lm]) == 0
    guard = read_artifact(out)["manifest"]["data_guard"]
    assert guard["allow_eval_splits"] is True and guard["violations"]
    capsys.readouterr()
    assert main(["export", str(out), "--format", "md"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("> WARNING: OPTIMIZED ON EVALUATION DATA")
    assert "OPTIMIZED ON EVALUATION DATA" in captured.err
    with caplog.at_level(logging.WARNING):
        ambiqa.load(out)
    assert "OPTIMIZED ON EVALUATION DATA" in caplog.text
