"""`ambiqa evaluate`'s summary shows what a program costs per question: LM and retriever calls,
computed and cached prompt tokens, output tokens and seconds (issue 45)."""

from __future__ import annotations

import json
import re

import pytest

from ambiqa.cli import main
from ambiqa.cli.eval_cmds import cost_line


def test_cost_line_from_the_report_stats_and_from_the_runner_summary():
    stats = {"lm_calls": {"mean": 2.0}, "retriever_calls": {"mean": 1.0},
             "input_tokens": {"mean": 1802.4}, "computed_tokens": {"mean": 1257.0},
             "output_tokens": {"mean": 285.6}, "wall_s": {"mean": 95.14}}
    assert cost_line({"cost_stats": stats, "cost": {}}) == (
        "cost/question: 2.0 LM calls, 1.0 retriever calls; tokens 1,257 computed + 545 cached "
        "prompt, 286 output; 95.1 s")
    # a summary without the report's stats: every prompt token counts as computed
    runner = {"cost": {"lm_calls": 1.0, "input_tokens": 232.0, "output_tokens": 121.0,
                       "retriever_calls": 0.0, "wall_s": 24.28}}
    assert cost_line(runner) == ("cost/question: 1.0 LM calls, 0.0 retriever calls; tokens "
                                 "232 computed + 0 cached prompt, 121 output; 24.3 s")


@pytest.fixture()
def fresh_dspy():
    from dspy.dsp.utils.settings import main_thread_config

    saved = dict(main_thread_config)
    yield
    main_thread_config.clear()
    main_thread_config.update(saved)


def test_evaluate_prints_tokens_and_seconds_per_question(tmp_path, capsys, fresh_dspy):
    from ambiqa.testing_server import serve

    data = tmp_path / "q.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "question": f"Who wrote book {i}?",
                                        "answers": ["Someone"]}) + "\n" for i in range(2)))
    url, shutdown = serve(0.0)
    try:
        assert main(["evaluate", "closed_book", "--data", f"jsonl:{data}", "--out",
                     str(tmp_path / "run"), "--lm", "openai/fake", "--api-base", url,
                     "--no-cache"]) == 0
    finally:
        shutdown()
    out = " ".join(capsys.readouterr().out.split())
    m = re.search(r"cost/question: ([\d.]+) LM calls, ([\d.]+) retriever calls; tokens "
                  r"([\d,]+) computed \+ ([\d,]+) cached prompt, ([\d,]+) output; ([\d.]+) s",
                  out)
    assert m, out
    rows = [json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text()
            .splitlines()]
    mean = lambda key: sum(r["cost"][key] for r in rows) / len(rows)  # noqa: E731
    assert float(m[1]) == mean("lm_calls") == 1.0
    assert int(m[3].replace(",", "")) == round(mean("computed_tokens")) > 0
    assert int(m[4].replace(",", "")) == round(mean("cached_tokens"))
    assert int(m[5].replace(",", "")) == round(mean("output_tokens")) > 0
    assert float(m[6]) == pytest.approx(mean("wall_s"), abs=0.05)
