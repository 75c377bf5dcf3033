"""Run reports: ``summary.json``, ``report.md``, ``report.html`` and PNG plots from a run's
``results.jsonl``.

A report is always rebuilt from the rows on disk (``ambiqa report RUN_DIR`` does only that),
so a killed, resumed or extended run renders the same as an uninterrupted one, and a run
written by an older ambiqa renders with a newer one.

``summary.json`` keeps the keys older versions wrote (``run``, ``n``, ``n_errors``,
``metrics``, ``cost``) and adds to them: ``reader``/``judge`` (who scored), ``cost_total``,
``scoring_cost``, ``errors``, ``degraded`` and, for runs whose predictions carry per-retriever
answers (EoR's ``member_answers``), ``consistency``: the RWR matrix, MRWR and MRLR across the
pool members (EoR eq. 1-3) with each member's accuracy; ``cost_stats`` (mean, median, 90th
percentile, max and total per question of every cost) and ``main_metric``.

The report is a page a person reads to decide and to find out why: each headline metric's
set-level value and interval marked on its per-question distribution (``plots/metrics.png``),
cost and latency per question (``plots/cost.png``), and the ten worst questions with the
program's answer and interpretations, the gold answers and the passages it read. It is built
once (:mod:`ambiqa.evaluation.reports.html`) and written as Markdown and as one self-contained HTML
page; the plots draw the same numbers the tables print.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

from ambiqa.evaluation.registry import interpretations_of
from ambiqa.evaluation.reports.html import (
    Bold,
    Bullets,
    Code,
    Details,
    Document,
    Heading,
    Image,
    Para,
    Quote,
    Table,
)
from ambiqa.evaluation.reports.run_data import (  # re-exported: callers import them from here
    COST_KEYS,
    N_WORST,
    PASSAGE_CHARS,
    Run,
    cost_stats,
    cost_values,
    gold_views,
    golds_for,
    has_member_answers,
    load_run,
    main_metric,
    member_consistency,
    run_summary,
    worst_rows,
)
from ambiqa.evaluation.reports.run_data import per_question_score as per_question_score  # re-export
from ambiqa.evaluation.reports.run_data import row_cost as row_cost  # re-export
from ambiqa.evaluation.runs.runner import (
    RunSpec,
    write_error,
)
from ambiqa.evaluation.stats import PER_QUESTION_NAME, SET_LEVEL, fmt_interval, part_arrays
from ambiqa.fsutil import atomic_write_json, atomic_write_text

log = logging.getLogger(__name__)

def _fmt(x: Any, digits: int = 3) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        if math.isnan(x):
            return "–"
        return f"{x:.{digits}f}"
    return str(x)


def _md_escape(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _cost_fmt(key: str, x: float) -> str:
    return _fmt(float(x), 2 if key.endswith("_s") else 1)


def per_question_quantity(metric: str) -> tuple[str, str] | None:
    """(name, explanation) of the per-question quantity a set-level metric's distribution
    shows, or None for a plain mean (whose distribution is its own per-question scores)."""
    if metric not in SET_LEVEL:
        return None
    a, b = SET_LEVEL[metric]
    name = PER_QUESTION_NAME.get(metric, f"{metric}_q")
    return name, (f"{name} = sqrt({a} × {b}) of one question; {metric} itself is "
                  f"sqrt(mean {a} × mean {b}) over the set, not the mean of {name}")


def headline_panels(rows: list[dict[str, Any]], summary: dict[str, Any]
                    ) -> list[dict[str, Any]]:
    """One panel per headline metric for :func:`plots.headline_distributions`: the value and
    interval are the summary's (the table's) own; the per-question scores come from the same
    ``part_arrays`` the summary's bootstrap resampled."""
    panels = []
    for name, m in summary["metrics"].items():
        _, ok = part_arrays(rows, name, include_failed=False)
        if not ok or not ok[0] and not m.get("failed"):
            continue
        panel = {"name": name, "value": m["mean"], "lo": m["ci95"][0], "hi": m["ci95"][1],
                 "failed": int(m.get("failed", 0) or 0), "quantity": f"{name} per question"}
        if name in SET_LEVEL:
            qname, _ = per_question_quantity(name) or (f"{name}_q", "")
            roots = [math.sqrt(max(a, 0.0) * max(b, 0.0)) for a, b in zip(*ok, strict=True)]
            n = len(roots) + panel["failed"]
            a, b = SET_LEVEL[name]
            panel.update(scores=roots, quantity_name=qname,
                         quantity_mean=sum(roots) / n if n else math.nan,
                         quantity=f"{qname} = sqrt({a} × {b}) per question "
                                  f"(not averaged into {name})")
        else:
            panel["scores"] = list(ok[0])
        panels.append(panel)
    return panels


