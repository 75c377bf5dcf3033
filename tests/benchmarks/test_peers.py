"""benchmarks/peers.py: Haystack's and LlamaIndex's RAG pipelines beside ambiqa's vanilla_rag
against the fake OpenAI-compatible server -- the rows ambiqa's evaluate writes, resume, and
the table made from the stored rows."""

from __future__ import annotations

import json

import pytest

CORPUS = [
    {"id": "p1", "title": "Paris", "text": "Paris is the capital of France."},
    {"id": "p2", "title": "Lyon", "text": "Lyon is the third largest city in France."},
    {"id": "p3", "title": "Harry Potter (films)",
     "text": "James Phelps played Fred Weasley and Oliver Phelps played George Weasley."},
    {"id": "p4", "title": "Ron Weasley", "text": "Rupert Grint played Ron Weasley."},
    {"id": "p5", "title": "Berlin", "text": "Berlin is the capital of Germany."},
    {"id": "p6", "title": "Madrid", "text": "Madrid is the capital of Spain."},
]
QUESTIONS = [
    {"id": "q1", "question": "What is the capital of France?",
     "qa_pairs": [{"question": "What is the capital of France?", "short_answers": ["Paris"]}],
     "long_answer": "The capital of France is Paris."},
    {"id": "q2", "question": "Who played the Weasley brothers?",
     "qa_pairs": [{"question": "Who played Fred Weasley?", "short_answers": ["James Phelps"]},
                  {"question": "Who played Ron Weasley?", "short_answers": ["Rupert Grint"]}],
     "long_answer": "James Phelps played Fred Weasley and Rupert Grint played Ron."},
    {"id": "q3", "question": "What is the capital of Spain?",
     "qa_pairs": [{"question": "What is the capital of Spain?", "short_answers": ["Madrid"]}],
     "long_answer": "The capital of Spain is Madrid."},
]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _lines(path):
    return path.read_text(encoding="utf-8").splitlines()


@pytest.fixture()
def peers(benchmark_script):
    mod = benchmark_script("peers")
    missing = mod.missing_packages()
    if missing:
        pytest.skip("the peer frameworks are not installed (pip install -e '.[peers]'): "
                    + " ".join(missing))
    return mod


@pytest.fixture()
def fresh_dspy():
    """ambiqa's evaluate configures DSPy process-wide, as the CLI does; restored after."""
    from dspy.dsp.utils.settings import main_thread_config

    saved = dict(main_thread_config)
    yield
    main_thread_config.clear()
    main_thread_config.update(saved)


@pytest.fixture()
def setup(tmp_path, fresh_dspy):
    import ambiqa
    from ambiqa.testing_server import serve

    corpus = _jsonl(tmp_path / "corpus.jsonl", CORPUS)
    data = _jsonl(tmp_path / "questions.jsonl", QUESTIONS)
    ambiqa.index(str(corpus), name="tiny", kind="bm25", index_root=str(tmp_path / "indexes"))
    url, shutdown = serve(0.0)
    common = ["--api-base", url, "--model", "fake", "--data", f"jsonl:{data}",
              "--corpus", str(corpus), "--index", "bm25:tiny",
              "--index-root", str(tmp_path / "indexes"), "--out", str(tmp_path / "peers"),
              "--cache-dir", str(tmp_path / "embeddings")]
    yield tmp_path / "peers", common
    shutdown()


