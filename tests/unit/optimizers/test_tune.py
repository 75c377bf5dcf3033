"""``ambiqa tune``: Optuna study over demos, teleprompter and knobs; resume, budget, kill."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import optuna
import pytest

from ambiqa.data import demo_corpus_path, load_corpus, load_dataset
from ambiqa.errors import ConfigError
from ambiqa.evaluation.registry import dspy_metric
from ambiqa.optimizers.artifact import load_artifact, read_artifact
from ambiqa.optimizers.knn import KNNPredict
from ambiqa.optimizers.tune import TuneConfig, redact_url, tune
from ambiqa.retrieval.base import InMemoryRetriever
from ambiqa.testing import HashEncoder as _HashEncoder
from ambiqa.testing import answer_words
from ambiqa.testing import vanilla_rag_lm as _fake_lm

ROOT = Path(__file__).resolve().parents[3]



# Bag-of-words unit vectors over answer-normalised tokens, as in test_optim_compile.
HashEncoder = functools.partial(_HashEncoder, 64, tokenize=answer_words)

@pytest.fixture()
def demo_retriever():
    return InMemoryRetriever(load_corpus(demo_corpus_path()))


def _cfg(tmp_path, **over):
    base = dict(program="vanilla_rag", study="s1", storage=f"sqlite:///{tmp_path}/t.db",
                trials=4, train="demo:train", metric="str-em", max_demos=2, n_sets=2,
                pool_size=3)
    base.update(over)
    return TuneConfig(**base)


def test_tune_writes_best_trial_artifact_and_resumes_without_rebuilding_pools(
        tmp_path, use_lm, demo_retriever):
    lm = use_lm(_fake_lm())
    out = tmp_path / "best.json"
    enc = HashEncoder()
    res = tune(_cfg(tmp_path), load_dataset("demo:train"), dspy_metric("str-em"),
               retriever=demo_retriever, out=out, knn_encoder=enc)
    assert res.n_complete == 4 and res.artifact == str(out)
    first_calls = len(lm.engine.calls)
    doc = read_artifact(out)
    m = doc["manifest"]
    assert m["optuna"]["study"] == "s1" and m["optuna"]["trial"] == res.best_trial
    assert m["scores"]["train"] == pytest.approx(res.best_score)
    assert m["optimizer"]["name"] in {"labeled", "bootstrap", "knn"}
    assert m["program_config"]["k"] == res.best_params["program.k"]
    loaded = load_artifact(out, retriever=demo_retriever, knn_encoder=enc)
    assert loaded(question="Who wrote Little Women?").answer
    # resume: 2 more trials, pools come from the study (no bootstrap pass again)
    lm.engine.calls.clear()
    res2 = tune(_cfg(tmp_path, trials=6), load_dataset("demo:train"), dspy_metric("str-em"),
                retriever=demo_retriever, out=out, knn_encoder=enc)
    assert res2.n_complete == 6 and res2.ran_trials == 2
    n_val = 3  # a third of the 10 demo questions
    assert len(lm.engine.calls) <= 2 * n_val * 2 < first_calls
    study = optuna.load_study(study_name="s1", storage=f"sqlite:///{tmp_path}/t.db")
    assert "pools" in study.user_attrs and len(study.trials) == 6


def test_same_study_with_another_search_space_is_refused(tmp_path, use_lm, demo_retriever):
    use_lm(_fake_lm())
    tune(_cfg(tmp_path, trials=1, teleprompters=("labeled",)), load_dataset("demo:train"),
         dspy_metric("str-em"), retriever=demo_retriever)
    with pytest.raises(ConfigError, match=r"different search space \(differs in: max_demos"):
        tune(_cfg(tmp_path, trials=2, teleprompters=("labeled",), max_demos=3),
             load_dataset("demo:train"), dspy_metric("str-em"), retriever=demo_retriever)


def test_budget_stops_the_study_and_keeps_the_best_so_far(tmp_path, use_lm, demo_retriever):
    lm = use_lm(_fake_lm())
    out = tmp_path / "best.json"
    res = tune(_cfg(tmp_path, trials=50, teleprompters=("labeled",), max_lm_calls=14),
               load_dataset("demo:train"), dspy_metric("str-em"), retriever=demo_retriever,
               out=out)
    assert res.stopped_by_budget and 1 <= res.n_complete < 50
    assert len(lm.engine.calls) <= 14 + 2  # at most one question in flight past the limit
    assert out.is_file() and read_artifact(out)["manifest"]["optuna"]["trial"] == res.best_trial


def test_cost_penalty_is_subtracted_per_question(tmp_path, use_lm, demo_retriever):
    use_lm(_fake_lm())
    res = tune(_cfg(tmp_path, trials=2, teleprompters=("labeled",), cost_penalty=0.1),
               load_dataset("demo:train"), dspy_metric("str-em"), retriever=demo_retriever)
    study = optuna.load_study(study_name="s1", storage=f"sqlite:///{tmp_path}/t.db")
    for t in study.trials:
        assert t.value == pytest.approx(t.user_attrs["score"] - 0.1 * t.user_attrs[
            "lm_calls_per_q"])
        assert t.user_attrs["lm_calls_per_q"] == 2  # vanilla RAG: clarify + long answer
    assert res.best_value is not None


def test_bad_settings_are_clear_errors(tmp_path, use_lm, demo_retriever):
    with pytest.raises(ConfigError, match="whole searches"):
        tune(_cfg(tmp_path, teleprompters=("mipro",)), load_dataset("demo:train"),
             dspy_metric("str-em"), retriever=demo_retriever)
    with pytest.raises(ConfigError, match="not a database URL"):
        tune(_cfg(tmp_path, storage="tune.db"), load_dataset("demo:train"),
             dspy_metric("str-em"), retriever=demo_retriever)
    with pytest.raises(ConfigError, match="both fixed"):
        tune(_cfg(tmp_path, program_config={"k": 3}), load_dataset("demo:train"),
             dspy_metric("str-em"), retriever=demo_retriever)
    assert redact_url("postgresql://u:secret@h:5432/db") == "postgresql://u:***@h:5432/db"


def test_tune_refuses_dev_data_in_the_api_unless_flagged(tmp_path, use_lm, demo_retriever):
    use_lm(_fake_lm())
    with pytest.raises(ConfigError, match="refusing.*'demo:dev' is not a training split"):
        tune(_cfg(tmp_path), load_dataset("demo:dev"), dspy_metric("str-em"),
             retriever=demo_retriever)
    with pytest.raises(ConfigError, match="'asqa:dev' is not a training split"):
        tune(_cfg(tmp_path, train="asqa:dev"), load_dataset("demo:train"),
             dspy_metric("str-em"), retriever=demo_retriever)
    assert not (tmp_path / "t.db").exists()  # refused before any study was made
    out = tmp_path / "dev.json"
    tune(_cfg(tmp_path, trials=1, teleprompters=("labeled",), allow_eval_splits=True),
         load_dataset("demo:dev"), dspy_metric("str-em"), retriever=demo_retriever, out=out)
    guard = read_artifact(out)["manifest"]["data_guard"]
    assert guard["allow_eval_splits"] and guard["violations"] == [
        "'demo:dev' is not a training split"]


def test_knn_trial_installs_per_predictor_k(tmp_path, use_lm, demo_retriever):
    use_lm(_fake_lm())
    out = tmp_path / "knn.json"
    tune(_cfg(tmp_path, trials=1, teleprompters=("knn",)), load_dataset("demo:train"),
         dspy_metric("str-em"), retriever=demo_retriever, out=out, knn_encoder=HashEncoder())
    m = read_artifact(out)["manifest"]
    assert m["optimizer"]["name"] == "knn" and m["optimizer"]["k"] == 2
    prog = load_artifact(out, retriever=demo_retriever, knn_encoder=HashEncoder())
    assert all(isinstance(p, KNNPredict) for _, p in prog.named_predictors())


def _tune_cmd(url: str, db: Path, out: Path, trials: int) -> list[str]:
    return [sys.executable, "-m", "ambiqa.cli", "tune", "closed_book", "--study", "kill",
            "--storage", f"sqlite:///{db}", "--trials", str(trials), "--train", "demo:train",
            "--metric", "str-em", "--teleprompters", "labeled,bootstrap", "--max-demos", "1",
            "--n-sets", "2", "--pool-size", "2", "--out", str(out), "--lm", "openai/fake",
            "--api-base", url, "--no-cache"]


def test_killed_tune_process_resumes(tmp_path):
    """SIGKILL a tune subprocess mid-study (fake OpenAI endpoint), rerun, finish the study."""
    from ambiqa.testing_server import serve

    url, shutdown = serve(delay=0.05)
    db, out = tmp_path / "kill.db", tmp_path / "kill.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AMBIQA_PARALLEL": "1"}
    try:
        proc = subprocess.Popen(_tune_cmd(url, db, out, 40), cwd=ROOT, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines: list[str] = []
        two_done = threading.Event()

        def read() -> None:  # the CLI prints one line per finished trial
            for line in iter(proc.stdout.readline, ""):
                lines.append(line)
                if sum(": complete value" in ln for ln in lines) >= 2:
                    two_done.set()

        threading.Thread(target=read, daemon=True).start()
        # wait for the event (never touch the DB while it starts up), not for a fixed time
        assert two_done.wait(timeout=90), "".join(lines)[-2000:]
        done = sum(": complete value" in ln for ln in lines)
        assert proc.poll() is None, "".join(lines)[-2000:]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert done >= 2
        study = optuna.load_study(study_name="kill", storage=f"sqlite:///{db}")
        before = sum(t.state.name == "COMPLETE" for t in study.trials)
        assert before < 40
        target = before + 2
        res = subprocess.run(_tune_cmd(url, db, out, target), cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr[-2000:]
        summary = json.loads(res.stdout.strip().splitlines()[-1])
        assert summary["n_complete"] == target and summary["ran_trials"] == 2
        assert read_artifact(out)["manifest"]["optuna"]["study"] == "kill"
    finally:
        shutdown()




def test_zero_shot_is_the_first_trial_and_ships_unless_beaten(tmp_path, use_lm, demo_retriever):
    """Every new study scores the program as written first (no demos, its own settings), on
    the same held-out questions: a study whose demos only hurt ships zero-shot."""
    import dspy

    from ambiqa.testing import ScriptedEngine, titles_as_answers

    class TurnEngine(ScriptedEngine):
        with_demos = False

        def complete(self, request):
            self.with_demos = len(request.messages) > 1
            return super().complete(request)

    engine = TurnEngine({
        "ClarifyFromPassages": titles_as_answers,
        "WriteLongAnswer": lambda inp: {"long_answer": (
            "I cannot say." if engine.with_demos else "Answers: " + inp["interpretations"])},
    })
    use_lm(dspy.LM("scripted/fake", engine=engine, cache=False, num_retries=0))
    out = tmp_path / "best.json"
    res = tune(_cfg(tmp_path, trials=3, tune_knobs=False), load_dataset("demo:train"),
               dspy_metric("str-em"), retriever=demo_retriever, out=out)
    study = optuna.load_study(study_name="s1", storage=f"sqlite:///{tmp_path}/t.db")
    first = study.trials[0]
    assert first.user_attrs["zero_shot"] is True
    assert all(v == 0 for k, v in first.params.items() if k.startswith("demos."))
    assert study.best_value == first.value  # nothing beat it (ties keep the first)
    writer_demos = read_artifact(out)["state"]["long_answer.write"]["demos"]
    assert res.best_trial == first.number or writer_demos == []


def test_workers_opening_a_new_study_database_together_retry_the_schema_race(
        tmp_path, monkeypatch):
    """Two workers on a new SQLite file: the one that loses the race to create the tables
    sees "table studies already exists"; it opens the database again instead of dying with
    a hint that blames the URL (issue 42)."""
    from ambiqa.optimizers import tune as tune_mod

    real = optuna.storages.RDBStorage
    calls = {"n": 0}

    def racing(url, **kw):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("(sqlite3.OperationalError) table studies already exists")
        return real(url, **kw)

    monkeypatch.setattr(optuna.storages, "RDBStorage", racing)
    storage = tune_mod.make_storage(f"sqlite:///{tmp_path}/race.db")
    assert calls["n"] == 2 and storage is not None
    calls["n"] = -10  # every try fails: the last error is reported, once
    monkeypatch.setattr(optuna.storages, "RDBStorage",
                        lambda url, **kw: (_ for _ in ()).throw(RuntimeError("no driver")))
    with pytest.raises(ConfigError, match="cannot open Optuna storage"):
        tune_mod.make_storage(f"sqlite:///{tmp_path}/other.db")


def test_two_real_workers_create_a_new_study_together(tmp_path):
    """The race for real: two processes create the same study on a new SQLite file at the
    same moment, four times over; both succeed every time."""
    code = ("import sys, optuna\nfrom ambiqa.optimizers.tune import make_storage\n"
            "optuna.logging.set_verbosity(optuna.logging.ERROR)\n"
            "s = make_storage(sys.argv[1])\n"
            "optuna.create_study(study_name='s', storage=s, direction='maximize', "
            "load_if_exists=True)\nprint('ok')\n")
    for i in range(4):
        url = f"sqlite:///{tmp_path}/race{i}.db"
        procs = [subprocess.Popen([sys.executable, "-c", code, url], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(2)]
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0 and out.strip() == "ok", err[-800:]
