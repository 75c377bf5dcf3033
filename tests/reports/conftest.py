"""Run directories for the report and comparison tests: a small ASQA-format data file (so the
report finds gold answers the way the CLI does, by reloading ``run.json``'s data spec) and
rows as ``ambiqa evaluate`` writes them, one failed, one whose text tries to inject HTML."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

#: a question and an answer that would run script if a page did not escape them
EVIL_QUESTION = "Who wrote <script>alert('q')</script> & why?"
EVIL_ANSWER = "<img src=x onerror=alert(1)> | a pipe"


def _record(i: int) -> dict[str, Any]:
    return {"sample_id": f"q{i}", "ambiguous_question": EVIL_QUESTION if i == 2 else
            f"Which thing number {i} is meant?",
            "qa_pairs": [{"question": f"Which thing {i} in the first sense?",
                          "short_answers": [f"gold-{i}-a"]},
                         {"question": f"Which thing {i} in the second sense?",
                          "short_answers": [f"gold-{i}-b", f"alias-{i}-b"]}],
            "annotations": [{"long_answer": f"Thing {i} is gold-{i}-a or gold-{i}-b."}]}


def _row(i: int, d: float | None, r: float, *, program_scale: float = 1.0) -> dict[str, Any]:
    """One results.jsonl row; ``d is None`` makes it a failed question."""
    cost = {"lm_calls": 2 + i % 3, "input_tokens": 1000 + 100 * i,
            "computed_tokens": 600 + 50 * i, "cached_tokens": 400 + 50 * i,
            "output_tokens": 80 + 10 * i, "retriever_calls": 1, "wall_s": 10.0 + 3 * i,
            "critical_path_s": 9.0 + 3 * i, "events": []}
    cost = {k: (v * program_scale if isinstance(v, int | float) else v)
            for k, v in cost.items()}
    question = EVIL_QUESTION if i == 2 else f"Which thing number {i} is meant?"
    if d is None:
        return {"id": f"q{i}", "question": question, "prediction": None,
                "error": "Timeout: no result after 5 s", "metrics": {}, "cost": cost,
                "wall_s": cost["wall_s"]}
    passages = [{"id": f"p{i}{k}", "title": f"Title {i}.{k}",
                 "text": f"Passage {k} about thing {i}. " + "x" * (40 if k else 900)}
                for k in range(3)]
    return {"id": f"q{i}", "question": question, "error": None,
            "prediction": {"answer": EVIL_ANSWER if i == 2 else f"It is answer {i}.",
                           "interpretations": [{"question": f"Reading {i}?",
                                                "answer": f"answer {i}",
                                                "passages": [f"p{i}0"]}],
                           "passages": passages},
            "metrics": {"str-em": 0.5 * (i % 3 == 0), "rouge-l": r, "d-f1": d,
                        "mrecall@5": float(i % 2), "dr_q": math.sqrt(d * r)},
            "cost": cost, "wall_s": cost["wall_s"]}


#: (D-F1, ROUGE-L) per question of the two programs; None = failed
SCORES_A = [(0.5, 0.4), (0.0, 0.3), (1.0, 0.2), (None, 0.0), (0.0, 0.25), (0.25, 0.35),
            (0.75, 0.5), (0.0, 0.1), (0.5, 0.45), (0.0, 0.15), (0.2, 0.3), (0.6, 0.4)]
SCORES_B = [(0.7, 0.5), (0.2, 0.3), (1.0, 0.3), (0.5, 0.3), (0.1, 0.3), (0.5, 0.35),
            (0.75, 0.6), (0.3, 0.2), (0.5, 0.5), (0.2, 0.2), (0.4, 0.3), (0.8, 0.5)]


@pytest.fixture()
def asqa_file(tmp_path: Path) -> Path:
    path = tmp_path / "data" / "mini_asqa.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps([_record(i) for i in range(len(SCORES_A))]), encoding="utf-8")
    return path


@pytest.fixture()
def make_asqa_run(tmp_path: Path, asqa_file: Path) -> Callable[..., Path]:
    """``make_asqa_run(name, scores, program=..., lm=...)`` writes a run directory."""

    def make(name: str, scores: list[tuple[float | None, float]], *, program: str = "diva",
             lm: str | None = "embedded", reader: str = "extractive:test-reader",
             scale: float = 1.0) -> Path:
        run = tmp_path / "runs" / name
        run.mkdir(parents=True)
        spec = {"program": program, "data": f"asqa:{asqa_file}",
                "metrics": ["str-em", "rouge-l", "d-f1", "dr", "mrecall@5"],
                "reader": reader, "lm": lm, "index": "dense:wiki-test",
                "index_fingerprint": "dense:0123456789abcdef"}
        (run / "run.json").write_text(json.dumps(spec), encoding="utf-8")
        rows = [_row(i, d, r, program_scale=scale) for i, (d, r) in enumerate(scores)]
        (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows),
                                           encoding="utf-8")
        return run

    return make


@pytest.fixture()
def captured_figures(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Every figure the plots module saves, by file name, so a test reads back what was
    drawn (the artists carry gids) instead of trusting the inputs."""
    from ambiqa.evaluation.reports import plots

    figures: dict[str, Any] = {}
    original = plots._save

    def keep(fig: Any, path: Path, **kwargs: Any) -> Path:
        figures[Path(path).name] = fig
        return original(fig, path, **kwargs)

    monkeypatch.setattr(plots, "_save", keep)
    return figures


def artist(fig: Any, gid: str) -> Any:
    found = fig.findobj(match=lambda a: a.get_gid() == gid)
    assert found, f"no artist {gid!r} in the figure"
    return found[0]


def x_span(a: Any) -> tuple[float, float]:
    """(left, right) of an axvspan (a Rectangle, or a Polygon on older matplotlib)."""
    if hasattr(a, "get_width"):
        return float(a.get_x()), float(a.get_x() + a.get_width())
    xs = [float(p[0]) for p in a.get_xy()]
    return min(xs), max(xs)


def md_table(md: str, first_header: str) -> list[dict[str, str]]:
    """The rows of the Markdown table whose first header cell is ``first_header``."""
    lines = md.splitlines()
    for k, line in enumerate(lines):
        cells = _cells(line)
        if cells and cells[0] == first_header and k + 1 < len(lines) and \
                lines[k + 1].startswith("|---"):
            seen: dict[str, int] = {}
            for j, name in enumerate(cells):  # a repeated header: "run", then "run#2"
                seen[name] = seen.get(name, 0) + 1
                if seen[name] > 1:
                    cells[j] = f"{name}#{seen[name]}"
            out = []
            for row in lines[k + 2:]:
                if not row.startswith("|"):
                    break
                out.append(dict(zip(cells, _cells(row), strict=False)))
            return out
    raise AssertionError(f"no table headed {first_header!r}")


def _cells(line: str) -> list[str]:
    if not line.startswith("|"):
        return []
    parts = re.split(r"(?<!\\)\|", line.strip())[1:-1]
    return [p.strip() for p in parts]


def interval(cell: str) -> tuple[float, float]:
    m = re.search(r"\[(-?[\d.]+), (-?[\d.]+)\]", cell)
    assert m, f"no interval in {cell!r}"
    return float(m.group(1)), float(m.group(2))


def number(cell: str) -> float:
    m = re.match(r"\s*([-+]?[\d.,]+)", cell)
    assert m, f"no number in {cell!r}"
    return float(m.group(1).replace(",", ""))
