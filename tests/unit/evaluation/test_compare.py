"""`ambiqa compare`, benchmarks/compare_methods.py and the evaluate CLI's bad-input paths."""

from __future__ import annotations

import errno
import importlib.util
import json
import math
from pathlib import Path

import pytest

from ambiqa.cli import EXIT_USER_ERROR, main
from ambiqa.errors import ConfigError
from ambiqa.evaluation.reports.compare import compare_runs
from ambiqa.evaluation.runs.runner import ResultsFile
from ambiqa.testing import scripted_lm

ROOT = Path(__file__).resolve().parents[3]


def _write_run(d, program, data, scores, lm_calls=1):
    d.mkdir(parents=True, exist_ok=True)
    (d / "run.json").write_text(json.dumps({"program": program, "data": data,
                                            "metrics": ["em", "f1"], "reader": None,
                                            "lm": "scripted"}))
    rows = []
    for i, v in scores.items():
        err = v is None
        rows.append({"id": i, "question": i, "error": "boom" if err else None,
                     "prediction": None if err else {"answer": "x"},
                     "metrics": {} if err else {"em": v, "f1": v},
                     "cost": {"lm_calls": lm_calls, "wall_s": 0.5 * lm_calls}})
    (d / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


def test_paired_differences_on_shared_ids_count_failures_as_zero(tmp_path):
    a = _write_run(tmp_path / "a", "vanilla_rag", "toy:dev:5",
                   {"q0": 1.0, "q1": 0.0, "q2": 1.0, "q3": 0.0, "q4": None})
    b = _write_run(tmp_path / "b", "diva", "toy:dev:6",
                   {"q0": 1.0, "q1": 1.0, "q2": 1.0, "q3": 0.0, "q4": 1.0, "q5": 1.0},
                   lm_calls=5)
    res = compare_runs([a, b], metrics=["em"])
    (p,) = res["paired"]
    # shared ids q0..q4 (q5 only in b); q4 failed in a and scores 0 there:
    # a = 1,0,1,0,0 (0.4), b = 1,1,1,0,1 (0.8), diffs 0,1,0,0,1 -> 0.4
    assert p["n_shared"] == 5 and p["failed"] == {"baseline": 1, "run": 0}
    assert p["diff"] == pytest.approx(0.4)
    assert p["baseline_mean"] == pytest.approx(0.4) and p["run_mean"] == pytest.approx(0.8)
    lo, hi = p["ci95"]
    # the interval of a mean of 0/1 differences lies inside [0, 1] and around 0.4; with two
    # of five diffs equal to 1 and none negative, no resample can go below 0
    assert 0.0 <= lo < 0.4 < hi <= 1.0 and p["ci_method"] == "BCa"
    # each run's own headline counts its failed question as 0; excl. failures beside it
    ra, rb = (r["metrics"]["em"] for r in res["runs"])
    assert (ra["mean"], ra["n"], ra["failed"]) == (pytest.approx(0.4), 5, 1)
    assert ra["mean_excl_failed"] == pytest.approx(0.5) and ra["n_scored"] == 4
    assert (rb["mean"], rb["n"], rb["failed"]) == (pytest.approx(5 / 6), 6, 0)
    # consistency across runs (EM = 1 right) on ids both answered: q0..q3
    cons = res["consistency"]
    # b is right on q1 where a is wrong; a is wrong on q1, q3 -> RWR(b, a) = 1/2
    assert cons["rwr"]["diva"]["vanilla_rag"] == pytest.approx(1 / 2)
    assert cons["rwr"]["vanilla_rag"]["diva"] == 0.0


def _write_dr_run(d, program, reader, rows):
    """rows: id -> (d-f1, rouge-l) or None for a failed question."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "run.json").write_text(json.dumps({"program": program, "data": "asqa:dev:4",
                                            "metrics": ["d-f1", "rouge-l", "dr"],
                                            "reader": reader, "lm": "scripted"}))
    out = []
    for i, v in rows.items():
        if v is None:
            out.append({"id": i, "question": i, "error": "Timeout: no result", "metrics": {},
                        "prediction": None, "cost": {"lm_calls": 1}})
        else:
            out.append({"id": i, "question": i, "error": None, "prediction": {"answer": "x"},
                        "metrics": {"d-f1": v[0], "rouge-l": v[1]}, "cost": {"lm_calls": 1}})
    (d / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in out))
    return d


def test_paired_dr_is_recomputed_from_set_means(tmp_path):
    a = _write_dr_run(tmp_path / "a", "vanilla_rag", "reader-x",
                      {"q0": (0.0, 0.4), "q1": (1.0, 0.2), "q2": (0.5, 0.3), "q3": None})
    b = _write_dr_run(tmp_path / "b", "diva", "reader-x",
                      {"q0": (1.0, 0.5), "q1": (0.5, 0.5), "q2": (0.5, 0.5), "q3": (0.0, 0.5)})
    res = compare_runs([a, b], metrics=["dr"])
    (p,) = res["paired"]
    # a: mean D-F1 (0 + 1 + .5 + 0) / 4 = .375, mean ROUGE (.4 + .2 + .3 + 0) / 4 = .225
    # b: mean D-F1 2 / 4 = .5, mean ROUGE .5
    assert p["baseline_mean"] == pytest.approx((0.375 * 0.225) ** 0.5)
    assert p["run_mean"] == pytest.approx(0.5)
    assert p["diff"] == pytest.approx(0.5 - (0.375 * 0.225) ** 0.5)
    assert p["n_shared"] == 4 and p["failed"] == {"baseline": 1, "run": 0}


def test_compare_refuses_runs_scored_by_different_readers(tmp_path):
    rows = {"q0": (0.5, 0.5), "q1": (1.0, 0.2), "q2": (0.0, 0.1)}
    a = _write_dr_run(tmp_path / "a", "vanilla_rag", "lm-reader:embedded/x", rows)
    b = _write_dr_run(tmp_path / "b", "diva", "extractive:ckpt", rows)
    with pytest.raises(ConfigError, match="different readers") as err:
        compare_runs([a, b])
    assert "lm-reader:embedded/x" in str(err.value) and "extractive:ckpt" in str(err.value)
    # a metric no reader scores is fine; so is an explicit allowance, which is reported
    assert compare_runs([a, b], metrics=["rouge-l"])["paired"][0]["diff"] == 0.0
    res = compare_runs([a, b], allow_reader_mismatch=True)
    assert res["reader_mismatch_allowed"] is True
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "c")]) == EXIT_USER_ERROR
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "c"),
                 "--allow-reader-mismatch"]) == 0
    assert "despite different D-F1 readers" in (tmp_path / "c" / "compare.md").read_text()


def test_compare_refuses_other_data_and_missing_metrics(tmp_path):
    a = _write_run(tmp_path / "a", "resp", "hotpotqa:dev:3", {"q0": 1.0})
    b = _write_run(tmp_path / "b", "eor", "nq:oracle:3", {"q0": 1.0})
    with pytest.raises(ConfigError, match="different data sets or splits"):
        compare_runs([a, b])
    c = _write_run(tmp_path / "c", "ircot", "hotpotqa:train:3", {"q0": 1.0})
    with pytest.raises(ConfigError, match="different data sets or splits"):
        compare_runs([a, c])
    d = _write_run(tmp_path / "d", "ircot", "hotpotqa:dev:9", {"q0": 1.0})
    with pytest.raises(ConfigError, match="not in run"):
        compare_runs([a, d], metrics=["rouge-l"])
    with pytest.raises(ConfigError, match="at least two"):
        compare_runs([a])


def test_compare_cli_writes_markdown_and_plot(tmp_path, capsys):
    a = _write_run(tmp_path / "runs" / "a", "vanilla_rag", "toy:dev:4",
                   {"q0": 1.0, "q1": 0.0, "q2": 1.0, "q3": 0.0})
    b = _write_run(tmp_path / "runs" / "b", "diva", "toy:dev:4",
                   {"q0": 1.0, "q1": 1.0, "q2": 1.0, "q3": 1.0}, lm_calls=6)
    out = tmp_path / "cmp"
    assert main(["compare", str(a), str(b), "--out", str(out)]) == 0
    md = (out / "compare.md").read_text()
    # diffs 0, 1, 0, 1: the paired interval reaches 0, so no star
    line = next(ln for ln in md.splitlines() if ln.startswith("| diva | em |"))
    assert line.startswith("| diva | em | 4 | 0 / 0 | 0.500 | 1.000 | 0.500 | [0.000, ")
    assert "*" not in line
    assert (out / "quality_vs_cost.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((out / "comparison.json").read_text())["dataset"] == "toy:dev"
    c = _write_run(tmp_path / "runs" / "c", "eor", "nq:oracle:4", {"q0": 1.0})
    capsys.readouterr()
    assert main(["compare", str(a), str(c), "--out", str(out)]) == EXIT_USER_ERROR
    assert "different data sets" in capsys.readouterr().err


# ---------------------------------------------------------------- the evaluate CLI, bad input


@pytest.fixture()
def scripted_cli(monkeypatch):
    """`ambiqa evaluate` with a scripted LM instead of the embedded one."""
    from ambiqa.api import LMSpec

    lm = scripted_lm({"ClosedBookLongAnswer": {"long_answer": "It was 2007."},
                      "ReadShortAnswer": {"answer": "2007"}})
    # evaluate passes its LM flags down as an LMSpec; the api builds it (issue 44)
    monkeypatch.setattr(LMSpec, "build", lambda self: lm)
    yield lm
    import dspy

    dspy.configure(lm=None)


def _evaluate(out, *extra, data="asqa:dev:2", program="closed_book"):
    return main(["evaluate", program, "--data", data, "--metrics", "str-em,rouge-l,d-f1,dr",
                 "--out", str(out), *extra])


@pytest.mark.parametrize("argv_extra, data, program, message", [
    ((), "asqa:nosplit", "closed_book", "unknown split 'nosplit'"),
    ((), "hotpotqa:/no/such/dev.json", "closed_book", "data file not found"),
    ((), "asqa:dev:2", "closed_bok", "did you mean 'closed_book'"),
    (("--metrics", "rouge-k"), "asqa:dev:2", "closed_book", "did you mean 'rouge-l'"),
    (("--threads", "0"), "asqa:dev:2", "closed_book", "--threads must be at least 1"),
    (("--timeout-s", "-1"), "asqa:dev:2", "closed_book", "--timeout-s must be positive"),
])
def test_evaluate_bad_input_is_one_clear_error(tmp_path, capsys, shared_data, argv_extra,
                                               data, program, message):
    out = tmp_path / "run"
    argv = ["evaluate", program, "--data", data, "--out", str(out), *argv_extra]
    assert main(argv) == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (out / "run.json").exists()  # nothing written for a rejected command


def test_evaluate_resume_extend_and_refusals_keep_results(tmp_path, capsys, shared_data,
                                                          scripted_cli):
    out = tmp_path / "run"
    assert _evaluate(out) == 0
    assert len(ResultsFile(out / "results.jsonl").read()) == 2
    snapshot = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    capsys.readouterr()
    # the same command again: refused (would overwrite), files untouched
    assert _evaluate(out) == EXIT_USER_ERROR
    assert "already holds a run" in capsys.readouterr().err
    # another program into this directory: refused, even with --resume
    assert _evaluate(out, "--resume", program="vanilla_rag") == EXIT_USER_ERROR
    assert "refusing to mix" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == snapshot
    # the same program with other settings: refused before any model loads, each named
    assert _evaluate(out, "--resume", "--lm", "embedded:qwen2.5-coder-1.5b",
                     "--program-config", '{"k": 3}') == EXIT_USER_ERROR
    err = " ".join(capsys.readouterr().err.split())
    # the first run recorded the LM evaluate resolved (no --lm: $AMBIQA_LM or the embedded
    # default), never none
    assert "LM: stored none" not in err and "now 'embedded:qwen2.5-coder-1.5b'" in err
    assert 'program config: stored none, now {"k": 3}' in err
    assert main(["evaluate", "closed_book", "--data", "asqa:dev:2", "--metrics", "str-em",
                 "--out", str(out), "--resume"]) == EXIT_USER_ERROR
    assert "metric set: stored d-f1,dr,rouge-l,str-em, now str-em" in " ".join(
        capsys.readouterr().err.split())
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == snapshot
    # --resume extends to more examples of the same split
    assert _evaluate(out, "--resume", data="asqa:dev:3") == 0
    assert len(ResultsFile(out / "results.jsonl").read()) == 3
    assert json.loads((out / "run.json").read_text())["data"] == "asqa:dev:3"
    assert (out / "report.md").is_file()


def test_evaluate_unwritable_and_disk_full(tmp_path, capsys, shared_data, scripted_cli,
                                           monkeypatch):
    from ambiqa.evaluation.runs import run_dir as run_dir_mod

    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert _evaluate(blocker / "run") == EXIT_USER_ERROR
    assert "cannot create run directory" in capsys.readouterr().err

    out = tmp_path / "run"
    real_fsync, calls = run_dir_mod.os.fsync, []

    def fsync(fd):
        calls.append(fd)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_fsync(fd)

    monkeypatch.setattr(run_dir_mod.os, "fsync", fsync)
    assert _evaluate(out, data="asqa:dev:3") == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert "disk full" in err and "Traceback" not in err
    first = ResultsFile(out / "results.jsonl").read()[0]
    monkeypatch.setattr(run_dir_mod.os, "fsync", real_fsync)
    assert _evaluate(out, "--resume", data="asqa:dev:3") == 0
    rows = ResultsFile(out / "results.jsonl").read()
    assert len(rows) == 3 and rows[0] == first  # the row written before the failure is kept


# ---------------------------------------------------------------- benchmarks/compare_methods.py



def test_compare_methods_runs_resumes_and_tabulates(tmp_path, shared_data, use_lm,
                                                    benchmark_script):
    from ambiqa.retrieval.base import InMemoryRetriever
    from ambiqa.types import Passage

    cm = benchmark_script("compare_methods")
    lm = use_lm(scripted_lm({
        "ClosedBookLongAnswer": {"long_answer": "The first iPhone came out in 2007."},
        "ClarifyFromPassages": {"pairs": [{"question": "When?", "answer": "2007",
                                           "passage": 1}]},
        "WriteLongAnswer": {"long_answer": "It was released on June 29, 2007."},
        "ReadShortAnswer": {"answer": "2007"},
    }))
    retriever = InMemoryRetriever([Passage("p1", "iPhone", "The iPhone was released in 2007."),
                                   Passage("p2", "Apple", "Apple makes phones.")])
    root = tmp_path / "compare"
    logs: list[str] = []
    st = cm.run_plan(["asqa"], ["closed_book", "vanilla_rag"], 2, root, lm=None,
                     index="memory:test", lm_object=lm, retriever=retriever, progress=False,
                     log=logs.append)
    assert [s["ok"] for s in st] == [True, True]
    meta = json.loads((root / "asqa" / "vanilla_rag" / "run.json").read_text())
    assert meta["program"] == "vanilla_rag" and meta["data"] == "asqa:dev:2"
    assert meta["metrics"] == ["str-em", "rouge-l", "d-f1", "dr", "mrecall@5"]
    # D-F1 read by the reader that ships with ambiqa, not by the LM under test
    assert meta["reader"] == "extractive:minilm-asqa-v4" and meta["index"] == "memory:test"
    # a second pass with a larger n resumes and extends, redoing nothing
    calls = len(lm.engine.calls)
    cm.run_plan(["asqa"], ["closed_book"], 3, root, lm=None, index="memory:test",
                lm_object=lm, retriever=retriever, progress=False, log=logs.append)
    assert logs[-1].endswith("--resume")
    assert len(ResultsFile(root / "asqa" / "closed_book" / "results.jsonl").read()) == 3
    assert lm.engine.count("ClosedBookLongAnswer") == 3  # 2 + 1 new, not 2 + 3
    assert len(lm.engine.calls) > calls
    # report-only: one table per data set, nothing written inside run directories
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    tables = cm.write_tables(root)
    text = tables.read_text()
    assert "## asqa (asqa:dev)" in text
    assert "| closed_book | asqa:dev:3 | 3 | 0 |" in text
    assert "| vanilla_rag | asqa:dev:2 | 2 | 0 |" in text
    assert "ambiqa evaluate vanilla_rag --data asqa:dev:2" in text
    assert "Paired differences on the questions both runs hold" in text
    assert "| vanilla_rag | closed_book | 2 |" in text
    assert "±" not in text
    after = sorted(p.relative_to(root) for p in root.rglob("*"))
    assert set(after) - set(before) == {Path("TABLES.md"), Path("quality_vs_cost.png")}


def test_compare_methods_report_only_cli_on_empty_root(tmp_path, benchmark_script):
    cm = benchmark_script("compare_methods")
    assert cm.main(["--report-only", "--root", str(tmp_path / "none"),
                    "--tables", str(tmp_path / "T.md")]) == 0
    assert "No run directories found yet." in (tmp_path / "T.md").read_text()
    assert cm.main(["--datasets", "asqa,nope", "--root", str(tmp_path)]) == 2


def test_compare_methods_short_form_baselines_get_their_program_config(tmp_path, benchmark_script):
    """On HotpotQA/NQ/WebQ the long-form baselines answer in the short form those data sets
    score; the evaluate command line carries it, so the run.json records it."""
    cm = benchmark_script("compare_methods")
    job = cm.evaluate_job(cm.PLAN["hotpotqa"], "vanilla_rag", 60, tmp_path, lm="embedded",
                          index="dense:wiki-dense", threads=2, timeout_s=None, reader=None)
    assert job.settings.program_config == {"answer_form": "short"}
    assert job.data == "hotpotqa:dev:60" and job.target == "vanilla_rag"
    assert """--program-config '{"answer_form": "short"}'""" in job.command()
    resp = cm.evaluate_job(cm.PLAN["hotpotqa"], "resp", 60, tmp_path, lm=None, index=None,
                           threads=1, timeout_s=None, reader=None)
    assert resp.settings.program_config is None and "--program-config" not in resp.command()


@pytest.mark.parametrize("lm, index, config", [
    ("embedded", "dense:wiki-dense", "vanilla_rag"), (None, None, "resp")])
def test_compare_methods_evaluates_with_the_settings_the_cli_builds(
        tmp_path, benchmark_script, monkeypatch, lm, index, config):
    """The script calls ambiqa.api.evaluate itself; the settings it passes are those
    `ambiqa evaluate` builds from the command line the script logs (so run.json is the
    same RunSpec either way and stored runs resume under both)."""
    import shlex

    import ambiqa.api
    from ambiqa.cli import build_parser
    from ambiqa.cli.eval_cmds import evaluate_from_args

    cm = benchmark_script("compare_methods")
    calls = []

    def capture(target, data, settings, **kw):
        calls.append((target, data, settings))
        raise ConfigError("captured")

    monkeypatch.setattr(ambiqa.api, "evaluate", capture)
    monkeypatch.delenv("AMBIQA_LM", raising=False)
    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_text("{}")  # a stored run: resumed
    job = cm.evaluate_job(cm.PLAN["hotpotqa"], config, 60, out, lm=lm, index=index,
                          threads=2, timeout_s=30.0, reader="lm")
    assert job.settings.resume
    argv = shlex.split(job.command().removeprefix("ambiqa "))
    for run in (lambda: job.run(), lambda: evaluate_from_args(build_parser().parse_args(argv))):
        with pytest.raises(ConfigError, match="captured"):
            run()
    (t1, d1, s1), (t2, d2, s2) = calls
    assert (t1, d1) == (t2, d2) and s1 == s2
    assert s1.lm_label == (lm or "embedded")
    assert cm.PLAN["asqa"].programs["toc"] == 30 and cm.PLAN["asqa"].n == 60


# ---------------------------------------------------------------- benchmarks/render.py


def _load_render():
    spec = importlib.util.spec_from_file_location("bench_render", ROOT / "benchmarks" /
                                                  "render.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_render_stitches_sections_in_order_and_shifts_standalone_headings(tmp_path):
    render = _load_render()
    (tmp_path / "r" / "sub").mkdir(parents=True)
    (tmp_path / "r" / "intro.md").write_text(
        "<!-- no-command: the machine -->\nTwo cores, no GPU.\n")
    (tmp_path / "r" / "sub" / "TABLES.md").write_text(
        "# Tables\n\nMade by `python benchmarks/x.py --n 3`.\n\n## asqa\n\n"
        "```bash\n# not a heading\nambiqa evaluate x\n```\n\n![plot](plot.png)\n")
    (tmp_path / "r" / "prose.md").write_text(
        "## Prose\n\n`ambiqa compare a b --out c` gives 0.2 [0.1, 0.3].\n")
    text = render.render(["r/intro.md", "r/sub/TABLES.md", "r/prose.md"], root=tmp_path)
    assert text.startswith("# Benchmarks\n\n<!-- Generated by `python -m benchmarks.render`")
    assert "no-command" not in text and "Two cores, no GPU." in text
    assert "## Tables\n" in text and "### asqa\n" in text  # shifted one level
    assert "\n# not a heading\n" in text  # fenced code untouched
    assert "![plot](r/sub/plot.png)" in text  # relative to the repository root
    assert text.index("Two cores") < text.index("## Tables") < text.index("## Prose")


@pytest.mark.parametrize(("body", "message"), [
    ("## X\n\nA number: 0.3.\n", "names no command line"),
    ("## X\n\n`python benchmarks/x.py`: 0.30 ±0.05\n", "x.md:3: an interval printed with ±"),
])
def test_render_refuses_untraceable_sections(tmp_path, body, message):
    render = _load_render()
    (tmp_path / "x.md").write_text(body)
    with pytest.raises(render.SectionError, match=message):
        render.render(["x.md"], root=tmp_path)
    with pytest.raises(render.SectionError, match="not found"):
        render.render(["missing.md"], root=tmp_path)


def test_benchmarks_md_is_rendered_from_its_sections():
    """BENCHMARKS.md must equal what benchmarks/render.py makes of the section files."""
    render = _load_render()
    assert render.main(["--check"]) == 0


# ---------------------------------------------------------------- intervals (stats)


def _dr_rows(pairs):
    return [{"id": f"q{i:02d}", "error": None if p else "boom",
             "metrics": {"d-f1": p[0], "rouge-l": p[1]} if p else {}}
            for i, p in enumerate(pairs)]


def test_dr_interval_resamples_set_means_not_per_question_roots():
    from ambiqa.evaluation.stats import summarize_metric

    # every per-question root is 0, so a bootstrap of roots would give [0, 0]; the set-level
    # DR is sqrt(0.5 * 0.5) = 0.5 and its resamples stay near it
    rows = _dr_rows([(1.0, 0.0), (0.0, 1.0)] * 10)
    s = summarize_metric(rows, "dr")
    assert s["mean"] == pytest.approx(0.5) and s["ci_method"] == "BCa"
    lo, hi = s["ci95"]
    assert 0.3 < lo < 0.5 <= hi <= 0.5 + 1e-9  # sqrt(p(1-p)) peaks at p = 0.5


def test_intervals_do_not_depend_on_row_order_and_need_three_questions():
    from ambiqa.evaluation.stats import summarize_metric

    rows = _dr_rows([(0.1, 0.2), (0.9, 0.4), (0.5, 0.5), None, (0.3, 0.1), (0.7, 0.9)])
    assert summarize_metric(rows, "dr") == summarize_metric(rows[::-1], "dr")
    two = summarize_metric(_dr_rows([(0.1, 0.2), (0.9, 0.4)]), "d-f1")
    assert math.isnan(two["ci95"][0]) and two["ci_method"].startswith("none")
    same = summarize_metric(_dr_rows([(0.5, 0.5)] * 4), "d-f1")
    assert same["ci95"] == [0.5, 0.5] and same["ci_method"] == "degenerate"


def test_compile_plan_command_lines_parse_and_name_training_splits(tmp_path, benchmark_script,
                                                                  monkeypatch):
    """Every compile of the "does compiling help?" plan is a valid `ambiqa compile` command
    on a training split (the recipe default), evaluated on the zero-shot row's questions."""
    import shlex

    from ambiqa.cli import build_parser, optimize_cmds

    cm = benchmark_script("compare_methods")
    parser = build_parser()
    captured = {}

    def capture(program, train, dev, metric, optimizer, k, seed, retriever, lm, reader, out,
                config, threshold, console, *, options, max_lm_calls, allow_eval_splits,
                choice=None):
        captured["settings"] = dict(train=train, dev=dev, metric=metric, optimizer=optimizer,
                                    k=k, seed=seed, threshold=threshold, out=out,
                                    max_lm_calls=max_lm_calls,
                                    allow_eval_splits=allow_eval_splits, options=options,
                                    program_config=config or None)

    # the CLI's compile, to the point where it calls ambiqa.api.compile, without models
    monkeypatch.setattr(optimize_cmds, "compile_and_save", capture)
    monkeypatch.setattr(optimize_cmds, "retriever_from_args", lambda *a, **k: None)
    monkeypatch.setattr(optimize_cmds, "lm_from_args", lambda args: None)
    monkeypatch.setattr(optimize_cmds, "reader_from_args", lambda args: None)
    for program, opt, n in cm.COMPILE_PLAN:
        artifact = tmp_path / "a.json"
        settings = cm.compile_settings(program, opt, artifact, threads=2)
        assert settings.optimizer == cm.COMPILE_OPTIMIZER.get(opt, opt)
        assert settings.options["threads"] == 2
        assert settings.k == 2
        assert ":train" in settings.train
        assert n <= cm.PLAN["asqa"].programs[program]  # paired with the zero-shot row
        command = cm.compile_command(program, opt, artifact, lm="embedded",
                                     index="dense:wiki-dense", threads=2)
        optimize_cmds.cmd_compile(parser.parse_args(
            shlex.split(command.removeprefix("ambiqa "))))
        mine = {f: getattr(settings, f) for f in captured["settings"]}
        assert mine == captured.pop("settings"), f"{program}-{opt}"
    assert cm.main(["--compile", "--compiled", "vanilla_rag-nope", "--root",
                    str(tmp_path)]) == 2


def test_compile_table_pairs_a_compiled_run_with_its_zero_shot_row(tmp_path, benchmark_script):
    cm = benchmark_script("compare_methods")

    def write_run(path, program, scores):
        path.mkdir(parents=True)
        (path / "run.json").write_text(json.dumps(
            {"program": program, "data": "asqa:dev:3", "metrics": list(cm.ASQA_METRICS),
             "reader": "extractive:r"}))
        rows = [{"id": str(i), "error": None, "prediction": {"answer": "a"},
                 "cost": {"lm_calls": 2, "output_tokens": 10, "wall_s": 1.0},
                 "metrics": {"str-em": v, "rouge-l": v, "d-f1": v, "mrecall@5": v}}
                for i, v in enumerate(scores)]
        (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    write_run(tmp_path / "asqa" / "vanilla_rag", "vanilla_rag", [0.1, 0.2, 0.3])
    write_run(tmp_path / cm.COMPILED_DIR / "vanilla_rag-labeled",
              str(tmp_path / "compiled" / "vanilla_rag-labeled.json"), [0.3, 0.4, 0.5])
    text = "\n".join(cm.compile_lines(tmp_path))
    assert "| vanilla_rag-labeled | 3 | 0 |" in text
    assert "+0.200" in text  # Δ str-em, paired on the 3 shared questions
    assert "| closed_book |" not in text  # no baseline run: no table against it

    write_run(tmp_path / "asqa" / "closed_book", "closed_book", [0.0, 0.1, 0.1])
    text = "\n".join(cm.compile_lines(tmp_path))
    assert "| vanilla_rag-labeled | closed_book | 3 | +0.333" in text  # (0.3+0.3+0.4)/3
    # the compiled runs do not show up as a data set of their own
    assert cm.COMPILED_DIR not in cm.collect(tmp_path)

    # a compiled diva is also held to the target pair diva >= vanilla_rag: against the
    # zero-shot vanilla_rag and the vanilla_rag compiled with the same teleprompter
    write_run(tmp_path / cm.COMPILED_DIR / "diva-labeled",
              str(tmp_path / "compiled" / "diva-labeled.json"), [0.4, 0.4, 0.4])
    text = "\n".join(cm.compile_lines(tmp_path))
    assert "| diva-labeled | closed_book | 3 | +0.333" in text  # (0.4+0.3+0.3)/3
    assert "| diva-labeled | vanilla_rag | 3 | +0.200" in text  # (0.3+0.2+0.1)/3
    assert "| diva-labeled | vanilla_rag-labeled | 3 | +0.000" in text  # (0.1+0-0.1)/3
    assert "| diva-labeled | diva |" not in text  # no zero-shot diva row here
    assert "| vanilla_rag-labeled | diva" not in text  # the pair runs one way
    # a compiled run still under way is left out of the compile tables too
    text = "\n".join(cm.compile_lines(tmp_path, frozenset({f"{cm.COMPILED_DIR}/diva-labeled"})))
    assert "diva-labeled" not in text and "| vanilla_rag-labeled | 3 | 0 |" in text


def test_a_plan_variant_runs_its_program_under_its_own_name(tmp_path, shared_data, use_lm,
                                                            benchmark_script, monkeypatch):
    """A variant row (a fix an error analysis chose) runs the program it names with its own
    settings into its own run directory, and the tables pair it by that name."""
    import dataclasses

    from ambiqa.retrieval.base import InMemoryRetriever
    from ambiqa.types import Passage

    cm = benchmark_script("compare_methods")
    assert cm.PLAN["webq"].program_of("vanilla_rag-recall") == "vanilla_rag"
    assert cm.PLAN["webq"].configs["vanilla_rag-recall"]["recall_fallback"] is True
    ds = dataclasses.replace(
        cm.PLAN["webq"], programs={"closed_book": 2, "vanilla_rag": 2, "vanilla_rag-recall": 2},
        configs={**cm.PLAN["webq"].configs,
                 "vanilla_rag-recall": {"answer_form": "short", "recall_fallback": True}},
        variants={"vanilla_rag-recall": "vanilla_rag"},
        pairs=(("vanilla_rag-recall", "vanilla_rag"),))
    monkeypatch.setitem(cm.PLAN, "webq", ds)
    job = cm.evaluate_job(ds, "vanilla_rag-recall", 2, tmp_path, lm=None, index=None,
                          threads=1, timeout_s=None, reader=None)
    assert job.target == "vanilla_rag"
    assert job.settings.program_config["recall_fallback"] is True
    lm = use_lm(scripted_lm({"ShortAnswer": {"answer": "Paris"},
                             "ShortAnswerOrUnknown": {"answer": "Lyon"}}))
    retriever = InMemoryRetriever([Passage("p1", "France", "Paris is the capital of France.")])
    root = tmp_path / "compare"
    st = cm.run_plan(["webq"], None, 2, root, lm=None, index="memory:test", lm_object=lm,
                     retriever=retriever, progress=False, log=lambda _: None)
    assert [s["ok"] for s in st] == [True, True, True]
    meta = json.loads((root / "webq" / "vanilla_rag-recall" / "run.json").read_text())
    assert meta["program"] == "vanilla_rag"
    assert lm.engine.count("ShortAnswerOrUnknown") == 2
    assert lm.engine.count("ShortAnswer") == 4  # closed_book and vanilla_rag, 2 each
    text = cm.write_tables(root).read_text()
    assert "| vanilla_rag-recall | webq:dev:2 | 2 | 0 |" in text
    assert "| vanilla_rag-recall | vanilla_rag | 2 |" in text
    assert "| vanilla_rag-recall | closed_book | 2 |" in text


def test_eor_rows_use_weights_tuned_on_training_questions(tmp_path, shared_data, use_lm,
                                                          benchmark_script, monkeypatch):
    """The plan's "eor" rows evaluate the artifact ``--tune-eor`` fits on WebQ *train*
    member answers; before it exists they are skipped with the command to make it, and the
    untuned row runs the same pool with the default weights. The tables carry EoR's
    retriever-consistency figures with the voted answer as one of the systems."""
    from ambiqa.retrieval import encoder as enc_mod
    from ambiqa.retrieval.base import InMemoryRetriever
    from ambiqa.testing import HashEncoder
    from ambiqa.types import Passage

    monkeypatch.setitem(enc_mod._CACHE, "minilm", HashEncoder())  # no model load
    cm = benchmark_script("compare_methods")
    assert cm.PLAN["webq"].program_of("eor-untuned") == "eor"
    assert cm.PLAN["nq"].artifacts["eor"] == cm.EOR_TUNED == cm.PLAN["webq"].artifacts["eor"]
    plan_tuning = cm.EOR_TUNINGS["webq-train"]
    assert plan_tuning.spec() == "webq:train:100" and plan_tuning.artifact == cm.EOR_TUNED
    # NQ's own weights come from questions after the 60 the table scores, never from them
    held_out = cm.EOR_TUNINGS["nq-heldout"]
    assert held_out.spec() == "nq:oracle:61-160" and held_out.start > cm.PLAN["nq"].n
    assert cm.PLAN["nq"].artifacts["eor-nq-heldout"] == held_out.artifact

    def short(inp):
        return {"answer": "Paris" if "Paris" in str(inp.get("passages", "")) else "Lyon"}

    lm = use_lm(scripted_lm({"ShortAnswer": short,
                             "BackgroundDocument": {"background": "France is in Europe."}}))
    retriever = InMemoryRetriever([Passage("p1", "France", "Paris is the capital of France.")])
    root = tmp_path / "evidence"
    logs: list[str] = []
    kw = dict(lm=None, index="memory:test", lm_object=lm, retriever=retriever, progress=False,
              log=logs.append)
    st = cm.run_plan(["webq"], ["eor", "eor-untuned"], 2, root, **kw)
    assert [(s["program"], s["ok"]) for s in st] == [("eor", False), ("eor-untuned", True)]
    assert any("--tune-eor" in line for line in logs)
    out = cm.run_eor_tuning(root, n=3, trials=5, **kw)
    artifact = root / cm.EOR_TUNED
    assert out["n"] == 3 and artifact.is_file()
    train = json.loads((root / "tuning" / "eor-webq-train" / "run.json").read_text())
    assert train["data"] == "webq:train:3"
    report = json.loads((root / "tuning" / "eor-webq-train-weights.json").read_text())
    assert report["data"].startswith("webq:train") and report["dev"]["n"] == 2
    st = cm.run_plan(["webq"], ["eor"], 2, root, **kw)
    assert st[0]["ok"] is True, (st, logs[-3:])
    meta = json.loads((root / "webq" / "eor" / "run.json").read_text())
    assert meta["program"].endswith("eor-webq-tuned.json")
    text = cm.write_tables(root).read_text()
    assert "| eor | webq:dev:2 | 2 | 0 |" in text and "| eor | eor-untuned | 2 |" in text
    assert "Retriever consistency of eor-untuned" in text and "| EoR (voted) |" in text
    assert "## tuning" not in text  # the training-split run is not a table of its own


def test_eor_weights_for_nq_are_tuned_on_held_out_questions_only(
        tmp_path, shared_data, use_lm, benchmark_script, monkeypatch):
    """The NQ fix: eor on NQ questions after the table's first N, tune-eor with the data
    guard's record (an evaluation split, allowed and written into the artifact), the row
    evaluated from that artifact on the table's questions."""
    from ambiqa.retrieval import encoder as enc_mod
    from ambiqa.retrieval.base import InMemoryRetriever
    from ambiqa.testing import HashEncoder
    from ambiqa.types import Passage

    monkeypatch.setitem(enc_mod._CACHE, "minilm", HashEncoder())
    cm = benchmark_script("compare_methods")
    lm = use_lm(scripted_lm({"ShortAnswer": {"answer": "Paris"},
                             "BackgroundDocument": {"background": "France is in Europe."}}))
    retriever = InMemoryRetriever([Passage("p1", "France", "Paris is the capital of France.")])
    root = tmp_path / "evidence"
    kw = dict(lm=None, index="memory:test", lm_object=lm, retriever=retriever, progress=False,
              log=lambda _: None)
    cm.run_plan(["nq"], ["eor-untuned"], 2, root, **kw)
    out = cm.run_eor_tuning(root, tuning="nq-heldout", n=3, trials=5, **kw)
    train = json.loads((root / "tuning" / "eor-nq-heldout" / "run.json").read_text())
    assert train["data"] == "nq:oracle:61-63" and out["n"] == 3
    report = json.loads((root / "tuning" / "eor-nq-heldout-weights.json").read_text())
    assert report["data_guard"]["allow_eval_splits"] is True
    assert report["data_guard"]["violations"] and report["dev"]["n"] == 2
    st = cm.run_plan(["nq"], ["eor-nq-heldout"], 2, root, **kw)
    assert st[0]["ok"] is True
    meta = json.loads((root / "nq" / "eor-nq-heldout" / "run.json").read_text())
    assert meta["program"].endswith("eor-nq-heldout.json") and meta["data"] == "nq:oracle:2"


def test_rows_answered_from_the_response_cache_are_marked_and_kept_off_the_cost_plot(
        benchmark_script):
    """A tuned EoR row re-reads its members' answers from DSPy's cache: calls with no tokens
    and no latency. Its cost is not a fresh run's, so the table marks it and the plot skips
    it; a model that reports no token usage but takes real time is not mistaken for it."""
    cm = benchmark_script("compare_methods")

    def row(i, tokens, latency, calls=3):
        return {"id": str(i), "metrics": {"em": 1.0},
                "cost": {"lm_calls": calls, "input_tokens": tokens, "lm_latency_s": latency}}

    cached = [row(i, 0, 0.01) for i in range(3)]
    fresh = [row(i, 800, 40.0) for i in range(3)]
    no_usage = [row(i, 0, 12.0) for i in range(3)]
    assert cm.served_from_cache(cached) and not cm.served_from_cache(fresh)
    assert not cm.served_from_cache(no_usage)
    assert not cm.served_from_cache([row(0, 0, 0.0, calls=0)])  # no LM call at all
    assert cm.served_from_cache([*cached[:2], fresh[0]])
    assert not cm.served_from_cache([cached[0], *fresh[:2]])


def test_runs_still_under_way_can_be_left_out_of_the_tables(tmp_path, benchmark_script) -> None:
    cm = benchmark_script("compare_methods")
    for name, scores in (("closed_book", [0.0, 0.1]), ("verdict", [0.5])):
        path = tmp_path / "asqa" / name
        path.mkdir(parents=True)
        (path / "run.json").write_text(json.dumps(
            {"program": name, "data": "asqa:dev:2", "metrics": list(cm.ASQA_METRICS),
             "reader": "extractive:r"}))
        (path / "results.jsonl").write_text("".join(json.dumps(
            {"id": str(i), "error": None, "prediction": {"answer": "a"},
             "cost": {"lm_calls": 1, "output_tokens": 5, "wall_s": 1.0},
             "metrics": {"str-em": v, "rouge-l": v, "d-f1": v, "mrecall@5": v}}) + "\n"
            for i, v in enumerate(scores)))
    assert "| verdict |" in cm.write_tables(tmp_path).read_text()

    text = cm.write_tables(tmp_path, exclude=frozenset({"asqa/verdict"})).read_text()
    assert "| verdict |" not in text and "| closed_book |" in text
    assert "--exclude asqa/verdict" in text and "still under way: `asqa/verdict`" in text
    with pytest.raises(ConfigError, match="asqa/verdit"):
        cm.write_tables(tmp_path, exclude=frozenset({"asqa/verdit"}))


def test_an_artifact_run_is_labelled_by_its_file_name_not_the_machine_path(tmp_path):
    from ambiqa.evaluation.reports.report import load_run

    art = _write_run(tmp_path / "a", "/home/someone/work/compiled/rag-knn.json", "nq:dev:2",
                     {"1": 1.0, "2": 0.0})
    plain = _write_run(tmp_path / "b", "vanilla_rag", "nq:dev:2", {"1": 1.0, "2": 1.0})
    assert load_run(art).label == "rag-knn.json"
    assert load_run(plain).label == "vanilla_rag"
    out = tmp_path / "cmp"
    assert main(["compare", str(art), str(plain), "--out", str(out)]) == 0
    assert "/home/someone" not in (out / "compare.md").read_text()
