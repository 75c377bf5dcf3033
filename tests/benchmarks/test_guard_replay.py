"""benchmarks/guard_replay.py on fabricated compiled and zero-shot run directories."""

from __future__ import annotations

import hashlib
import json
import math
import statistics
from pathlib import Path

import pytest

V2, V3 = "extractive:minilm-asqa-v2", "extractive:minilm-asqa-v3"
IDS = [f"q{i}" for i in range(1, 9)]
#: zero-shot Diva's D-F1 under reader v3 on q1..q8
ZERO_V3 = [0.5, 0.6, 0.7, 0.4, 0.5, 0.6, 0.3, 0.8]
#: the compiled Diva's D-F1 under v3: below zero-shot on every question (q8 failed: 0)
COMP_V3 = [0.4, 0.4, 0.55, 0.3, 0.25, 0.3, 0.2, None]


def _artifact(path: Path, manifest: dict) -> str:
    art = {"format": "ambiqa-artifact", "schema_version": 2, "manifest": manifest, "state": {}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(art), encoding="utf-8")
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _run(dir_: Path, program: str, rows: list[dict], reader: str = V3, sha: str | None = None,
         data: str = "asqa:dev:8", **spec: object) -> None:
    dir_.mkdir(parents=True)
    meta = {"program": program, "data": data, "lm": "embedded", "reader": reader,
            "index": "dense:wiki-dense", **spec}
    if sha:
        meta["artifact_sha256"] = sha
    (dir_ / "run.json").write_text(json.dumps(meta), encoding="utf-8")
    (dir_ / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows),
                                        encoding="utf-8")


def _rows(d_f1: list[float | None], words: int, rouge: list[float] | None = None,
          str_em: float = 0.5, ids: list[str] = IDS) -> list[dict]:
    """One row per id; a None D-F1 is a failed question (an error, no scores)."""
    out = []
    for k, (i, d) in enumerate(zip(ids, d_f1, strict=True)):
        if d is None:
            out.append({"id": i, "error": "TimeoutError", "prediction": {}, "metrics": {}})
            continue
        r = rouge[k] if rouge else 0.3
        out.append({"id": i, "error": None, "prediction": {"answer": "w " * words},
                    "metrics": {"d-f1": d, "rouge-l": r, "str-em": str_em,
                                "dr_q": math.sqrt(d * r)}})
    return out


def _refs(data: str) -> dict[str, list[str]]:
    assert data == "asqa:dev"
    return {i: ["w " * 60, "w " * 60] for i in IDS}


@pytest.fixture
def stored(tmp_path: Path) -> Path:
    res = tmp_path / "benchmarks" / "results"
    config = {"skip_unambiguous": False, "temperature": 0.3}
    sha = _artifact(res / "compiled" / "diva-labeled.json",
                    {"program": "diva", "metric": "d-f1", "program_config": config,
                     "train": "asqa:train", "optimizer": {"name": "labeled", "k": 2}})
    # zero-shot Diva read by v2 and its v3 re-scored copy; a variant whose setting the compiled
    # program contradicts (more questions, never chosen)
    _run(res / "evidence" / "asqa" / "diva", "diva", _rows([0.1] * 8, 100), reader=V2)
    _run(res / "rescored" / "asqa" / "diva", "diva", _rows(ZERO_V3, 100), old_reader=V2)
    _run(res / "rescored" / "asqa" / "diva-skip", "diva",
         _rows([0.0] * 10, 100, ids=[f"q{i}" for i in range(1, 11)]),
         program_config={"skip_unambiguous": True})
    # the compiled run, named by an absolute path from another checkout, and its v3 copy
    far = "/elsewhere/benchmarks/results/compiled/diva-labeled.json"
    _run(res / "evidence" / "asqa-compiled" / "diva-labeled", far,
         _rows([0.3] * 7 + [None], 50), reader=V2, sha=sha)
    _run(res / "rescored" / "asqa-compiled" / "diva-labeled", far,
         _rows(COMP_V3, 50), sha=sha, old_reader=V2)
    # DR objective: the set-level statistic ships what the mean of per-question roots refuses
    sha_dr = _artifact(res / "compiled" / "vanilla_rag-dr.json",
                       {"program": "vanilla_rag", "metric": "dr", "train": "asqa:train:12",
                        "program_config": {"k": 5}, "optimizer": {"name": "bootstrap"}})
    four = IDS[:4]
    _run(res / "rescored" / "asqa" / "vanilla_rag", "vanilla_rag",
         _rows([0.3] * 4, 80, rouge=[0.3] * 4, ids=four), data="asqa:dev:4")
    _run(res / "runs" / "vanilla_rag-dr", "benchmarks/results/compiled/vanilla_rag-dr.json",
         _rows([1.0, 0.0, 1.0, 0.0], 80, rouge=[0.0, 1.0, 0.0, 1.0], ids=four), sha=sha_dr,
         data="asqa:dev:4", max_tokens=512)
    # an artifact not stored: program from its file name, objective the recipe's default; a
    # tie with zero-shot is a refusal; toc-strict is not toc's zero-shot run
    _run(res / "rescored" / "asqa" / "toc", "toc", _rows([0.2] * 8, 100))
    _run(res / "rescored" / "asqa" / "toc-strict", "toc", _rows([0.0] * 8, 100),
         program_config={"verification": "strict"})
    _run(res / "rescored" / "asqa-compiled" / "toc-knn-gold",
         "/elsewhere/benchmarks/results/compiled/toc-knn-gold.json", _rows([0.2] * 8, 30))
    # compiled and never evaluated: listed, not replayed; compile-v4 is left out
    _artifact(res / "compile-x" / "diva-gepa.json",
              {"program": "diva", "metric": "str-em", "train": "asqa:train:4",
               "optimizer": {"name": "gepa"}})
    _run(res / "compile-v4" / "runs" / "diva", far, _rows(ZERO_V3, 50), sha=sha)
    return tmp_path