def test_both_pipelines_write_ambiqa_rows_resume_and_table(peers, setup):
    out, common = setup
    systems = ["--systems", "haystack,llamaindex,vanilla_rag,diva"]
    assert peers.main([*common, *systems, "--n", "2", "--block", "1"]) == 0

    runs = {name: out / name
            for name in ("haystack-dense", "llamaindex-dense", "vanilla_rag", "diva")}
    for name, run in runs.items():
        rows = [json.loads(line) for line in _lines(run / "results.jsonl")]
        assert [r["id"] for r in rows] == ["q1", "q2"], name
        spec = json.loads((run / "run.json").read_text())
        assert spec["data"].endswith(":2") and spec["lm"] == "openai/fake"
        assert (run / "summary.json").is_file() and (run / "report.md").is_file()
        for r in rows:  # the row shape ambiqa's evaluate writes
            assert r["error"] is None
            assert set(r["metrics"]) >= {"str-em", "rouge-l", "mrecall@5"}
            assert isinstance(r["prediction"]["answer"], str)
            assert r["wall_s"] > 0
            cost = r["cost"]
            assert cost["retriever_calls"] >= 1 and cost["lm_calls"] >= 1
            assert cost["input_tokens"] > 0 and cost["output_tokens"] > 0
            assert cost["computed_tokens"] + cost["cached_tokens"] == cost["input_tokens"]
    for name in ("haystack-dense", "llamaindex-dense"):
        spec = json.loads((runs[name] / "run.json").read_text())
        assert spec["max_tokens"] == peers.default_max_tokens()  # WriteLongAnswer's cap
        assert spec["program_config"]["retriever"] == "dense"
        for r in map(json.loads, _lines(runs[name] / "results.jsonl")):
            assert r["cost"]["lm_calls"] == 1  # one call, metered at the HTTP layer
            assert r["cost"]["retriever_calls"] == 1
            assert len(r["prediction"]["passages"]) == 5  # --k 5 of the 6 passages
            assert r["prediction"]["answer"] == "OK"  # the fake server's plain-text reply
            assert r["cost"]["calls_by_module"] == {f"{name.split('-')[0]}.generator": 1}

    # a second run into the same directories without --resume is refused, nothing touched
    before = {name: _lines(run / "results.jsonl") for name, run in runs.items()}
    with pytest.raises(Exception, match="already holds a run"):
        peers.main([*common, *systems, "--n", "2"])
    assert {name: _lines(run / "results.jsonl") for name, run in runs.items()} == before

    # --resume with one more question: the stored rows stay, the new one is appended
    assert peers.main([*common, *systems, "--n", "3", "--resume"]) == 0
    for name, run in runs.items():
        lines = _lines(run / "results.jsonl")
        assert lines[:2] == before[name] and len(lines) == 3, name
        assert json.loads(lines[2])["id"] == "q3"
        assert json.loads((run / "run.json").read_text())["data"].endswith(":3")
    # nothing left to do: no row added
    assert peers.main([*common, *systems, "--n", "3", "--resume"]) == 0
    assert all(len(_lines(run / "results.jsonl")) == 3 for run in runs.values())

    # the table, from the stored rows
    table = (out / "peers.md").read_text(encoding="utf-8")
    assert peers.main(["--table-only", "--out", str(out)]) == 0
    assert (out / "peers.md").read_text(encoding="utf-8") == table
    body = [line for line in table.splitlines() if line.startswith("| `")]
    assert [line.split(" | ")[0] for line in body] == [
        "| `vanilla_rag`", "| `diva`", "| `haystack-dense`", "| `llamaindex-dense`"]
    head = next(line for line in table.splitlines() if line.startswith("| system"))
    assert "q/h" in head and "vanilla_rag ÷ this" in head and "STR-EM" in head
    cells = body[2].split(" | ")
    assert cells[1] == "3"
    result = json.loads((out / "peers.json").read_text())
    hay = next(s for s in result["systems"] if s["system"] == "haystack-dense")
    assert hay["qph"]["n"] == 3 and hay["qph"]["qph"] > 0
    assert hay["baseline_qph_ratio"]["n"] == 3
    assert hay["vs_baseline"]["rouge-l"]["n_shared"] == 3
    assert "`vanilla_rag` vs `haystack-dense` (n = 3)" in table
    assert "`diva` vs `llamaindex-dense` (n = 3)" in table  # Diva's standing vs each peer
    assert hay["diva_qph_ratio"]["n"] == 3

    # ambiqa compare pairs the peers with ambiqa's run like any two runs
    from ambiqa.evaluation.reports.compare import compare_runs

    cmp = compare_runs([runs["vanilla_rag"], runs["haystack-dense"]])
    assert {p["n_shared"] for p in cmp["paired"]} == {3}


def test_bm25_peers(peers, setup):
    out, common = setup
    assert peers.main([*common, "--systems", "haystack,llamaindex", "--retriever", "bm25",
                       "--n", "1"]) == 0
    for name in ("haystack-bm25", "llamaindex-bm25"):
        (row,) = map(json.loads, _lines(out / name / "results.jsonl"))
        assert row["error"] is None and row["cost"]["lm_calls"] == 1
        assert row["prediction"]["passages"][0]["id"] == "p1"  # "capital of France"


def test_qph_ratio_and_judgement(benchmark_script):
    peers = benchmark_script("peers")
    base = [{"id": str(i), "wall_s": 10.0 + i % 2} for i in range(8)]
    slow = [{"id": str(i), "wall_s": 20.0 + 2 * (i % 2)} for i in range(8)]
    r = peers.qph_ratio(base, slow)
    assert r["ratio"] == pytest.approx(2.0) and r["n"] == 8
    assert r["ci95"][0] == pytest.approx(2.0) and r["ci95"][1] == pytest.approx(2.0)
    q = peers.questions_per_hour(base)
    assert q["qph"] == pytest.approx(3600 / 10.5)
    assert q["ci95"][0] <= q["qph"] <= q["ci95"][1]
    assert peers.judge(1.1, 1.5, 1.0) == "met"
    assert peers.judge(0.5, 0.9, 1.0) == "missed"
    assert peers.judge(0.9, 1.2, 1.0) == "undecided"
    assert peers.split_data("asqa:dev:30", None) == ("asqa:dev", 30)
    assert peers.split_data("asqa:dev", 12) == ("asqa:dev", 12)


def test_served_runs_resume_when_the_server_comes_back_on_another_port(peers, setup,
                                                                       monkeypatch):
    """``--serve`` starts llama.cpp's server on a new port each time; the runs record the
    server by model, not by port, so ``--resume`` continues them (it was refused)."""
    import benchmarks.llama_server as llama_server
    from ambiqa.testing_server import serve

    ports = []

    class FakeServer:  # the real ServerProcess, minus llama.cpp: a fresh port each start
        def __init__(self, model, **_):
            self.key = "k"

        def __enter__(self):
            self.api_base, self._stop = serve(0.0)
            ports.append(self.api_base)
            return self

        def __exit__(self, *exc):
            self._stop()

    monkeypatch.setattr(llama_server, "ServerProcess", FakeServer)
    out, common = setup
    at = common.index("--api-base")
    served = [*common[:at], *common[at + 2:], "--serve", "fake", "--systems",
              "haystack,vanilla_rag"]
    assert peers.main([*served, "--n", "1"]) == 0
    assert peers.main([*served, "--n", "2", "--resume"]) == 0
    assert len(set(ports)) == 2
    for name in ("haystack-dense", "vanilla_rag"):
        assert len(_lines(out / name / "results.jsonl")) == 2, name
        spec = json.loads((out / name / "run.json").read_text())
        assert spec["endpoint"] == peers.served_endpoint("fake") == "llama-server:fake"
