"""Generate the two "which program?" tables from the stored runs, never by hand.

* BENCHMARKS.md's ASQA table (the block in ``benchmarks/results/sections/today.md``): every
  stored ASQA dev run of the default 1.5B over ``dense:wiki-dense``, zero-shot and compiled,
  with STR-EM, ROUGE-L, D-F1, DR, DR paired against zero-shot ``vanilla_rag``, the median
  length of the long answer (the references' is 61 words) and its cost per question;
* the README's "Pick a program" table: one line per program with its LM calls, tokens and
  seconds per question and its standing, each figure computed here from the same runs (and
  the short-answer runs for the programs made for NQ-, WebQ- and HotpotQA-like questions).

Cost per question, in both (means over every row, failed ones included): prompt tokens the
LM computed, prompt tokens its prompt cache served (the rest of the prompt), output tokens,
and wall seconds as each run measured them (runs of different days on a shared 2-core
machine: seconds compare loosely, tokens exactly).

Both live between ``<!-- program-table:... -->`` marker lines; the text around them is prose
and stays hand-written. D-F1 is read by ``extractive:minilm-asqa-v4``, the reader that ships
with ambiqa (a stand-in for the ASQA paper's RoBERTa-large SQuAD2 reader): every run's stored
long answers were re-read by it without an LM call -- the evidence runs by
``benchmarks/reader_rescore.py`` (``benchmarks/results/evidence-rescored-v4``), the runs made
without a reader and the compile-v3 runs by ``benchmarks/add_d_f1.py``
(``benchmarks/results/dr-v4``). DR is the set-level ``sqrt(mean D-F1 x mean ROUGE-L)``;
a failed question scores 0; intervals are 95% BCa bootstrap, paired on the questions both runs hold.

    python -m benchmarks.program_table           # rewrite both blocks
    python -m benchmarks.program_table --check   # exit 1 if either block is out of date

Run ``python -m benchmarks.render`` afterwards to carry today.md into BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import functools
import math
import re
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ambiqa.evaluation.reports.report import Run, cost_stats, load_run
from ambiqa.evaluation.stats import paired_comparison, summarize_metric
from benchmarks.render import write_or_check

ROOT = Path(__file__).resolve().parents[1]
TODAY = ROOT / "benchmarks/results/sections/today.md"
README = ROOT / "README.md"

ASQA = "benchmarks/results/evidence-rescored-v4/asqa"
COMPILED = "benchmarks/results/evidence-rescored-v4/asqa-compiled"
#: copies of later runs with D-F1 read by the shipped reader (benchmarks/add_d_f1.py)
DR_V4 = "benchmarks/results/dr-v4"
NEW = f"{DR_V4}/compile-v3/runs"
V5 = f"{DR_V4}/compile-v5/runs"
STEP = f"{DR_V4}/step-replay/runs"
#: zero-shot Diva from today's code (compile-v4's arm's questions, replayed with the loop guard
#: of issue 45: benchmarks/results/loop-guard), the pair of every compile-v5 dev arm
DIVA_GUARDED = f"{DR_V4}/loop-guard/runs/on"
#: runs made with the shipped reader in place (D-F1 read as they ran): ToC's compile-v5 dev
#: arms, zero-shot ToC from today's code and the shipped compiled ToC on the same questions
V5_RUNS = "benchmarks/results/compile-v5/runs"
TOC_ZERO = f"{V5_RUNS}/toc-zeroshot"
DR_RUNS = "benchmarks/results/compile-dr/runs"
SHORT = "benchmarks/results/evidence"


@dataclass(frozen=True)
class AsqaRow:
    program: str
    optimizer: str  # "" for zero-shot
    run: str  # run directory, relative to the repository root


#: BENCHMARKS' table, in this order; a run directory not on disk is left out (a compile row
#: appears once its dev run exists).
ASQA_ROWS: list[AsqaRow] = [
    AsqaRow("closed_book", "", f"{ASQA}/closed_book"),
    AsqaRow("vanilla_rag", "", f"{ASQA}/vanilla_rag"),
    AsqaRow("vanilla_rag", "mipro", f"{COMPILED}/vanilla_rag-mipro"),
    AsqaRow("vanilla_rag", "knn", f"{COMPILED}/vanilla_rag-knn"),
    AsqaRow("vanilla_rag", "bootstrap", f"{COMPILED}/vanilla_rag-bootstrap"),
    AsqaRow("vanilla_rag", "labeled", f"{COMPILED}/vanilla_rag-labeled"),
    AsqaRow("diva", "", f"{ASQA}/diva"),
    AsqaRow("diva", "bootstrap by DR + signal demos", f"{NEW}/diva-bootstrap-dr-signal"),
    AsqaRow("diva", "labeled + signal demos", f"{NEW}/diva-labeled-signal"),
    AsqaRow("diva", "knn", f"{COMPILED}/diva-knn"),
    AsqaRow("diva", "bootstrap", f"{COMPILED}/diva-bootstrap"),
    AsqaRow("diva", "labeled", f"{COMPILED}/diva-labeled"),
    AsqaRow("toc", "", f"{ASQA}/toc"),
    AsqaRow("toc", "knn, gold demos", f"{COMPILED}/toc-knn-gold"),
    AsqaRow("verdict", "", f"{ASQA}/verdict"),
]
BASELINE = f"{ASQA}/vanilla_rag"


# ------------------------------------------------------------------ reading the runs

@functools.cache
def run(path: str) -> Run:
    return load_run(ROOT / path)


def exists(path: str) -> bool:
    return (ROOT / path / "results.jsonl").is_file()


def value(path: str, metric: str) -> dict:
    return summarize_metric(run(path).rows, metric)


@functools.cache
def paired(path: str, base: str, metric: str) -> dict:
    return paired_comparison(run(base).rows, run(path).rows, metric)


@functools.cache
def costs(path: str) -> dict[str, dict[str, float]]:
    return cost_stats(run(path).rows)


def lm_calls(path: str) -> float:
    return costs(path)["lm_calls"]["mean"]


def per_question(path: str) -> dict[str, float]:
    """Means per question from the run's rows (failed questions included: they cost too):
    prompt tokens the LM computed, prompt tokens its prompt cache served, output tokens, and
    wall seconds as the run measured them."""
    c = costs(path)
    computed = c["computed_tokens"]["mean"]
    return {"computed": computed, "cached": max(c["input_tokens"]["mean"] - computed, 0.0),
            "output": c["output_tokens"]["mean"], "seconds": c["wall_s"]["mean"]}


#: the cost columns of both tables, after the quality columns
COST_HEAD = ("computed prompt tok/q", "cached prompt tok/q", "output tok/q", "s/q")


def from_response_cache(path: str) -> bool:
    """Whether most of the run's questions were answered from DSPy's response cache (LM
    calls without a token: rows written before ``cached_calls`` was recorded): their tokens
    and seconds are not what the program costs. Rows that count ``cached_calls`` say it
    themselves: a row with half its calls or more from the cache is one of them."""
    rows = [r for r in run(path).rows if r.get("cost")]

    def replayed(cost: dict) -> bool:
        calls = cost.get("lm_calls") or 0
        if "cached_calls" in cost:
            return bool(calls) and cost["cached_calls"] * 2 >= calls
        return bool(calls) and not cost.get("input_tokens")

    served = sum(1 for r in rows if replayed(r["cost"]))
    return bool(rows) and served > len(rows) / 2


def cost_cells(path: str) -> list[str]:
    if not exists(path) or from_response_cache(path):
        return ["–"] * len(COST_HEAD)
    q = per_question(path)
    return [f"{q['computed']:,.0f}", f"{q['cached']:,.0f}", f"{q['output']:,.0f}",
            f"{q['seconds']:.0f}"]


def median_words(path: str) -> float:
    words = [len(str((r.get("prediction") or {}).get("answer") or "").split())
             for r in run(path).rows if not r.get("error")]
    return statistics.median(words) if words else math.nan


# ------------------------------------------------------------------ formatting

def num(x: float, digits: int = 3) -> str:
    return "–" if math.isnan(x) else f"{x:.{digits}f}".replace("-", "−")


def signed(x: float) -> str:
    return "–" if math.isnan(x) else f"{x:+.3f}".replace("-", "−")


def interval(lo: float, hi: float) -> str:
    return f"[{num(lo)}, {num(hi)}]"


def with_ci(s: dict) -> str:
    return f"{num(s['mean'])} {interval(*s['ci95'])}"


def delta(path: str, base: str, metric: str) -> str:
    """``+0.110 [0.038, 0.172]``: run − base on the questions both hold."""
    p = paired(path, base, metric)
    return f"{signed(p['diff'])} {interval(*p['ci95'])}"


def standing(path: str, base: str, metric: str) -> str:
    """above / below / level: whether the paired interval excludes 0, and on which side."""
    p = paired(path, base, metric)
    if not p["excludes_zero"]:
        return "level"
    return "above" if p["diff"] > 0 else "below"


def asqa_table() -> str:
    head = ("| program (optimizer) | n | STR-EM | ROUGE-L | D-F1 | DR | Δ DR vs vanilla_rag "
            "| median words | " + " | ".join(COST_HEAD) + " |\n|---|---:|---|---|---|---|---|---:|"
            + "---:|" * len(COST_HEAD))
    lines = [head]
    for row in ASQA_ROWS:
        if not exists(row.run):
            continue
        name = f"`{row.program}`" + (f" ({row.optimizer})" if row.optimizer else "")
        dr = value(row.run, "dr")
        diff = "–" if row.run == BASELINE else delta(row.run, BASELINE, "dr")
        lines.append(
            f"| {name} | {dr['n']} | {num(value(row.run, 'str-em')['mean'])} "
            f"| {num(value(row.run, 'rouge-l')['mean'])} | {num(value(row.run, 'd-f1')['mean'])} "
            f"| {with_ci(dr)} | {diff} | {median_words(row.run):.0f} | "
            + " | ".join(cost_cells(row.run)) + " |")
    return "\n".join(lines)


# ------------------------------------------------------------------ the README's table

@dataclass(frozen=True)
class ReadmeRow:
    program: str  # the first cell, as shown
    use_when: str
    run: str  # the run its LM calls come from
    standing: Callable[[], str]
    #: the run its tokens and seconds come from, when ``run``'s answers came from the response
    #: cache (default: ``run``)
    cost_run: str | None = None


def _asqa(name: str) -> str:
    return f"{ASQA}/{name}"


def _short(name: str) -> str:
    return f"{SHORT}/{name}"


def _best_compiled_vanilla() -> str:
    """The compiled vanilla_rag with the highest DR (the bar a compiled ambiguity program
    has to clear)."""
    runs = [r.run for r in ASQA_ROWS if r.program == "vanilla_rag" and r.optimizer
            and exists(r.run)]
    return max(runs, key=lambda p: value(p, "dr")["mean"])


def _opt_of(path: str) -> str:
    return next(r.optimizer for r in ASQA_ROWS if r.run == path)


def _vanilla() -> str:
    best = _best_compiled_vanilla()
    return (f"DR {num(value(BASELINE, 'dr')['mean'])}; "
            f"{delta(BASELINE, _asqa('closed_book'), 'dr')} over closed book; best compile "
            f"({_opt_of(best)}) {delta(best, BASELINE, 'dr')}: {standing(best, BASELINE, 'dr')}")


def _diva() -> str:
    ratio = lm_calls(_asqa("diva")) / lm_calls(BASELINE)
    return (f"DR {num(value(_asqa('diva'), 'dr')['mean'])}, "
            f"{delta(_asqa('diva'), BASELINE, 'dr')} over vanilla_rag: "
            f"{standing(_asqa('diva'), BASELINE, 'dr')}, at {ratio:.1f}× the calls")


def _diva_compiled() -> str:
    new = f"{NEW}/diva-bootstrap-dr-signal"
    if not exists(new):
        return "dev run not stored yet"
    best = _best_compiled_vanilla()
    return (f"DR {num(value(new, 'dr')['mean'])} (n = {value(new, 'dr')['n']}); vs vanilla_rag "
            f"({_opt_of(best)}) {delta(new, best, 'dr')}: {standing(new, best, 'dr')}; "
            f"STR-EM vs zero-shot diva {delta(new, _asqa('diva'), 'str-em')}; median answer "
            f"{median_words(new):.0f} words")


def _chosen(new: str, base: str = DIVA_GUARDED, label: str = "zero-shot diva (today's code, "
            "both with the loop guard") -> Callable[[], str]:
    """A compile-v5 dev arm against its zero-shot program run with today's code (Diva's: the
    compile-v4 arm replayed with the loop guard; ToC's: compile-v5/runs/toc-zeroshot)."""
    def text() -> str:
        if not exists(new):
            return "dev run not stored yet"
        n = paired(new, base, "str-em")["n_shared"]
        return (f"vs {label}, n = {n}): STR-EM {delta(new, base, 'str-em')}: "
                f"{standing(new, base, 'str-em')}; ROUGE-L {delta(new, base, 'rouge-l')}: "
                f"{standing(new, base, 'rouge-l')}; DR {delta(new, base, 'dr')}: "
                f"{standing(new, base, 'dr')}; {_readings(new, base)}; median answer "
                f"{median_words(new):.0f} words")
    return text