def test_guard_replayed_on_stored_rows(benchmark_script, stored):
    gr = benchmark_script("guard_replay")
    m = gr.measure(stored, refs=_refs, reader=V3)
    by_run = {d["run"]: d for d in m["runs"]}
    assert set(by_run) == {"rescored/asqa-compiled/diva-labeled", "runs/vanilla_rag-dr",
                           "rescored/asqa-compiled/toc-knn-gold"}

    # the v3 copy is the one replayed, against the v3 zero-shot run of the same settings
    diva = by_run["rescored/asqa-compiled/diva-labeled"]
    assert diva["copies"] == ["evidence/asqa-compiled/diva-labeled"]
    assert diva["zero_shot"] == "rescored/asqa/diva"
    assert diva["artifact"]["artifact"] == "benchmarks/results/compiled/diva-labeled.json"
    assert (diva["artifact"]["metric"], diva["artifact"]["metric_from"]) == ("d-f1", "manifest")
    assert diva["rows_role"] == "dev (stands in for validation)"
    o = diva["objective"]
    comp = [0.0 if v is None else v for v in COMP_V3]  # a failed question scores 0
    assert o["n"] == 8 and o["failed"] == {"compiled": 1, "zero_shot": 0}
    assert o["compiled"] == pytest.approx(statistics.fmean(comp))
    assert o["zero_shot"] == pytest.approx(statistics.fmean(ZERO_V3))
    assert o["diff"] == pytest.approx(statistics.fmean(comp) - statistics.fmean(ZERO_V3))
    assert o["decision"] == "would have refused"
    assert o["ci95"][1] < 0 and o["interval"] == "below 0"  # every question lower
    # STR-EM level on every question: a tie is a refusal; the interval decides nothing
    s = diva["str_em"]
    assert s["n"] == 8 and s["decision"] == "would have refused"
    assert s["compiled"] == pytest.approx(0.5 * 7 / 8) and s["zero_shot"] == 0.5
    # length: 50 words against 100 on the 7 questions both answered; references 60
    ln = diva["length"]
    assert (ln["n"], ln["compiled"], ln["zero_shot"], ln["diff"], ln["references"]) == \
        (7, 50, 100, -50, 60)
    assert ln["nearer"] == "compiled: would have shipped"

    # the v2 copy, paired with the v2 zero-shot run: the reader turns the decision over
    (other,) = m["other_readers"]
    assert other["run"] == "evidence/asqa-compiled/diva-labeled"
    assert other["copy_of"] == diva["run"] and other["zero_shot"] == "evidence/asqa/diva"
    ov = other["objective"]
    assert ov["compiled"] == pytest.approx(0.3 * 7 / 8) and ov["zero_shot"] == pytest.approx(0.1)
    assert ov["decision"] == "would have shipped"

    # DR: sqrt(mean D-F1 × mean ROUGE-L) = sqrt(0.5 × 0.5) = 0.5 against 0.3 ships; the mean
    # of per-question roots (0 against 0.3) would have refused, and the report says so
    dr = by_run["runs/vanilla_rag-dr"]
    assert dr["zero_shot"] == "rescored/asqa/vanilla_rag"
    assert dr["rows_role"] == "dev (stands in for validation)"
    assert dr["objective"]["metric"] == "dr" and dr["objective"]["n"] == 4
    assert dr["objective"]["compiled"] == pytest.approx(0.5)
    assert dr["objective"]["zero_shot"] == pytest.approx(0.3)
    assert dr["objective"]["decision"] == "would have shipped"
    pq = dr["objective"]["per_question_mean"]
    assert (pq["compiled"], pq["zero_shot"]) == (0.0, pytest.approx(0.3))
    assert pq["decision"] == "would have refused"
    assert dr["spec_differences"] == {"max_tokens": [512, None]}

    # an artifact not stored: toc from its name, d-f1 from toc's recipe; equal means refuse
    toc = by_run["rescored/asqa-compiled/toc-knn-gold"]
    assert toc["artifact"]["status"] == "not stored"
    assert (toc["artifact"]["program"], toc["artifact"]["metric"]) == ("toc", "d-f1")
    assert toc["artifact"]["metric_from"] == "recipe default (artifact not stored)"
    assert toc["zero_shot"] == "rescored/asqa/toc"  # not toc-strict
    assert toc["objective"]["diff"] == 0 and toc["objective"]["decision"] == "would have refused"

    assert [a["artifact"] for a in m["not_replayed_artifacts"]] == [
        "benchmarks/results/compile-x/diva-gepa.json"]
    assert m["counts"] == {"replayed": 3, "refused": 2, "shipped": 1}

    text = gr.render(m)
    assert "DEV ROWS STAND IN FOR THE VALIDATION SPLIT" in text
    assert "| **refused** | below 0 |" in text
    assert ("refused **2** and shipped 1. Refused: `diva-labeled` (rescored), `toc-knn-gold` "
            "(rescored). Shipped: `vanilla_rag-dr` (runs).") in text
    assert "`runs/vanilla_rag-dr`: on the mean of per-question DR" in text
    assert "refused 0 and shipped 1" in text
    assert "compile-v4" not in json.dumps(m["runs"])