def program_label(program: str) -> str:
    """A program's name for titles: a compiled artifact by its file name, not the machine
    path it was evaluated from (reports are committed and read elsewhere)."""
    return Path(program).name if program.endswith(".json") else program


def _facts(run: dict[str, Any], uses_reader: bool) -> list[Any]:
    facts = [("program", run.get("program")), ("data", run.get("data")),
             ("LM", run.get("lm")), ("LM max tokens", run.get("max_tokens")),
             ("LM temperature", run.get("temperature")), ("LM endpoint", run.get("endpoint")),
             ("retriever index", run.get("index")),
             ("index fingerprint", run.get("index_fingerprint")),
             ("D-F1 reader", run.get("reader") if uses_reader else None),
             ("D-F1 reader weights sha256",
              (run.get("reader_identity") or {}).get("weights_sha256") if uses_reader
              else None),
             ("D-F1 reader note", (run.get("reader_identity") or {}).get("note")
              if uses_reader else None),
             ("LM judge", run.get("judge")),
             ("artifact sha256", run.get("artifact_sha256")),
             ("program config", json.dumps(run["program_config"])
              if run.get("program_config") else None)]
    return [[f"{label}: ", Code(str(value))] for label, value in facts
            if value is not None and value != ""]


def cached_line(cached: dict[str, Any], n: int) -> str:
    """The one line a report and ``evaluate`` print when answers came from the response
    cache: those LM calls were not made now, so they say nothing of the LM's state."""
    return (f"from the response cache: {cached.get('calls', 0)} LM call(s) in "
            f"{cached.get('examples', 0)} of {n} examples (replies stored by an earlier run "
            "with the same LM, endpoint and prompt; --no-cache asks the LM anew)")



def completeness_line(summary: dict[str, Any]) -> str | None:
    """The warning a report opens with when its rows are not the questions the run set out to
    answer (``n_planned``): a killed or stopped run (12 of 40 done), or more rows than
    planned; None for a complete run or one that recorded no plan. Its means are over the
    rows that exist, so without this line a killed run reads as a finished one."""
    planned, n = summary.get("n_planned"), int(summary.get("n", 0))
    if not isinstance(planned, int) or n == planned:
        return None
    if n < planned:
        return (f"incomplete run: {n} of {planned} planned questions done ({planned - n} "
                f"without a row: killed or stopped?); its numbers are over those {n} only "
                "(finish it with `ambiqa evaluate ... --resume`)")
    return (f"this run holds {n} rows for {planned} planned questions (rows of another "
            "version of the data?); resume it on the data to drop the stale ones.")


