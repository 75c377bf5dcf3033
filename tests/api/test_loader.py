"""One loader for ``ambiqa.load``, ``evaluate``, ``ask``, ``serve`` and ``export`` (issue 44
item 1): the program file is read and validated once; one fingerprint policy for every
command; a program's own ``.save()`` JSON accepted everywhere; a program that needs a
retriever and has none refused at start by every command that runs it, ``serve`` included.

Before: ``serve`` only warned on a rebuilt index, could not load a ``.save()`` file, and
started -- ``/readyz`` ready -- with a program that answered every question with 422;
``ambiqa.load(path)`` read the file four times and validated it twice.
"""

from __future__ import annotations

import builtins
import io
import os
from pathlib import Path

import dspy
import pytest

import ambiqa
from ambiqa.api import LMSpec
from ambiqa.api.loader import open_program, read_program_file
from ambiqa.cli import main
from ambiqa.errors import AmbiqaError, ArtifactError, ConfigError
from ambiqa.optimizers.artifact import check_fingerprint, read_artifact, save_artifact
from ambiqa.programs.vanilla_rag import VanillaRAG
from ambiqa.retrieval.factory import describe
from ambiqa.testing import vanilla_rag_lm

ROWS = [{"title": "Paris", "text": "Paris is the capital of France."},
        {"title": "Lyon", "text": "Lyon is a city in France."},
        {"title": "Nice", "text": "Nice is on the French Riviera."}]
QUESTIONS = [{"question": "What is the capital of France?", "answers": ["Paris"]}]
Q = "What is the capital of France?"
COMMANDS = ["load", "evaluate", "ask", "serve", "export"]


def search(query, k):  # a user's callable retriever: nothing an artifact can reopen by name
    return [r["text"] for r in ROWS][:k]


@pytest.fixture()
def towns(tmp_path, monkeypatch):
    """The BM25 index ``towns``, found by name (``$AMBIQA_INDEX_ROOT``)."""
    root = tmp_path / "idx"
    monkeypatch.setenv("AMBIQA_INDEX_ROOT", str(root))
    return ambiqa.index(ROWS, name="towns", kind="bm25", index_root=root)


def _program(retriever) -> VanillaRAG:
    prog = VanillaRAG(retriever=retriever, k=2)
    demo = dspy.Example(question="Q?", passages="[1] P", pairs=[]).with_inputs("question")
    prog.named_predictors()[0][1].demos = [demo]
    return prog


def _write(tmp_path: Path, form: str, retriever) -> Path:
    """A program file of ``form`` ("artifact" or "saved") recording ``retriever``."""
    prog = _program(retriever)
    tmp_path.mkdir(parents=True, exist_ok=True)
    if form == "saved":
        path = tmp_path / f"saved-{id(retriever)}.json"
        prog.save(str(path))
        return path
    return save_artifact(tmp_path / f"art-{id(retriever)}.json", prog, {
        "program": "vanilla_rag", "program_config": prog.config(), "ambiqa_version": "test",
        "lm": "scripted/fake", "retriever": describe(prog.retriever), "metric": "f1",
        "optimizer": {"name": "labeled"}, "created": "2026-01-01T00:00:00+00:00"})


def _rebuild_towns(tmp_path) -> None:
    """The index ``towns`` rebuilt from another corpus: another fingerprint, same name."""
    ambiqa.index(["Other text altogether."], name="towns", kind="bm25",
                 index_root=tmp_path / "idx")


# --- each command, run as a user runs it ----------------------------------------------------

class Run:
    """The outcome of one command: ``ok``, the error text and whether an LM was built."""

    def __init__(self) -> None:
        self.ok, self.error, self.lm_built, self.started = False, "", False, False


