"""`ambiqa evaluate --part I/N` and `ambiqa merge`: parts on several machines join into one run
whose summary equals a single-process run's on the same questions (scripted fake LM)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ambiqa.cli import EXIT_USER_ERROR, build_parser, main
from ambiqa.cli.eval_cmds import evaluate_from_args
from ambiqa.data import demo_corpus_path
from ambiqa.data.corpus import load_corpus
from ambiqa.errors import ConfigError
from ambiqa.evaluation.reports.merge import merge_runs
from ambiqa.evaluation.runs.parts import PartSpec, parse_part, part_bounds
from ambiqa.retrieval.base import InMemoryRetriever
from ambiqa.testing import vanilla_rag_lm

DATA = "asqa:dev:7"
METRICS = "em,f1,str-em,rouge-l"
#: wall-clock timings differ between any two runs; everything else must be equal
TIMINGS = ("wall_s", "critical_path_s")


@pytest.fixture(scope="module")
def retriever():
    return InMemoryRetriever(load_corpus(demo_corpus_path()))


def _evaluate(out: Path, retriever, *extra: str) -> dict:
    args = build_parser().parse_args(["evaluate", "vanilla_rag", "--data", DATA, "--metrics",
                                      METRICS, "--out", str(out), *extra])
    summary, _ = evaluate_from_args(args, lm=vanilla_rag_lm(), retriever=retriever,
                                    progress=False)
    return summary


def _comparable(summary: dict) -> object:
    """The summary without wall-clock timings, wherever a section records them."""

    def strip(value: object) -> object:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in TIMINGS}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip(json.loads(json.dumps(summary)))


def test_parts_are_contiguous_balanced_and_cover_every_question_once():
    for n in (0, 1, 7, 10, 201):
        for of in (1, 2, 3, 4, 7):
            bounds = [part_bounds(n, PartSpec(i, of)) for i in range(1, of + 1)]
            assert bounds[0][0] == 0 and bounds[-1][1] == n
            assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:], strict=False))
            sizes = [e - s for s, e in bounds]
            assert max(sizes) - min(sizes) <= 1
    assert parse_part(" 2 / 3 ") == PartSpec(2, 3)
    for bad in ("0/3", "4/3", "1/0", "x", "1-3", "1/3/4"):
        with pytest.raises(ConfigError):
            parse_part(bad)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, retriever, shared_data):
    root = tmp_path_factory.mktemp("runs")
    single = _evaluate(root / "single", retriever)
    for i in (1, 2, 3):  # parts run with 2 threads: their rows land in completion order
        _evaluate(root / f"part{i}", retriever, "--part", f"{i}/3", "--threads", "2")
    return root, single


def test_merged_summary_equals_a_single_process_run(runs, tmp_path):
    root, single = runs
    parts = [root / f"part{i}" for i in (3, 1, 2)]  # any order on the command line
    assert main(["merge", *map(str, parts), "--out", str(tmp_path / "m"), "--no-plots"]) == 0
    merged = json.loads((tmp_path / "m" / "summary.json").read_text())
    on_disk = json.loads((root / "single" / "summary.json").read_text())
    assert merged["n"] == 7 and merged["metrics"]["f1"]["n"] == 7
    assert _comparable(merged) == _comparable(on_disk)
    # the merged run.json is the single run's (no part keys), so compare/resume treat it alike
    assert (json.loads((tmp_path / "m" / "run.json").read_text())
            == json.loads((root / "single" / "run.json").read_text()))
    ids = [json.loads(line)["id"] for line in
           (tmp_path / "m" / "results.jsonl").read_text().splitlines()]
    assert ids == [json.loads(line)["id"] for line in
                   (root / "single" / "results.jsonl").read_text().splitlines()]
    prov = json.loads((tmp_path / "m" / "merge.json").read_text())
    assert [p["part"] for p in prov["parts"]] == ["1/3", "2/3", "3/3"]
    assert single["n"] == 7


def test_part_records_its_slice_and_refuses_to_resume_as_another_part(runs, retriever):
    root, _ = runs
    meta = json.loads((root / "part2" / "run.json").read_text())
    assert meta["part"] == "2/3" and len(meta["part_ids"]) == 2  # 7 -> 2, 2, 3
    with pytest.raises(ConfigError, match="part"):
        _evaluate(root / "part2", retriever, "--part", "3/3", "--resume")


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_merge_refuses_differing_run_json_naming_the_difference(runs, tmp_path, capsys):
    root, _ = runs
    p2 = _copy(root / "part2", tmp_path / "p2")
    meta = json.loads((p2 / "run.json").read_text())
    meta["lm"] = "openai/other-model"
    (p2 / "run.json").write_text(json.dumps(meta))
    rc = main(["merge", str(root / "part1"), str(p2), str(root / "part3"),
               "--out", str(tmp_path / "m")])
    err = capsys.readouterr().err
    assert rc == EXIT_USER_ERROR and "lm:" in err and "openai/other-model" in err
    assert not (tmp_path / "m").exists()


def test_merge_refuses_overlap_missing_unfinished_and_unpartitioned(runs, tmp_path):
    root, _ = runs
    p1, p2, p3 = (root / f"part{i}" for i in (1, 2, 3))
    with pytest.raises(ConfigError, match="missing part"):
        merge_runs([p1, p3], tmp_path / "a")
    with pytest.raises(ConfigError, match="given twice"):
        merge_runs([p1, p1, p2, p3], tmp_path / "b")
    with pytest.raises(ConfigError, match="not run with --part"):
        merge_runs([root / "single", p2], tmp_path / "c")
    # a row of part 3 copied into part 2: the parts overlap
    stray = _copy(p2, tmp_path / "stray")
    row3 = (p3 / "results.jsonl").read_text().splitlines()[0]
    with open(stray / "results.jsonl", "a") as fh:
        fh.write(row3 + "\n")
    with pytest.raises(ConfigError, match="belongs to part 3/3"):
        merge_runs([p1, stray, p3], tmp_path / "d")
    # a part killed before its last question: refused unless asked for
    short = _copy(p3, tmp_path / "short")
    lines = (short / "results.jsonl").read_text().splitlines()
    (short / "results.jsonl").write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(ConfigError, match="unfinished"):
        merge_runs([p1, p2, short], tmp_path / "e")
    s = merge_runs([p1, p2, short], tmp_path / "f", allow_unfinished=True, plots=False)
    assert s["n"] == 6
    # a merge never overwrites
    with pytest.raises(ConfigError, match="not empty"):
        merge_runs([p1, p2, p3], tmp_path / "f", plots=False)
