"""`ambiqa report`: headline values on their distributions, cost and latency, the worst
questions, the HTML page, and plots that draw exactly the table's numbers."""

from __future__ import annotations

import json
import math
import os
import stat

import pytest

from ambiqa.cli import main
from ambiqa.evaluation.reports.report import (
    cost_stats,
    load_run,
    main_metric,
    per_question_score,
    write_run_report,
)
from tests.reports.conftest import (
    EVIL_ANSWER,
    EVIL_QUESTION,
    SCORES_A,
    artist,
    interval,
    md_table,
    number,
    x_span,
)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_every_plotted_number_is_the_tables(make_asqa_run, captured_figures):
    run = make_asqa_run("diva", SCORES_A)
    assert main(["report", str(run)]) == 0
    md = (run / "report.md").read_text(encoding="utf-8")
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    fig = captured_figures["metrics.png"]
    quality = {r["metric"]: r for r in md_table(md, "metric")}
    assert set(quality) == {"str-em", "rouge-l", "d-f1", "dr", "mrecall@5"}
    for name, row in quality.items():
        drawn = artist(fig, f"value:{name}").get_xdata()[0]
        assert drawn == pytest.approx(number(row["value (failed = 0)"]), abs=5.1e-4)
        assert drawn == summary["metrics"][name]["mean"]  # the very same float
        lo, hi = x_span(artist(fig, f"ci:{name}"))
        assert (lo, hi) == pytest.approx(interval(row["95% CI"]), abs=5.1e-4)
    # DR: the set-level value, sqrt(mean D-F1 x mean ROUGE-L) with the failed question at 0,
    # is marked; the histogram's quantity is dr_q, whose mean (dotted) is a different number
    d = sum(x or 0.0 for x, _ in SCORES_A) / len(SCORES_A)
    r = sum(y if x is not None else 0.0 for x, y in SCORES_A) / len(SCORES_A)
    assert artist(fig, "value:dr").get_xdata()[0] == pytest.approx(math.sqrt(d * r))
    q_mean = sum(math.sqrt(x * y) for x, y in SCORES_A if x is not None) / len(SCORES_A)
    dotted = artist(fig, "quantity_mean:dr").get_xdata()[0]
    assert dotted == pytest.approx(q_mean) and abs(dotted - math.sqrt(d * r)) > 0.04
    assert "dr_q = sqrt(d-f1 × rouge-l) of one question" in md
    # cost: the plotted means and medians are the cost table's
    costs = {r[""]: r for r in md_table(md, "")}
    cfig = captured_figures["cost.png"]
    for key, label, digits in (("lm_calls", "LM calls", 1), ("wall_s", "wall s", 2),
                               ("tokens", "computed tokens (computed prompt + output)", 1)):
        mean = artist(cfig, f"mean:{key}").get_xdata()[0]
        median = artist(cfig, f"median:{key}").get_xdata()[0]
        assert mean == pytest.approx(number(costs[label]["mean per question"]),
                                     abs=0.6 * 10 ** -digits)
        assert median == pytest.approx(number(costs[label]["median"]), abs=0.6 * 10 ** -digits)
        assert mean == summary["cost_stats"][key]["mean"]


def test_report_lays_out_the_worst_questions_with_gold_and_passages(make_asqa_run):
    run = make_asqa_run("diva", SCORES_A)
    summary = write_run_report(run)
    assert summary["main_metric"] == "dr"
    md = (run / "report.md").read_text(encoding="utf-8")
    assert "## The 10 worst questions by dr" in md
    worst = md[md.index("## The 10 worst"):]
    headings = [line for line in worst.splitlines() if line.startswith("### ")]
    assert len(headings) == 10
    # the failed question first, then dr_q = 0 (D-F1 0) ordered by D-F1 + ROUGE-L
    assert headings[0] == "### 1. Which thing number 3 is meant?"
    assert [h.split("number ")[1][0] for h in headings[1:5]] == ["7", "9", "4", "1"]
    assert "**Failed:** Timeout: no result after 5 s" in worst
    assert "| Which thing 7 in the second sense? | gold-7-b / alias-7-b |" in worst
    assert "> It is answer 7." in worst
    assert "**[p70] Title 7.0** (cited): Passage 0 about thing 7." in worst
    assert "x" * 900 not in worst and " …" in worst  # long passages cut, marked
    best = max(range(len(SCORES_A)), key=lambda i: per_question_score(
        load_run(run).rows[i], "dr") or (0, 0))
    assert f"number {best} is meant?" not in worst  # the best question is not among them


def test_report_html_escapes_the_data_and_embeds_the_plots(make_asqa_run):
    run = make_asqa_run("diva", SCORES_A)
    write_run_report(run)
    page = (run / "report.html").read_text(encoding="utf-8")
    assert page.count('<img src="data:image/png;base64,') == 2  # metrics and cost
    assert "<script" not in page and "<img src=x" not in page
    assert "Who wrote &lt;script&gt;alert(&#x27;q&#x27;)&lt;/script&gt; &amp; why?" in page
    assert "&lt;img src=x onerror=alert(1)&gt; | a pipe" in page
    md = (run / "report.md").read_text(encoding="utf-8")
    assert EVIL_QUESTION not in md and EVIL_ANSWER not in md  # no raw tag in Markdown either
    assert "\\| a pipe" in md or "| a pipe" in md


def test_report_files_are_0644_under_the_umask_and_out_leaves_the_run_alone(make_asqa_run,
                                                                              tmp_path):
    run = make_asqa_run("diva", SCORES_A)
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    out = tmp_path / "elsewhere"
    assert main(["report", str(run), "--out", str(out)]) == 0
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before
    want = 0o644 & ~_umask()
    for name in ("report.md", "report.html", "summary.json", "plots/metrics.png",
                 "plots/cost.png"):
        assert stat.S_IMODE((out / name).stat().st_mode) == want, name


def test_cost_stats_and_main_metric():
    rows = [{"id": "a", "cost": {"lm_calls": 1, "input_tokens": 100, "cached_tokens": 30,
                                 "output_tokens": 5, "wall_s": 2.0}},
            {"id": "b", "cost": {"lm_calls": 3, "input_tokens": 50, "computed_tokens": 50,
                                 "output_tokens": 5, "wall_s": 4.0}},
            {"id": "c", "cost": None}]
    st = cost_stats(rows)
    assert st["lm_calls"]["mean"] == 2.0 and st["lm_calls"]["n"] == 2
    # no computed_tokens recorded: prompt minus cached
    assert st["computed_tokens"]["total"] == 70 + 50
    assert st["tokens"]["mean"] == (75 + 55) / 2
    assert main_metric(["str-em", "rouge-l", "d-f1", "dr"]) == "dr"
    assert main_metric(["em", "f1", "recall@5"]) == "f1"
    assert main_metric(["recall@5"]) == "recall@5"