def build_report(summary: dict[str, Any], plots: dict[str, str], notes: list[str],
                 worst: list[dict[str, Any]] | None = None,
                 worst_metric: str | None = None) -> Any:
    """The run report as a :class:`ambiqa.evaluation.reports.html.Document` (rendered to both
    ``report.md`` and ``report.html``)."""
    run = summary.get("run", {})
    doc = Document(f"{program_label(run.get('program') or '?')} on {run.get('data', '?')}")
    incomplete = completeness_line(summary)
    if incomplete:
        doc.add(Para([Bold("Warning: "), incomplete], css="missing"))
    uses_reader = any(k in (run.get("metrics") or []) for k in ("d-f1", "dr"))
    facts = _facts(run, uses_reader)
    facts.append(f"examples: {summary['n']} ({summary['n_errors']} failed)")
    cached = summary.get("cached") or {}
    if cached.get("examples"):
        facts.append(cached_line(cached, summary["n"]))
    if uses_reader:
        facts.append("D-F1 and DR depend on the reader named above; with a stand-in reader "
                     "they are not comparable to published numbers (the ASQA scorer uses a "
                     "RoBERTa-large SQuAD2 reader).")
    doc.add(Bullets(facts))

    doc.add(Heading(2, "Quality"), Table(
        ["metric", "value (failed = 0)", "95% CI", "n", "failed", "value excl. failed",
         "n scored"],
        [[name, _fmt(m["mean"]), fmt_interval(*m["ci95"]), str(m["n"]),
          str(m.get("failed", 0)), _fmt(m.get("mean_excl_failed")),
          str(m.get("n_scored", m["n"]))] for name, m in summary["metrics"].items()],
        "lrnrrrr"))
    if summary.get("mixed_rows"):
        kinds = summary["mixed_rows"]
        doc.add(Para(f"A file mixing {kinds.get('short', 0)} short-answer and "
                     f"{kinds.get('ambiguous', 0)} ambiguous rows: each row is scored by the "
                     "metrics of its kind (short rows EM/F1, ambiguous rows STR-EM/D-F1, "
                     "ROUGE-L/DR where they have a long answer), so each metric's n counts "
                     "its own rows.", css="note"))
    doc.add(Para(["Value: over all n examples, an example whose program or scoring failed "
                  "scoring 0; \"excl. failed\": over the examples that did not fail. Means of "
                  "per-question scores, except DR = sqrt(mean D-F1 × mean ROUGE-L) over the "
                  "set (the ASQA scorer's definition; the per-question root is kept as ",
                  Code("dr_q"), " for plots only). CI: 95% BCa bootstrap over the examples "
                  "(scipy.stats.bootstrap, 2000 resamples); [–]: no interval under 3 "
                  "examples."]))
    if "metric distributions" in plots:
        doc.add(Image("metric distributions", plots["metric distributions"]))
        explain = ["Each panel: how the questions' scores spread, with the value of the table "
                   "above (red line) and its 95% interval (shaded); failed questions are drawn "
                   "grey at 0, as they score."]
        for name in summary["metrics"]:
            q = per_question_quantity(name)
            if q:
                explain.append(f" The {name} panel shows {q[1]} (its mean is the dotted line).")
        doc.add(Para("".join(explain), css="note"))

    stats = summary.get("cost_stats") or {}
    doc.add(Heading(2, "Cost per question"))
    cost_rows = []
    for key, label in [*COST_KEYS.items(), ("tokens", "computed tokens (computed prompt + "
                                                       "output)")]:
        if key not in COST_KEYS and key not in stats:
            continue
        st = stats.get(key) or {"mean": summary["cost"].get(key, 0.0),
                                "total": summary.get("cost_total", {}).get(key, 0.0)}
        cost_rows.append([label, _cost_fmt(key, st["mean"]),
                          _cost_fmt(key, st["median"]) if "median" in st else "",
                          _cost_fmt(key, st["p90"]) if "p90" in st else "",
                          _cost_fmt(key, st["max"]) if "max" in st else "",
                          _cost_fmt(key, st["total"])])
    sc = summary.get("scoring_cost") or {}
    if sc.get("lm_calls"):
        cost_rows.append(["scoring LM calls (reader/judge, not the program's)",
                          _fmt(sc["lm_calls"], 1), "", "", "", ""])
    doc.add(Table(["", "mean per question", "median", "90th percentile", "max", "total"],
                  cost_rows, "lrrrrr"))
    deg = summary.get("degraded") or {}
    doc.add(Para(f"Truncated LM replies per question: "
                 f"{_fmt(summary['cost'].get('truncated_calls', 0.0), 2)}; degraded steps: "
                 f"{deg.get('events', 0)} in {deg.get('examples_with_events', 0)} examples. "
                 "Wall time is per example as run (several threads share the LM); the critical "
                 "path is the union of the example's LM, retriever and encoder call intervals. "
                 "Computed prompt tokens: prompt tokens the LM computed, not served from its "
                 "prompt cache."))
    if "cost and latency" in plots:
        doc.add(Image("cost and latency", plots["cost and latency"]),
                Para("Each panel: one cost per question, its mean (red) and median (dashed) "
                     "as in the table above. Computed tokens = computed prompt tokens + "
                     "generated tokens.", css="note"))

    cons = summary.get("consistency")
    if cons:
        doc.add(Heading(2, "Consistency across pool members (EoR eq. 1-3)"),
                Para(f"{cons['n']} questions; a member is right when its answer exactly "
                     "matches a gold answer. MRWR: how often a member is right where the others "
                     "are wrong (higher is better); MRLR: how often the others are right where "
                     "it is wrong (lower is better)."),
                Table(["member", "accuracy", "MRWR", "MRLR"],
                      [[s, _fmt(cons["accuracy"][s]), _fmt(cons["mrwr"][s]),
                        _fmt(cons["mrlr"][s])] for s in cons["systems"]], "lrrr"))
        if "RWR heatmap" in plots:
            doc.add(Image("RWR heatmap", plots["RWR heatmap"]))

    if worst:
        _worst_section(doc, worst, worst_metric or "")
    if notes:
        doc.add(Heading(2, "Notes"), Bullets(list(notes)))
    errors = summary.get("errors") or []
    if errors:
        err_rows = [[str(e["id"]), str(e["error"])[:200]] for e in errors[:50]]
        if summary["n_errors"] > 50:
            err_rows.append(["…", f"{summary['n_errors'] - 50} more in summary.json / "
                                  "results.jsonl"])
        doc.add(Heading(2, f"Errors ({summary['n_errors']})"), Table(["id", "error"], err_rows))
    return doc