def _readings(new: str, base: str = DIVA_GUARDED) -> str:
    """Readings per question and the share of gold qa pairs a reading answers, against the
    zero-shot run ``base`` (``benchmarks.readings``)."""
    from benchmarks.readings import measure

    zero, run = measure([ROOT / base, ROOT / new], _asqa_dev())
    d, low, high = run["covered_delta"]
    word = "above" if low > 0 else "below" if high < 0 else "level"
    return (f"readings per question {run['readings_mean']:.2f} vs {zero['readings_mean']:.2f}, "
            f"gold qa pairs a reading answers {num(run['gold_covered'])} vs "
            f"{num(zero['gold_covered'])}, {signed(d)} {interval(low, high)}: {word}")


@functools.cache
def _asqa_dev() -> dict[str, Any]:
    from ambiqa.data import load_dataset

    return {str(ex.id): ex for ex in load_dataset("asqa:dev")}


def _toc() -> str:
    dr = value(_asqa("toc"), "dr")
    return (f"DR {num(dr['mean'])} (n = {dr['n']}), "
            f"{standing(_asqa('toc'), BASELINE, 'dr')} with vanilla_rag")


def _verdict() -> str:
    return (f"{standing(_asqa('verdict'), BASELINE, 'dr')} vanilla_rag "
            f"(DR {delta(_asqa('verdict'), BASELINE, 'dr')}) with the 1.5B")