def _run(command: str, path: Path, monkeypatch, capsys, *, verify: bool = True) -> Run:
    """Run ``command`` on the program file ``path`` with a scripted LM; the LM and (for serve)
    the server are recorded when they start, so a refusal "at start" can be checked."""
    run = Run()
    from ambiqa.lm import configure

    def lm_from_args(args):
        run.lm_built = True
        return configure(vanilla_rag_lm())

    def make_lm(*a, **k):
        run.lm_built = True
        return vanilla_rag_lm()

    monkeypatch.setattr("ambiqa.cli.run_cmds.lm_from_args", lm_from_args)
    monkeypatch.setattr("ambiqa.cli.optimize_cmds.lm_from_args", lm_from_args)
    monkeypatch.setattr("ambiqa.lm.make_lm", make_lm)
    # every LM a command builds from a spec (evaluate, serve) is built by LMSpec.build
    monkeypatch.setattr(LMSpec, "build", lambda self: make_lm())
    capsys.readouterr()
    try:
        if command == "load":
            prog = ambiqa.load(path)
            configure(make_lm())
            prog(question=Q)
        elif command == "evaluate":
            ambiqa.evaluate(path, QUESTIONS, lm=LMSpec())
        elif command == "ask":
            code = main(["ask", Q, "--artifact", str(path)])
            run.ok, run.error = code == 0, capsys.readouterr().err
            return run
        elif command == "serve":
            return _serve(path, run, monkeypatch, capsys)
        elif command == "export":
            argv = ["export", str(path)]
            if verify:  # the export that runs the program; a plain one opens no index
                argv += ["--verify", "--data", "demo:dev:1", "--n", "1"]
            code = main(argv)
            run.ok, run.error = code == 0, capsys.readouterr().err
            return run
        run.ok = True
    except AmbiqaError as exc:
        run.error = str(exc)
    return run


def _serve(path: Path, run: Run, monkeypatch, capsys) -> Run:
    """``ambiqa serve PATH`` on a free port. A refusal before start-up returns at once; a
    program that loads is asked one question over HTTP, then the server is stopped."""
    import threading

    import httpx
    import uvicorn

    real_run = uvicorn.Server.run
    answers: list = []

    def run_and_ask(server, *a, **k):
        run.started = True

        def ask() -> None:
            import time

            deadline = time.monotonic() + 30
            while not server.started and not server.should_exit and time.monotonic() < deadline:
                time.sleep(0.02)
            state = server.config.app.state.ambiqa if hasattr(server.config.app, "state") \
                else None
            while state is not None and state["served"] is None and state["error"] is None \
                    and time.monotonic() < deadline:
                time.sleep(0.02)
            if server.started and state is not None and state["served"] is not None:
                port = server.servers[0].sockets[0].getsockname()[1]
                answers.append(httpx.post(f"http://127.0.0.1:{port}/v1/answer",
                                          json={"question": Q}, timeout=30))
            server.should_exit = True

        threading.Thread(target=ask, daemon=True).start()
        return real_run(server, *a, **k)

    monkeypatch.setattr(uvicorn.Server, "run", run_and_ask)
    code = main(["serve", str(path), "--port", "0", "--log-level", "critical"])
    run.error = capsys.readouterr().err
    run.ok = code == 0 and bool(answers) and answers[0].status_code == 200
    if code == 0 and not run.ok:
        run.error = answers[0].text if answers else "no answer"
    return run


def _error_line(run: Run) -> str:
    """The CLI's error line (``ambiqa: error: ...``), else the exception's first line."""
    lines = [line for line in run.error.splitlines() if line.strip()]
    return next((line for line in lines if line.startswith("ambiqa: error:")), lines[0])


# --- the tests ------------------------------------------------------------------------------

@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_takes_a_programs_own_save(command, towns, tmp_path, monkeypatch, capsys,
                                                 fresh_dspy):
    saved = _write(tmp_path, "saved", towns.retriever)
    run = _run(command, saved, monkeypatch, capsys, verify=False)
    assert run.ok, run.error


@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "export"] + ["export --verify"])
@pytest.mark.parametrize("form", ["artifact", "saved"])
def test_a_rebuilt_index_is_refused_alike_by_every_command(command, form, towns, tmp_path,
                                                           monkeypatch, capsys, fresh_dspy):
    path = _write(tmp_path, form, towns.retriever)
    want = towns.fingerprint
    _rebuild_towns(tmp_path)
    run = _run(command.split()[0], path, monkeypatch, capsys)
    assert not run.ok
    first = _error_line(run)
    assert f"{path}: compiled against index {want}, but the retriever at hand is" in first
    assert "Traceback" not in run.error
    if command != "serve":  # serve opens the index after the port (its LM loads first)
        assert not run.lm_built, "refused before the LM loads"


