"""Concurrency: an evaluation on 8 threads sharing one LM (with its response cache) and one
retrieval cache gives exactly the results of 1 thread; two processes writing one Optuna SQLite
study leave it complete and uncorrupted."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
import textwrap

import dspy
import pytest

from tests.faults.conftest import HashEncoder, cli_env

pytestmark = pytest.mark.fault("Concurrency")

QUESTIONS = [f"Who played Weasley brother number {i} in film {i % 3}?" for i in range(16)]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:6]


def _handlers():
    """Deterministic replies that depend on the inputs only (so thread order cannot matter)."""
    return {
        "TypeAmbiguity": lambda i: {"reason": "r" + _digest(i["question"]),
                                    "ambiguity_type": "AmbObj"},
        "PseudoInterpretations": lambda i: {"interpretations": [
            f"{i['question'].split('?')[0]} (reading {n})?" for n in (1, 2)]},
        "VerifyRetrieval": lambda i: {"evidence": "none", "verdict": "yes" if int(
            _digest(i["interpretation"]), 16) % 3 != 0 else "no"},
        "ClarifyFromPassages": lambda i: {"pairs": [{"question": "Q " + _digest(i["passages"]),
                                                     "answer": "A", "passage": 1}]},
        "WriteLongAnswer": lambda i: {"long_answer": "L " + _digest(i["interpretations"])},
        "ClosedBookLongAnswer": lambda i: {"long_answer": "C " + _digest(i["question"])},
    }


def _rows(threads: int, tmp_path, lm) -> dict[str, dict]:
    from ambiqa.evaluation.runner import evaluate
    from ambiqa.programs.diva import Diva
    from ambiqa.retrieval.bm25 import BM25Retriever
    from ambiqa.retrieval.cache import CachedRetriever
    from tests.faults.conftest import small_passages

    bm25 = BM25Retriever.build(small_passages() * 1 + [], tmp_path / f"bm25-{threads}")
    retriever = CachedRetriever(bm25, tmp_path / "retrieval-cache")    # shared by both runs
    examples = [dspy.Example(id=f"q{i}", question=q).with_inputs("question")
                for i, q in enumerate(QUESTIONS)]
    metrics = {"len": lambda ex, pred: float(len(pred.answer))}
    out = tmp_path / f"run-{threads}"
    evaluate(Diva(retriever, encoder=HashEncoder()), examples, metrics, out_dir=out,
             threads=threads, progress=False)
    rows = {}
    for line in (out / "results.jsonl").read_text().splitlines():
        r = json.loads(line)
        assert r["id"] not in rows
        rows[r["id"]] = {k: r[k] for k in ("question", "prediction", "error", "metrics")}
    return rows


def test_eight_threads_equal_one_thread(tmp_path, use_lm, monkeypatch, record_property):
    from ambiqa.testing import scripted_lm

    monkeypatch.setenv("AMBIQA_PARALLEL", "4")     # inner fan-out too
    lm = use_lm(scripted_lm(_handlers(), delay_s=0.002, cache=True))
    one = _rows(1, tmp_path, lm)
    eight = _rows(8, tmp_path, lm)
    assert len(one) == len(QUESTIONS) and not any(r["error"] for r in one.values())
    assert eight == one
    record_property("cases", 2)
    record_property("data_lost", 0)


def test_two_processes_share_one_sqlite_study(tmp_path, record_property):
    """Both workers use ambiqa's own storage (``make_storage``) on one SQLite file."""
    pytest.importorskip("optuna")
    db = tmp_path / "study.db"
    url = f"sqlite:///{db}"
    worker = textwrap.dedent(f"""
        import optuna, sys
        from ambiqa.optimizers.tune import make_storage
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        storage = make_storage({url!r})
        study = optuna.create_study(study_name="s", storage=storage, direction="maximize",
                                    load_if_exists=True)
        study.optimize(lambda t: t.suggest_float("x", 0, 1) ** 2, n_trials=int(sys.argv[1]))
    """)
    env = cli_env(tmp_path)
    # create the study once first: two racing first-time creates are Optuna's own problem
    subprocess.run([sys.executable, "-c", worker, "1"], env=env, check=True, timeout=120)
    procs = [subprocess.Popen([sys.executable, "-c", worker, "20"], env=env,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    import optuna

    study = optuna.load_study(study_name="s", storage=url)
    trials = study.get_trials(deepcopy=False)
    assert len(trials) == 41
    assert sorted(t.number for t in trials) == list(range(41))
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    record_property("cases", 2)
    record_property("data_lost", 0)