def _query_refinement() -> str:
    word = standing(_asqa("query_refinement"), _asqa("closed_book"), "dr")
    return ("no better than closed book" if word != "above" else "above closed book") + \
        f" (DR {delta(_asqa('query_refinement'), _asqa('closed_book'), 'dr')})"


def _short_vanilla() -> str:
    nq = delta(_short("nq/vanilla_rag"), _short("nq/closed_book"), "f1")
    hotpot = delta(_short("hotpotqa/vanilla_rag"), _short("hotpotqa/closed_book"), "f1")
    return (f"F1 {nq} over closed book on NQ, {hotpot} on HotpotQA; add `recall_fallback` if "
            "the corpus may lack answers")


def _resp() -> str:
    resp = _short("hotpotqa/resp")
    return (f"HotpotQA F1 {delta(resp, _short('hotpotqa/closed_book'), 'f1')} over closed book; "
            f"{delta(resp, _short('hotpotqa/vanilla_rag'), 'f1')} over short vanilla_rag: "
            f"{standing(resp, _short('hotpotqa/vanilla_rag'), 'f1')}")


def _ircot() -> str:
    return (f"HotpotQA F1 {delta(_short('hotpotqa/ircot'), _short('hotpotqa/closed_book'), 'f1')}"
            " over closed book")


