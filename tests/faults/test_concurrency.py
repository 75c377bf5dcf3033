"""Concurrency: an evaluation on 8 threads sharing one LM gives exactly the results of 1
thread, with the LM's response cache and the retrieval cache *off* (a cache would hand the
8-thread run the 1-thread run's answers and hide any race); two processes writing one Optuna
SQLite study leave it complete and uncorrupted."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
import textwrap

import dspy
import pytest

from ambiqa.testing import SeededEncoder
from tests.faults.conftest import cli_env

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
    from ambiqa.evaluation.runs.runner import evaluate
    from ambiqa.programs.diva import Diva
    from ambiqa.retrieval.bm25 import BM25Retriever
    from tests.faults.conftest import small_passages

    # a plain index, no retrieval cache: every search of both runs really runs
    retriever = BM25Retriever.build(small_passages(), tmp_path / f"bm25-{threads}")
    examples = [dspy.Example(id=f"q{i}", question=q).with_inputs("question")
                for i, q in enumerate(QUESTIONS)]
    metrics = {"len": lambda ex, pred: float(len(pred.answer))}
    out = tmp_path / f"run-{threads}"
    evaluate(Diva(retriever, encoder=SeededEncoder()), examples, metrics, out_dir=out,
             threads=threads, progress=False)
    rows = []
    for line in (out / "results.jsonl").read_text().splitlines():
        r = json.loads(line)
        rows.append((r["id"], {k: r[k] for k in ("question", "prediction", "error", "metrics")}))
    return rows


def test_eight_threads_equal_one_thread(tmp_path, use_lm, monkeypatch, record_property):
    from ambiqa.testing import scripted_lm
    from tests.faults.test_kill_resume import rows_lost

    monkeypatch.setenv("AMBIQA_PARALLEL", "4")     # inner fan-out too
    lm = use_lm(scripted_lm(_handlers(), delay_s=0.002, cache=False))   # no response cache
    one = _rows(1, tmp_path, lm)
    calls_one = len(lm.engine.calls)
    eight = _rows(8, tmp_path, lm)
    # the 8-thread run made every call again (nothing came from a cache)
    assert len(lm.engine.calls) == 2 * calls_one > 0
    reference = dict(one)
    assert len(reference) == len(one) == len(QUESTIONS)
    assert not any(r["error"] for r in reference.values())
    lost = rows_lost(eight, reference)
    record_property("data_lost", lost)
    assert lost == 0, f"{lost} rows of the 8-thread run are missing, doubled or different"


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
    numbers = [t.number for t in trials]
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    # against the 41 trials asked for: missing, doubled or unfinished ones are lost
    lost = (len(set(range(41)) - set(numbers)) + (len(numbers) - len(set(numbers)))
            + (len(trials) - len(complete)))
    record_property("data_lost", lost)
    assert lost == 0 and len(trials) == 41, (lost, numbers)