def test_rows_role_and_main_writes_both_files(benchmark_script, stored, monkeypatch, capsys):
    gr = benchmark_script("guard_replay")
    assert gr.rows_role("asqa:train:12", "asqa:train:13-500") == \
        "train, held out from the compile's asqa:train:13-500"
    assert gr.rows_role("asqa:train:20", "asqa:train:13-500") == \
        "train, overlapping the compile's asqa:train:13-500"
    assert gr.rows_role("asqa:dev:60", "asqa:train") == "dev (stands in for validation)"
    monkeypatch.setattr(gr, "ROOT", stored)
    monkeypatch.setattr(gr, "load_references", _refs)
    assert gr.main(["--out", str(stored / "out" / "guard"), "--reader", V3]) == 0
    saved = json.loads((stored / "out" / "guard.json").read_text("utf-8"))
    assert saved["counts"]["replayed"] == 3
    text = (stored / "out" / "guard.md").read_text("utf-8")
    assert text == capsys.readouterr().out.rstrip("\n") + "\n"
    assert not list((stored / "out").glob("*.tmp*"))


def test_composed_objectives_are_per_question_means_of_their_parts(benchmark_script):
    """str-rouge (the compile-v5 objective) and d-f1-cov are read from their two stored parts,
    so a compile made with either is replayed, not scored on no questions."""
    gr = benchmark_script("guard_replay")
    rows = _rows([0.2, 0.4, None, 0.6], 50, rouge=[0.1, 0.3, 0.0, 0.5], str_em=0.7,
                 ids=IDS[:4])
    ids, (sr,) = gr.objective_arrays(rows, "str-rouge")
    assert ids == IDS[:4]
    assert sr == pytest.approx([0.4, 0.5, 0.0, 0.6])  # (STR-EM + ROUGE-L) / 2, failed = 0
    _, (cov,) = gr.objective_arrays(rows, "d-f1-cov")
    assert cov == pytest.approx([0.45, 0.55, 0.0, 0.65])
    zero = _rows([0.2] * 4, 50, rouge=[0.1] * 4, str_em=0.3, ids=IDS[:4])
    g = gr.guard(rows, zero, "str-rouge")
    assert g["n"] == 4 and g["decision"] == "would have shipped"
    assert g["compiled"] == pytest.approx(0.375) and g["zero_shot"] == pytest.approx(0.2)


def test_json_is_strict(benchmark_script):
    gr = benchmark_script("guard_replay")
    assert gr._strict({"ci95": [math.nan, 1.0], "x": (math.inf,)}) == {"ci95": [None, 1.0],
                                                                      "x": [None]}
