"""Kill and resume: SIGKILL ``ambiqa evaluate``, ``compile``, ``index`` (and ``tune``) at
random points *inside their work*, several seeds, then check that nothing is torn and that a
resumed run equals an uninterrupted one.

Every kill is triggered by an event that proves the process is mid-work -- some but not all
result rows written (evaluate), some but not all of the compile loop's LM calls served by the
endpoint (compile), the temporary build directory present (index), some but not all trials
reported complete (tune) -- and each test asserts the process was still running when killed,
so no case passes by killing during imports or after completion. "Data lost" is computed by
comparing what the resumed run holds with an uninterrupted reference run (rows missing,
recorded twice or different; artifacts or indexes that differ; trials finished before the
kill that are gone or changed after the resume) and recorded before it is asserted to be 0.

What each command promises:

* ``evaluate`` checkpoints per example (one fsynced JSON line each); ``--resume`` redoes only
  the examples not recorded, so the resumed results equal an uninterrupted run's.
* ``compile`` does not checkpoint mid-run (DSPy's BootstrapFewShot keeps its state in
  memory); the promise is that a kill never leaves a half-written artifact: the artifact
  either does not exist or is a complete, loadable one (atomic write), and rerunning works.
* ``index`` builds into a temporary directory and renames it into place at the end: a kill
  leaves no index that loads half-built, and the next build clears the leftovers.
* ``tune`` (Optuna over SQLite) resumes its study: see ``test_tune_kill_and_resume``.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.faults.conftest import cli_env, run_cli

pytestmark = pytest.mark.fault("Kill and resume")

SEEDS = (0, 1, 2)
N_EVAL = 10


def _popen(args: list[str], env: dict[str, str], stdout: int = subprocess.DEVNULL,
           ) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "ambiqa.cli", *args], env=env,
                            stdout=stdout, stderr=subprocess.DEVNULL, text=True)


def _kill_when(proc: subprocess.Popen, ready, max_wait: float) -> tuple[bool, bool]:
    """SIGKILL ``proc`` as soon as ``ready()`` is true. Returns ``(alive, ready)``: whether
    it was still running when killed, and whether the mid-work condition held then.
    (``ready`` watches the files or counters the process writes; the 10 ms loop only
    samples them.)"""
    end = time.monotonic() + max_wait
    hit = False
    while time.monotonic() < end and proc.poll() is None:
        hit = bool(ready())
        if hit:
            break
        time.sleep(0.01)
    alive = proc.poll() is None
    if alive:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    return alive, hit


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def _check_no_torn_files(run_dir: Path) -> int:
    """Every visible JSON / JSONL file parses completely; returns the number of rows."""
    rows = 0
    for p in run_dir.rglob("*"):
        if p.name.startswith(".") or not p.is_file():
            continue
        if p.suffix == ".json":
            json.loads(p.read_text(encoding="utf-8"))
        elif p.suffix == ".jsonl":
            data = p.read_text(encoding="utf-8")
            for line in data.splitlines():
                if line.strip():
                    json.loads(line)
                    rows += 1
    return rows


def _rows(run_dir: Path) -> list[tuple[str, dict]]:
    out = []
    path = run_dir / "results.jsonl"
    if not path.exists():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            out.append((str(row["id"]), {k: row.get(k) for k in ("question", "prediction",
                                                                "error", "metrics")}))
    return out


def _comparable(run_dir: Path) -> dict[str, dict]:
    return dict(_rows(run_dir))


def rows_lost(got: list[tuple[str, dict]], reference: dict[str, dict]) -> int:
    """Rows lost against an uninterrupted reference: ids missing, ids recorded more than once
    (each extra copy), and rows whose content differs."""
    seen: dict[str, int] = {}
    lost = 0
    for id_, row in got:
        seen[id_] = seen.get(id_, 0) + 1
        if seen[id_] > 1 or reference.get(id_) != row:
            lost += 1
    lost += sum(1 for id_ in reference if id_ not in seen)
    return lost


def test_rows_lost_counts_missing_duplicated_and_different_rows():
    ref = {"a": {"x": 1}, "b": {"x": 2}, "c": {"x": 3}}
    assert rows_lost(list(ref.items()), ref) == 0
    assert rows_lost([("a", {"x": 1}), ("a", {"x": 1}), ("b", {"x": 9})], ref) == 3


# ---- evaluate ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def slow_endpoint():
    """The fake endpoint with a small delay, so kills land while calls are in flight."""
    from tests.faults.conftest import _load_fake_server

    url, shutdown = _load_fake_server().serve(delay=0.15)
    yield url, shutdown.server   # the server counts the requests it has served
    shutdown()


def _eval_args(out: Path, url: str, resume: bool = False) -> list[str]:
    return ["evaluate", "closed_book", "--data", f"asqa:dev:{N_EVAL}", "--metrics",
            "str-em,rouge-l", "--out", str(out), "--lm", "openai/fake", "--api-base", url,
            "--threads", "2", "--no-cache", *(["--resume"] if resume else [])]


def test_evaluate_killed_at_random_points_resumes_to_the_same_results(
        tmp_path, slow_endpoint, shared_data, record_property):
    url, _ = slow_endpoint
    env = cli_env(tmp_path)
    ref = tmp_path / "reference"
    res = run_cli(_eval_args(ref, url), env, timeout=180)
    assert res.returncode == 0, res.stderr[-2000:]
    expected = _comparable(ref)
    assert len(expected) == N_EVAL
    lost = 0
    record_property("runs", len(SEEDS))
    for seed in SEEDS:
        rng = random.Random(seed)
        run = tmp_path / f"run{seed}"
        proc = _popen(_eval_args(run, url), env)
        # kill once a random number of examples is recorded: calls in flight, rows pending
        target = rng.randint(1, N_EVAL - 2)
        alive, hit = _kill_when(proc, lambda t=target, r=run: _lines(r / "results.jsonl") >= t,
                                max_wait=60)
        done_before = _lines(run / "results.jsonl")
        assert alive and hit, f"seed {seed}: the kill did not land mid-run"
        assert 0 < done_before < N_EVAL, f"seed {seed}: {done_before} rows at the kill"
        _check_no_torn_files(run)
        resumed = run_cli(_eval_args(run, url, resume=True), env, timeout=180)
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        _check_no_torn_files(run)
        lost += rows_lost(_rows(run), expected)
        record_property("data_lost", lost)
    assert lost == 0, f"{lost} rows lost or changed against the uninterrupted run"


def test_evaluate_torn_last_line_is_repaired_on_resume(tmp_path, slow_endpoint, shared_data,
                                                       record_property):
    """The worst a kill can do to results.jsonl is a partial last line; resume repairs it."""
    slow_endpoint, _ = slow_endpoint
    env = cli_env(tmp_path)
    run = tmp_path / "run"
    assert run_cli(_eval_args(run, slow_endpoint), env, timeout=180).returncode == 0
    expected = _comparable(run)
    data = (run / "results.jsonl").read_bytes().splitlines(keepends=True)
    torn = b"".join(data[:4]) + data[4][: len(data[4]) // 2]
    (run / "results.jsonl").write_bytes(torn)
    res = run_cli(_eval_args(run, slow_endpoint, resume=True), env, timeout=180)
    assert res.returncode == 0, res.stderr[-2000:]
    lost = rows_lost(_rows(run), expected)
    record_property("data_lost", lost)
    assert lost == 0


# ---- compile -------------------------------------------------------------------------------
def _compile_args(out: Path, url: str) -> list[str]:
    return ["compile", "closed_book", "--train", "demo:train", "--metric", "rouge-l",
            "--optimizer", "bootstrap", "--k", "3", "--lm", "openai/fake", "--api-base", url,
            "--no-cache", "--out", str(out)]


def test_compile_killed_leaves_no_half_written_artifact(tmp_path, slow_endpoint,
                                                        record_property):
    from ambiqa.cli.optimize_cmds import load_for_export
    from ambiqa.optimizers.artifact import read_artifact

    url, server = slow_endpoint
    env = cli_env(tmp_path)
    ref = tmp_path / "ref.json"
    before = server.served
    res = run_cli(_compile_args(ref, url), env, timeout=180)
    assert res.returncode == 0, res.stderr[-2000:]
    calls = server.served - before   # the compile loop's LM calls (one request each)
    assert calls >= 3, calls
    reference = read_artifact(ref)["state"]
    lost = 0
    record_property("runs", len(SEEDS))
    for seed in SEEDS:
        rng = random.Random(100 + seed)
        out = tmp_path / f"a{seed}" / "prog.json"
        if seed == 2:  # a previous artifact exists: a killed recompile must leave it intact
            out.parent.mkdir(parents=True)
            out.write_bytes(ref.read_bytes())
        # inside the compile loop: after k of its LM calls were served, before the last one
        k = rng.randint(1, calls - 1)
        start = server.served
        proc = _popen(_compile_args(out, url), env)
        alive, hit = _kill_when(proc, lambda s0=start, k=k: server.served - s0 >= k,
                                max_wait=120)
        served = server.served - start
        assert alive and hit, f"seed {seed}: the kill did not land inside the compile loop"
        assert 1 <= served < calls, (seed, served, calls)
        if out.exists():  # complete or absent, never torn
            read_artifact(out)
            load_for_export(str(out))
            if seed == 2:
                lost += read_artifact(out)["state"] != reference
        else:
            lost += seed == 2  # the previous artifact was destroyed
        visible = [p for p in out.parent.glob("*") if not p.name.startswith(".")] \
            if out.parent.exists() else []
        assert visible in ([], [out]), visible
        res = run_cli(_compile_args(out, url), env, timeout=180)
        assert res.returncode == 0, res.stderr[-2000:]
        lost += read_artifact(out)["state"] != reference  # same demos as an unkilled run
        record_property("data_lost", lost)
    assert lost == 0, f"{lost} artifacts differ from the uninterrupted compile's"


# ---- index ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_corpus(tmp_path_factory, request) -> Path:
    shared = Path(__file__).resolve().parents[3] / "shared" / "data" / "corpus" \
        / "wiki_passages.jsonl"
    if not shared.is_file():
        pytest.skip("shared corpus not found")
    out = tmp_path_factory.mktemp("corpus") / "tiny.jsonl"
    with open(shared, encoding="utf-8") as fh:
        out.write_text("".join(next(fh) for _ in range(40)), encoding="utf-8")
    return out


def _index_args(corpus: Path, root: Path) -> list[str]:
    return ["index", str(corpus), "--name", "tiny", "--index-root", str(root)]


def test_index_killed_leaves_no_half_index_that_loads(tmp_path, tiny_corpus, record_property):
    from ambiqa.errors import RetrievalIndexError
    from ambiqa.retrieval.colbert import ColBERTRetriever

    env = cli_env(tmp_path)
    root = tmp_path / "ix"
    res = run_cli(_index_args(tiny_corpus, root), env, timeout=400)
    if res.returncode != 0:
        pytest.fail(f"reference index build failed: {res.stderr[-1500:]}")
    reference = ColBERTRetriever.load(root, "tiny").fingerprint
    lost = 0
    record_property("runs", len(SEEDS))
    for seed in SEEDS:
        rng = random.Random(200 + seed)
        r = tmp_path / f"ix{seed}"
        r.mkdir()
        if seed == 2:  # an older complete index of that name must survive a killed rebuild
            import shutil

            shutil.copytree(root / "tiny", r / "tiny")
        proc = _popen(_index_args(tiny_corpus, r), env)
        # mid-build: the temporary build directory exists and holds a random number of files
        # (collection written, then the indexer's outputs appear one by one)
        want = rng.randint(1, 3)

        def building(r=r, want=want) -> bool:
            tmps = [p for p in r.glob("tiny.tmp-*") if p.is_dir()]
            return bool(tmps) and sum(1 for _ in tmps[0].iterdir()) >= want

        alive, hit = _kill_when(proc, building, max_wait=400)
        assert alive and hit, f"seed {seed}: the kill did not land during the build"
        try:
            got = ColBERTRetriever.load(r, "tiny")
            lost += got.fingerprint != reference  # only a complete index ever loads
        except RetrievalIndexError:
            lost += seed == 2  # a killed rebuild destroyed the previous index
        res = run_cli(_index_args(tiny_corpus, r), env, timeout=400)
        assert res.returncode == 0, res.stderr[-1500:]
        lost += ColBERTRetriever.load(r, "tiny").fingerprint != reference
        leftovers = [p.name for p in r.iterdir() if p.name != "tiny"]
        assert not leftovers, f"stale build directories left: {leftovers}"
        record_property("data_lost", lost)
    assert lost == 0, f"{lost} index states differ from the uninterrupted build"


# ---- tune ----------------------------------------------------------------------------------
TUNE_TRIALS = 4


def _tune_args(db: Path, out: Path, url: str) -> list[str]:
    return ["tune", "closed_book", "--study", "s", "--storage", f"sqlite:///{db}", "--trials",
            str(TUNE_TRIALS), "--train", "demo:train", "--metric", "rouge-l", "--n-val", "2",
            "--out", str(out), "--lm", "openai/fake", "--api-base", url, "--no-cache"]


def test_tune_kill_and_resume(tmp_path, slow_endpoint, record_property):
    """Kill ``ambiqa tune`` after some but not all trials completed; rerunning the same
    command resumes the study until ``--trials`` trials are complete. The SQLite study stays
    intact, the best-trial artifact is complete or absent, never torn, and every trial that
    was complete before the kill is still there, unchanged, after the resume (lost
    otherwise). Trials killed mid-way stay RUNNING or FAIL and are not counted; the sampler's
    later choices may differ from an uninterrupted run's, so the comparison is on the
    finished trials, not on the parameters of later ones."""
    import sqlite3
    import threading

    import optuna

    from ambiqa.optimizers.artifact import read_artifact

    url, _ = slow_endpoint
    env = cli_env(tmp_path)
    lost = 0
    record_property("runs", 2)
    for seed in SEEDS[:2]:
        rng = random.Random(300 + seed)
        db, out = tmp_path / f"t{seed}.db", tmp_path / f"best{seed}.json"
        proc = _popen(_tune_args(db, out, url), env, stdout=subprocess.PIPE)
        k = rng.randint(1, TUNE_TRIALS - 1)
        finished = threading.Event()
        lines: list[str] = []

        def read(proc=proc, k=k, finished=finished, lines=lines) -> None:
            for line in iter(proc.stdout.readline, ""):  # one line per finished trial
                lines.append(line)
                if sum(": complete value" in ln for ln in lines) >= k:
                    finished.set()

        threading.Thread(target=read, daemon=True).start()
        alive, hit = _kill_when(proc, finished.is_set, max_wait=120)
        assert alive and hit, f"seed {seed}: the kill did not land between trials {lines}"
        if out.exists():
            read_artifact(out)
        con = sqlite3.connect(db)
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        con.close()
        storage = f"sqlite:///{db}"
        before = {t.number: (t.value, t.params) for t in optuna.load_study(
            study_name="s", storage=storage).get_trials(deepcopy=False)
            if t.state == optuna.trial.TrialState.COMPLETE}
        assert k <= len(before) < TUNE_TRIALS, (k, before)
        res = run_cli(_tune_args(db, out, url), env, timeout=300)
        assert res.returncode == 0, res.stderr[-2000:]
        study = optuna.load_study(study_name="s", storage=storage)
        after = {t.number: (t.value, t.params) for t in study.get_trials(deepcopy=False)
                 if t.state == optuna.trial.TrialState.COMPLETE}
        lost += sum(1 for n, v in before.items() if after.get(n) != v)
        assert len(after) == TUNE_TRIALS
        assert read_artifact(out)["manifest"]["optuna"]["study"] == "s"
        record_property("data_lost", lost)
    assert lost == 0, f"{lost} trials finished before the kill were lost or changed"