def _worst_section(doc: Any, worst: list[dict[str, Any]], metric: str) -> None:
    q = per_question_quantity(metric)
    how = (f"ranked by {q[0]} ({q[1]}), ties broken by the sum of its parts" if q
           else f"ranked by per-question {metric}")
    doc.add(Heading(2, f"The {len(worst)} worst questions by {metric}"),
            Para(f"The questions to read to find out why: {how}; a failed question scores 0 "
                 "and comes first. Each shows the program's answer and interpretations, the "
                 "gold answers and the passages it read (cited ones marked)."))
    for rank, w in enumerate(worst, 1):
        doc.add(Heading(3, f"{rank}. {w['question']}"))
        scores = ", ".join(f"{k} {_fmt(v)}" for k, v in w["scores"].items())
        doc.add(Para([Code(w["id"]), f" · {w['score_name']} {_fmt(w['score'])}",
                      f" · {scores}" if scores else ""]))
        if w.get("error"):
            doc.add(Para([Bold("Failed:"), " ", w["error"]]))
        else:
            doc.add(Para(Bold("Answer")), Quote(w["answer"] or "(empty answer)"))
        if w["interpretations"]:
            doc.add(Table(["interpretation", "its answer", "cites"],
                          [[it["question"], it["answer"], ", ".join(it["passages"])]
                           for it in w["interpretations"]]))
        gold = w.get("gold")
        if gold is None:
            doc.add(Para("Gold answers: not found in the run's data.", css="muted"))
        elif gold["qa_pairs"]:
            doc.add(Table(["gold interpretation", "gold short answers"],
                          [[p["question"], " / ".join(p["answers"])] for p in gold["qa_pairs"]]))
        else:
            doc.add(Para([Bold("Gold answers:"), " ", " / ".join(gold["answers"]) or "–"]))
        passages = w["passages"]
        if passages:
            blocks = [Para([Bold(f"[{p['id']}] {p['title']}"),
                            " (cited)" if p["cited"] else "", ": ", p["text"]])
                      for p in passages]
            doc.add(Details(f"{len(passages)} passages read", blocks))
        else:
            doc.add(Para("No passages read.", css="muted"))


def worst_questions(rows: list[dict[str, Any]], metric: str,
                    golds: dict[str, dict[str, Any]] | None, k: int = N_WORST
                    ) -> list[dict[str, Any]]:
    """The worst ``k`` questions on ``metric``, laid out for reading (see :func:`worst_rows`)."""
    out = []
    parts = SET_LEVEL.get(metric, ())
    for row, score in worst_rows(rows, metric, k):
        pred = row.get("prediction") or {}
        if not isinstance(pred, dict):
            pred = {}
        interps = interpretations_of(pred)
        cited = {i for it in interps for i in it["passages"]}
        passages = []
        for p in pred.get("passages") or []:
            if not isinstance(p, dict):
                continue
            text = str(p.get("text", "") or "")
            if len(text) > PASSAGE_CHARS:
                text = text[:PASSAGE_CHARS].rstrip() + " …"
            passages.append({"id": str(p.get("id", "")), "title": str(p.get("title", "") or ""),
                             "text": text, "cited": str(p.get("id", "")) in cited})
        got = row.get("metrics") or {}
        out.append({"id": str(row.get("id")), "question": str(row.get("question", "") or ""),
                    "score": score, "score_name": PER_QUESTION_NAME.get(metric, metric)
                    if parts else metric,
                    "scores": {p: float(got[p]) for p in parts if p in got},
                    "error": str(row["error"]) if row.get("error") else None,
                    "answer": str(pred.get("answer", "") or ""),
                    "interpretations": interps, "passages": passages,
                    "gold": (golds or {}).get(str(row.get("id"))) if golds else None})
    return out


