"""`ambiqa compare`: the forest plot and quality against cost draw the tables' numbers, the
main metric and cost axis are chosen as documented, and the setup names every run's LM,
reader, index and data."""

from __future__ import annotations

import json

import pytest

from ambiqa.cli import EXIT_USER_ERROR, main
from tests.reports.conftest import (
    SCORES_A,
    SCORES_B,
    artist,
    interval,
    md_table,
    number,
)


def _runs(make_asqa_run):
    a = make_asqa_run("zero-shot", SCORES_A, program="vanilla_rag")
    b = make_asqa_run("compiled", SCORES_B, program="/somewhere/artifacts/diva-knn.json",
                      scale=3.0)
    c = make_asqa_run("same", SCORES_A, program="closed_book", lm=None)
    return a, b, c


def test_forest_and_quality_plots_draw_the_tables_numbers(make_asqa_run, captured_figures,
                                                          tmp_path):
    a, b, c = _runs(make_asqa_run)
    out = tmp_path / "cmp"
    assert main(["compare", str(a), str(b), str(c), "--out", str(out), "--cost",
                 "tokens"]) == 0
    md = (out / "compare.md").read_text(encoding="utf-8")
    side = {r["run"]: r for r in md_table(md, "run")}  # the first table headed "run"
    paired = md_table(md[md.index("## Paired differences"):], "run")
    assert {r["run"] for r in paired} == {"diva-knn", "closed_book"}
    forest = captured_figures["forest.png"]
    assert "against vanilla_rag (reference)" in forest._suptitle.get_text()
    for r in paired:
        gid = f"{r['run']}|{r['metric']}"
        diff = artist(forest, f"diff:{gid}").get_xdata()[0]
        assert diff == pytest.approx(number(r["Δ"].replace("−", "-")), abs=5.1e-4)
        ci = artist(forest, f"ci:{gid}")
        lo, hi = interval(r["95% CI"])
        assert ci.get_xdata()[0] == pytest.approx(lo, abs=5.1e-4)
        assert ci.get_xdata()[1] == pytest.approx(hi, abs=5.1e-4)
        assert artist(forest, f"zero:{r['metric']}").get_xdata()[0] == 0.0
    # the same run against itself on the same questions: every difference is exactly 0
    assert all(number(r["Δ"]) == 0.0 for r in paired if r["run"] == "closed_book")
    result = json.loads((out / "comparison.json").read_text(encoding="utf-8"))
    quality = captured_figures["quality_vs_cost.png"]
    for run in result["runs"]:
        label = run["label"]
        x, y = (v[0] for v in artist(quality, f"point:{label}").get_data())
        assert y == pytest.approx(number(side[label]["dr"]), abs=5.1e-4)  # main metric: DR
        assert x == run["cost"]["tokens"] == run["cost_stats"]["tokens"]["mean"]
        bar = artist(quality, f"ci:{label}").get_ydata()
        assert tuple(bar) == pytest.approx(interval(side[label]["dr"]), abs=5.1e-4)
    assert result["runs"][1]["cost"]["tokens"] == pytest.approx(
        3 * result["runs"][0]["cost"]["tokens"])
    page = (out / "compare.html").read_text(encoding="utf-8")
    assert page.count('<img src="data:image/png;base64,') == 2
    assert "dr against cost" in md and "computed tokens per question" in md


def test_setup_names_lm_reader_index_and_data_of_each_run(make_asqa_run, tmp_path):
    a, b, c = _runs(make_asqa_run)
    spec = json.loads((b / "run.json").read_text(encoding="utf-8"))
    spec.update(max_tokens=512, temperature=0.0, endpoint="http://127.0.0.1:8080/v1")
    (b / "run.json").write_text(json.dumps(spec), encoding="utf-8")
    out = tmp_path / "cmp"
    assert main(["compare", str(a), str(b), str(c), "--out", str(out)]) == 0
    md = (out / "compare.md").read_text(encoding="utf-8")
    setup = {r["run"]: r for r in md_table(md[md.index("## Setup"):], "run")}
    assert setup["diva-knn"]["LM settings"] == ("max tokens 512, temperature 0.0, endpoint "
                                                "http://127.0.0.1:8080/v1")
    assert setup["vanilla_rag"]["LM settings"] == "–"
    assert setup["vanilla_rag"]["LM"] == "`embedded`"
    assert setup["diva-knn"]["program"] == "`diva-knn.json`"  # the artifact, not its path
    for row in setup.values():
        assert row["D-F1 reader"] == "`extractive:test-reader`"
        assert row["index"] == "`dense:wiki-test`"
        assert row["index fingerprint"] == "`dense:0123456789abcdef`"
        assert row["data"].startswith("`asqa:") and row["data"].endswith("mini_asqa.json`")
    assert setup["closed_book"]["LM"] == "not recorded"  # its run.json has lm: null
    assert "LM not recorded in run.json for closed_book" in md
    assert md.count("not recorded") == 2  # only there: the recorded LMs are named


def test_metric_and_cost_axes_are_chosen_and_checked(make_asqa_run, tmp_path, capsys,
                                                     captured_figures):
    a, b, _ = _runs(make_asqa_run)
    out = tmp_path / "cmp"
    assert main(["compare", str(a), str(b), "--out", str(out), "--metric", "ROUGE-L",
                 "--cost", "seconds"]) == 0
    md = (out / "compare.md").read_text(encoding="utf-8")
    assert "## rouge-l against cost" in md and "seconds per question" in md
    forest = captured_figures["forest.png"]
    titles = [ax.get_title(loc="left") for ax in forest.axes if ax.get_visible()]
    assert titles[0] == "Δ rouge-l"  # the chosen metric leads the forest plot
    capsys.readouterr()
    assert main(["compare", str(a), str(b), "--out", str(out), "--metric", "em"]) \
        == EXIT_USER_ERROR
    assert "--metric 'em' is not among the compared metrics" in capsys.readouterr().err
    assert main(["compare", str(a), str(b), "--out", str(out), "--cost", "dollars"]) == 2


def test_short_answer_sets_default_to_f1(tmp_path, captured_figures):
    def run(name, scores, calls):
        d = tmp_path / name
        d.mkdir()
        (d / "run.json").write_text(json.dumps({"program": name, "data": "nq:dev:4",
                                                "metrics": ["em", "f1"], "reader": None,
                                                "lm": "scripted"}))
        rows = [{"id": f"q{i}", "question": f"q{i}", "error": None,
                 "prediction": {"answer": "x"}, "metrics": {"em": float(v >= 1), "f1": v},
                 "cost": {"lm_calls": calls, "wall_s": 1.0}} for i, v in enumerate(scores)]
        (d / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        return d

    a = run("closed_book", [0.0, 0.5, 1.0, 0.2], 1)
    b = run("vanilla_rag", [1.0, 0.5, 1.0, 0.6], 2)
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "o")]) == 0
    md = (tmp_path / "o" / "compare.md").read_text(encoding="utf-8")
    assert "## f1 against cost" in md
    point = artist(captured_figures["quality_vs_cost.png"], "point:vanilla_rag")
    assert point.get_data()[1][0] == pytest.approx(0.775)
    assert point.get_data()[0][0] == 2.0  # LM calls by default