def _eor() -> str:
    eor = _short("webq/eor")
    return (f"weights tuned on WebQ train: EM {delta(eor, _short('webq/vanilla_rag'), 'em')} "
            f"over short vanilla_rag on WebQ: {standing(eor, _short('webq/vanilla_rag'), 'em')}")


README_ROWS: list[ReadmeRow] = [
    ReadmeRow("`vanilla_rag`", "the default: ambiguous questions, long answers",
              BASELINE, _vanilla),
    ReadmeRow('`vanilla_rag` `{"answer_form": "short"}`',
              "short answers (NQ-, HotpotQA-like)", _short("nq/vanilla_rag"), _short_vanilla),
    ReadmeRow("`closed_book`", "no corpus; the floor to beat", _asqa("closed_book"),
              lambda: f"DR {num(value(_asqa('closed_book'), 'dr')['mean'])}"),
    ReadmeRow("`diva` (`ambiqa.Diva`)", "many readings per question, a stronger LM",
              _asqa("diva"), _diva),
    ReadmeRow("`diva`, compiled: `--optimizer bootstrap --metric dr --predictor-signal`",
              "not with the 1.5B (below)", f"{NEW}/diva-bootstrap-dr-signal",
              _diva_compiled),
    ReadmeRow("`diva`, compiled: `--optimizer none --select-val 12 --candidates "
              "'clarify=signal:1;clarify=signal:2'` (compile-v5; shipped clarify=signal:2)",
              "Diva with the 1.5B, compiled by choosing on held-out training questions "
              "(tokens not measured: its upstream calls replayed zero-shot's)",
              f"{V5}/diva-clarify-signal-guarded",
              _chosen(f"{V5}/diva-clarify-signal-guarded")),
    ReadmeRow("`diva`, compiled: `--optimizer none --select-val 12 --candidates "
              "'clarify=gold:1;clarify=gold:2'` (compile-v5; shipped clarify=gold:1)",
              "the same, clarify shown one gold ASQA example (specified readings)",
              f"{V5}/diva-clarify-gold-guarded",
              _chosen(f"{V5}/diva-clarify-gold-guarded")),
    # a writer replay: its upstream is stored rows (clarify=gold:1's dev arm), so its own calls
    # and tokens are the writer's alone; the calls and cost cells shown are zero-shot Diva's
    # (the same calls; its tokens "–": replayed from the response cache)
    ReadmeRow("`diva`, compiled: `--optimizer none --select-val 12 --metric dr --candidates "
              "'writer=gold:1;clarify=gold:1,writer=gold:1'` (compile-dr; shipped clarify=gold:1,"
              "writer=gold:1)",
              "Diva compiled by DR on held-out training questions: answers of the references' "
              "length, 47 fewer writer output tokens a question than clarify=gold:1 alone "
              "(writer replay: upstream held at that arm's)", DIVA_GUARDED,
              _chosen(f"{DR_RUNS}/clarify-gold1-writer-gold1")),
    ReadmeRow('`diva` `{"verify_evidence": "brief"}`',
              "a verifier that cites the passage instead of copying it: 39 fewer output tokens "
              "a question, the right path more often; an option while a third of its replies "
              "hit its cap and are retried (step-replay)", f"{STEP}/brief",
              _chosen(f"{STEP}/brief")),
    ReadmeRow("`toc` (`ambiqa.TreeOfClarifications`)",
              "a clarification tree; zero-shot, the 1.5B mostly restates the question (one "
              "reading); compiled with gold clarify demos it names more (next row)",
              _asqa("toc"), _toc),
    ReadmeRow("`toc`, compiled: `--optimizer knn --knn-gold-only --select-val 12 --metric "
              "str-rouge` (compile-v5; shipped knn+writer=none)",
              "more readings per question, at 1.8x zero-shot's computed prompt tokens; by DR on "
              "its validation questions a compile would have shipped zero-shot "
              "(compile-v5/by-dr)", f"{V5_RUNS}/toc-knn-writer-none",
              _chosen(f"{V5_RUNS}/toc-knn-writer-none", TOC_ZERO,
                      "zero-shot toc (today's code")),
    ReadmeRow("`toc`, compiled: `--optimizer none --select-val 12 --metric dr --candidates "
              "'writer=gold:1;clarify=gold:1,writer=gold:1'` (compile-dr; shipped clarify=gold:1,"
              "writer=gold:1)",
              "ToC compiled as Diva was: one gold clarify and one gold writer demo, answers "
              "near the references' length (a full dev run)", f"{DR_RUNS}/toc-dr",
              _chosen(f"{DR_RUNS}/toc-dr", TOC_ZERO, "zero-shot toc (today's code")),
    ReadmeRow("`verdict` (`ambiqa.VerDICt`)", "per-passage grounding, with an LM that can "
              "abstain", _asqa("verdict"), _verdict),
    ReadmeRow("`query_refinement`", "a closed-book baseline naming readings",
              _asqa("query_refinement"), _query_refinement),
    ReadmeRow("`resp` (`ambiqa.ReSP`)", "multi-hop questions", _short("hotpotqa/resp"), _resp),
    ReadmeRow("`ircot` (`ambiqa.IRCoT`)", "multi-hop, interleaved retrieval",
              _short("hotpotqa/ircot"), _ircot),
    # the tuned run re-read the members' answers from the response cache (tuning changes the
    # vote's weights, not the calls): its tokens and seconds are the untuned run's
    ReadmeRow("`eor` (`ambiqa.EoR`)", "unsure whether the corpus covers the questions",
              _short("webq/eor"), _eor, cost_run=_short("webq/eor-untuned")),
]