def render_markdown(summary: dict[str, Any], plots: dict[str, str],
                    notes: list[str]) -> str:
    """``report.md`` without the worst-questions section (kept for callers of the old API)."""
    return build_report(summary, plots, notes).markdown()


def write_run_report(run_dir: str | Path, *, rows: list[dict[str, Any]] | None = None,
                     spec: RunSpec | None = None, examples: list[Any] | None = None,
                     plots: bool = True, out_dir: str | Path | None = None) -> dict[str, Any]:
    """(Re)write ``summary.json``, ``report.md``, ``report.html`` and ``plots/*.png`` of a run
    directory (or into ``out_dir``, for a run directory one may not write into).

    Only these files are written (atomically); ``results.jsonl`` and ``run.json`` are read,
    never touched. A plot that cannot be drawn is noted in the report instead of failing it.
    Returns the summary.
    """
    run_dir = Path(run_dir)
    target = Path(out_dir) if out_dir is not None else run_dir
    if rows is None or spec is None:
        run = load_run(run_dir)
        rows = run.rows if rows is None else rows
        spec = run.spec if spec is None else spec
        names = run.metric_names
    else:
        names = Run(run_dir, spec, rows).metric_names
    notes: list[str] = []
    consistency = None
    if has_member_answers(rows):
        golds, why = golds_for(rows, spec, examples)
        consistency = member_consistency(rows, golds)
        if consistency is None:
            notes.append("no per-member consistency: " + (why or "fewer than two members "
                                                                 "or no gold answers"))
    summary = run_summary(rows, spec, names, consistency)
    summary["cost_stats"] = cost_stats(rows)
    metric = main_metric(list(summary["metrics"]))
    summary["main_metric"] = metric
    worst: list[dict[str, Any]] = []
    if metric and rows:
        views, why = gold_views(spec, examples)
        if why:
            notes.append(f"worst questions shown without gold answers: {why}")
        worst = worst_questions(rows, metric, views if not why else None)
    rendered: dict[str, str] = {}
    if plots and rows:
        rendered = _draw(target, rows, summary, notes)
    incomplete = completeness_line(summary)
    if incomplete:  # on stderr too: `ambiqa report` on a killed run must not pass quietly
        log.warning("%s: %s", run_dir, incomplete)
    doc = build_report(summary, rendered, notes, worst, metric)
    try:
        atomic_write_json(target / "summary.json", json_safe(summary))
        atomic_write_text(target / "report.md", doc.markdown())
        atomic_write_text(target / "report.html", doc.html(target))
    except OSError as exc:
        raise write_error(target, exc) from exc
    return summary


def _draw(run_dir: Path, rows: list[dict[str, Any]], summary: dict[str, Any],
          notes: list[str]) -> dict[str, str]:
    from ambiqa.evaluation.reports import plots  # loads matplotlib

    out: dict[str, str] = {}
    label = (f"{program_label(summary['run'].get('program') or '')} on "
             f"{summary['run'].get('data', '')}")
    try:
        panels = headline_panels(rows, summary)
        if panels:
            plots.headline_distributions(panels, run_dir / "plots" / "metrics.png",
                                         title=f"{label}: set-level value and 95% interval "
                                               "on each metric's distribution")
            out["metric distributions"] = "plots/metrics.png"
        stats = summary["cost_stats"]
        cost_panels = [{"key": key, "label": lab, "values": cost_values(rows, key),
                        "mean_text": _cost_fmt(key, stats[key]["mean"]),
                        "median_text": _cost_fmt(key, stats[key]["median"]), **stats[key]}
                       for key, lab in (("lm_calls", "LM calls"),
                                        ("tokens", "computed tokens"),
                                        ("wall_s", "wall seconds")) if stats[key]["n"]]
        if cost_panels:
            plots.cost_distributions(cost_panels, run_dir / "plots" / "cost.png",
                                     title=f"{label}: cost and latency per question")
            out["cost and latency"] = "plots/cost.png"
        if summary.get("consistency"):
            plots.heatmap(summary["consistency"]["rwr"], run_dir / "plots" / "rwr.png",
                          title="RWR(i, j): share of j's misses that i gets right")
            out["RWR heatmap"] = "plots/rwr.png"
    except OSError as exc:
        raise write_error(run_dir / "plots", exc) from exc
    except Exception as exc:  # matplotlib missing or broken: the tables still render
        notes.append(f"plots skipped: {type(exc).__name__}: {exc}")
    return out


def json_safe(obj: Any) -> Any:
    """NaN is not JSON: write null (a metric no example could score)."""
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    return obj