def test_a_plain_export_opens_no_index_so_neither_refusal_applies(towns, tmp_path,
                                                                   monkeypatch, capsys):
    """Exporting prompts needs the predictors only (no LM, no index): a rebuilt or a missing
    index cannot change them, so a plain export takes both files; ``export --verify``, which
    runs the program, is refused like every other command (above)."""
    rebuilt = _write(tmp_path, "artifact", towns.retriever)
    _rebuild_towns(tmp_path)
    for path in (rebuilt, _write(tmp_path, "saved", search)):
        run = _run("export", path, monkeypatch, capsys, verify=False)
        assert run.ok and not run.lm_built, run.error


@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "export"] + ["export --verify"])
@pytest.mark.parametrize("form", ["artifact", "saved"])
def test_a_program_that_needs_a_retriever_and_has_none_is_refused_at_start(
        command, form, tmp_path, monkeypatch, capsys, fresh_dspy):
    path = _write(tmp_path, form, search)  # a callable: nothing recorded to reopen
    run = _run(command.split()[0], path, monkeypatch, capsys)
    assert not run.ok
    lines = [line for line in run.error.splitlines() if line.strip()]
    assert "needs a retriever, and the file records no index to open" in lines[0], run.error
    assert len(lines) <= 2 and "Traceback" not in run.error  # the message and its fix
    if command in ("ask", "serve", "export --verify"):
        assert lines[0].startswith("ambiqa: error:")
    assert not run.lm_built, "refused before the LM loads"
    assert not run.started, "serve refuses before it listens, never a ready server"


def test_given_a_retriever_every_file_runs_and_a_different_one_only_warns(towns, tmp_path,
                                                                          caplog, fresh_dspy):
    for form in ("artifact", "saved"):
        path = _write(tmp_path, form, search)
        assert ambiqa.load(path, retriever=towns.retriever, lm=vanilla_rag_lm())(
            question=Q).answer
        path = _write(tmp_path, form, towns.retriever)
        _rebuild_towns(tmp_path)
        other = ambiqa.open_index("towns")
        caplog.clear()
        assert ambiqa.load(path, index="towns").retriever.fingerprint == other.fingerprint
        assert "compiled against index" in caplog.text  # chosen on purpose: a warning
        with pytest.raises(ArtifactError, match="compiled against index"):
            ambiqa.load(path, index="towns", strict_fingerprint=True)
        assert ambiqa.load(path, strict_fingerprint=False).retriever.fingerprint == \
            other.fingerprint  # the explicit opt-out
        ambiqa.index(ROWS, name="towns", kind="bm25", index_root=tmp_path / "idx")


def test_one_fingerprint_policy():
    class R:
        fingerprint = "bbb"

    recorded = {"kind": "bm25", "index": "towns", "fingerprint": "aaa"}
    refused = {(strict, given) for strict in (None, True, False) for given in (False, True)
               if _refuses(recorded, R(), strict, given)}
    assert refused == {(None, False), (True, False), (True, True)}
    for same in ({**recorded, "fingerprint": "bbb"}, {**recorded, "fingerprint": None}, None):
        check_fingerprint(same, R(), "p.json", strict=True)  # nothing to compare: no refusal


def _refuses(recorded, retriever, strict, given) -> bool:
    try:
        check_fingerprint(recorded, retriever, "p.json", strict=strict, given=given)
    except ArtifactError:
        return True
    return False


# --- read once ------------------------------------------------------------------------------

@pytest.fixture()
def opens(monkeypatch):
    """Every open of a file by name in this process (``open``, ``io.open``, and so
    ``Path.read_bytes`` / ``read_text``), as resolved paths."""
    seen: list[Path] = []
    real = io.open

    def counting(file, *a, **k):
        if isinstance(file, str | os.PathLike):
            seen.append(Path(file).resolve())
        return real(file, *a, **k)

    monkeypatch.setattr(io, "open", counting)
    monkeypatch.setattr(builtins, "open", counting)
    return seen