def readme_table() -> str:
    lines = ["| program | use it when | LM calls | " + " | ".join(COST_HEAD)
             + " | standing with the 1.5B (paired, 95% CI) |",
             "|---|---|---:|" + "---:|" * len(COST_HEAD) + "---|"]
    for row in README_ROWS:
        calls = num(lm_calls(row.run), 1) if exists(row.run) else "–"
        lines.append(f"| {row.program} | {row.use_when} | {calls} | "
                     + " | ".join(cost_cells(row.cost_run or row.run))
                     + f" | {row.standing()} |")
    return "\n".join(lines)


# ------------------------------------------------------------------ the marked blocks

BEGIN = "<!-- program-table:begin (generated by `python -m benchmarks.program_table`) -->"
END = "<!-- program-table:end -->"
_BLOCK = re.compile(re.escape(BEGIN) + r"\n.*?\n" + re.escape(END), re.S)


def replace_block(text: str, table: str, where: Path) -> str:
    if len(_BLOCK.findall(text)) != 1:
        raise SystemExit(f"program_table: {where} needs exactly one block between\n  {BEGIN}\n"
                         f"  {END}")
    return _BLOCK.sub(lambda _: f"{BEGIN}\n{table}\n{END}", text)


def documents() -> list[tuple[Path, str]]:
    return [(path, replace_block(path.read_text(encoding="utf-8"), make(), path))
            for path, make in ((TODAY, asqa_table), (README, readme_table))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="do not write; exit 1 if a block differs from the stored runs")
    args = ap.parse_args(argv)
    return write_or_check(documents(), args.check, "python -m benchmarks.program_table")


if __name__ == "__main__":
    sys.exit(main())