@pytest.fixture()
def validations(monkeypatch):
    """Every validation of an artifact document (wherever it is called from)."""
    import ambiqa.api.loader as loader
    import ambiqa.optimizers.artifact as artifact

    calls: list[str] = []
    real = artifact.validate_artifact

    def counting(doc, path="<artifact>"):
        calls.append(str(path))
        return real(doc, path)

    monkeypatch.setattr(artifact, "validate_artifact", counting)
    monkeypatch.setattr(loader, "validate_artifact", counting)
    return calls


@pytest.mark.parametrize("form", ["artifact", "saved"])
def test_ambiqa_load_reads_the_file_once_and_validates_it_once(form, towns, tmp_path, opens,
                                                               validations, fresh_dspy):
    path = _write(tmp_path, form, towns.retriever)
    other = _write(tmp_path / "x", "artifact", towns.retriever) if form == "saved" else path
    opens.clear()
    read_artifact(other)  # the counters see what a reader does
    assert opens == [other.resolve()] and len(validations) == 1
    opens.clear()
    validations.clear()
    prog = ambiqa.load(path, lm=vanilla_rag_lm())
    assert prog(question=Q).answer
    assert opens.count(path.resolve()) == 1
    assert len(validations) == (1 if form == "artifact" else 0)


def test_evaluate_and_serve_read_the_file_once(towns, tmp_path, opens, validations,
                                               monkeypatch, fresh_dspy):
    path = _write(tmp_path, "artifact", towns.retriever)
    result = ambiqa.evaluate(path, QUESTIONS, lm=vanilla_rag_lm())
    assert result.n == 1 and result.spec.artifact_sha256
    assert opens.count(path.resolve()) == 1 and len(validations) == 1
    opens.clear()
    validations.clear()
    from ambiqa.serve.loading import load_served

    monkeypatch.setattr(LMSpec, "build", lambda self: vanilla_rag_lm())
    pf = read_program_file(path)  # what `ambiqa serve` does before it listens
    served = load_served(pf)
    assert served.program.retriever.fingerprint == towns.fingerprint
    assert opens.count(path.resolve()) == 1 and len(validations) == 1


@pytest.mark.parametrize("command", ["ask", "export"])
def test_ask_and_export_read_the_file_once(command, towns, tmp_path, opens, validations,
                                           monkeypatch, capsys, fresh_dspy):
    path = _write(tmp_path, "artifact", towns.retriever)
    opens.clear()
    run = _run(command, path, monkeypatch, capsys, verify=False)
    assert run.ok, run.error
    assert opens.count(path.resolve()) == 1 and len(validations) == 1


def test_the_sha256_is_of_the_bytes_parsed(towns, tmp_path):
    import hashlib

    path = _write(tmp_path, "saved", towns.retriever)
    pf = read_program_file(path)
    assert pf.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    found = open_program(pf)
    assert found.kind == "saved" and found.sha256 == pf.sha256 and found.path == path


# --- serve's app refuses what it cannot answer with -----------------------------------------

def test_serve_app_factory_refuses_a_program_without_its_retriever(tmp_path):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from ambiqa.serve import ServedProgram
    from ambiqa.serve.app import create_app

    def served() -> ServedProgram:
        return ServedProgram(program=VanillaRAG(None), lm=vanilla_rag_lm(), artifact="x.json")

    with pytest.raises(ConfigError, match="needs a retriever and has none"):
        create_app(served())
    failures: list = []
    with TestClient(create_app(served, on_load_failed=failures.append)) as c:
        import time

        deadline = time.monotonic() + 10
        while not failures and time.monotonic() < deadline:
            time.sleep(0.02)
        r = c.get("/readyz")
    assert r.status_code == 503 and "needs a retriever" in r.json()["detail"]
    assert isinstance(failures[0], ConfigError)
