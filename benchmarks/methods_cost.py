"""Efficiency benchmark: what each ambiqa program costs per question (issue 3).

Every ambiguous-QA program (closed_book, vanilla_rag, query_refinement, diva, toc, verdict,
eor) runs on the same first N ASQA dev questions, and the multi-hop programs (resp, ircot) on
the same first N HotpotQA dev questions, with paper-default settings. Per question it records
LM calls, input/output tokens, retriever calls, wall time, the *observed LM rounds* (the
longest chain of LM calls each of which started after the previous one ended, from the
recorded call intervals) against the program's *minimal* number of dependent LM rounds (its
attribute ``min_lm_rounds``, derived from the algorithm and its settings), plus errors and degraded
steps.

Two LMs:

* ``--lm embedded`` (default; ``embedded:qwen2.5-coder-0.5b`` for the fast model) -- the real
  local model, uncached. It serves one request at a time, so rounds = calls by force.
* ``--lm fake --delay 0.5`` -- :mod:`ambiqa.testing_server`: an OpenAI-compatible endpoint that
  answers any DSPy signature after a fixed delay, concurrently. Token counts are estimates,
  answers are nonsense, but the *orchestration* is the real program's. Two checks that can
  fail: *rounds/min* > 1 means calls that could run together ran one after another (or the
  fake answers took a longer path, e.g. more ReSP iterations: see *iterations*), and
  *wall/(rounds x delay)* > 1 is time spent outside LM calls (retrieval, encoder,
  orchestration). A figure such as "wall / critical path" is 1.0 by construction for a fully
  sequential program (the critical path is the union of the call intervals), so it is not
  reported.

Rows go to a JSONL (one per program and question, appended and fsynced, so a killed run
resumes where it stopped: pairs already there are skipped). A Markdown table of per-question
means is printed and written next to it.

    python -m benchmarks.methods_cost --lm fake --delay 0.5 --n 20
    python -m benchmarks.methods_cost --lm embedded:qwen2.5-coder-0.5b --n 1 \\
        --programs closed_book,vanilla_rag
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

import ambiqa  # noqa: E402,F401  (sets LITELLM_LOCAL_MODEL_COST_MAP etc. before DSPy loads)
from ambiqa.errors import AmbiqaError, ConfigError  # noqa: E402
from ambiqa.fsutil import atomic_write_text  # noqa: E402
from ambiqa.tracing import union_length  # noqa: E402

AMBIGUOUS = ("closed_book", "vanilla_rag", "query_refinement", "diva", "toc", "verdict", "eor")
MULTIHOP = ("resp", "ircot")
ALL_PROGRAMS = AMBIGUOUS + MULTIHOP
DATASET_OF = {**{p: "asqa:dev" for p in AMBIGUOUS}, **{p: "hotpotqa:dev" for p in MULTIHOP}}
#: programs that load the shared sentence encoder (warmed up once, outside the timings)
USES_ENCODER = ("diva", "toc", "verdict", "eor")
#: two LM calls whose intervals overlap by less than this (s) still count as one after the
#: other (timestamps of back-to-back calls can touch)
CHAIN_SLACK_S = 0.005
BM25_INDEX = "wiki-bm25"


# ---- small utilities ----------------------------------------------------------------------------
def lm_slug(spec: str) -> str:
    """File-name-safe name of an LM spec: ``embedded:qwen2.5-coder-0.5b`` -> ``embedded-...``."""
    return "".join(c if c.isalnum() or c in "._" else "-" for c in spec).strip("-") or "lm"


def parse_program_configs(items: list[str]) -> dict[str, dict[str, Any]]:
    """``["diva={\"top_k\": 5}", ...]`` -> ``{"diva": {"top_k": 5}}`` (later ones merge in)."""
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip().lower().replace("-", "_")
        if not sep or name not in ALL_PROGRAMS:
            raise ConfigError(f"bad --program-config {item!r}",
                              hint=f"write NAME=JSON with NAME one of {', '.join(ALL_PROGRAMS)}")
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"--program-config {name}: not JSON: {exc}") from exc
        if not isinstance(value, dict):
            raise ConfigError(f"--program-config {name}: expected a JSON object, got {text!r}")
        out.setdefault(name, {}).update(value)
    return out


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of a results JSONL; a torn last line (a run killed mid-write) is skipped."""
    rows: list[dict[str, Any]] = []
    if not path.is_file():
        return rows
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except ValueError:
                print(f"warning: {path}:{n} is not JSON (torn write?); ignored", file=sys.stderr)
    return rows


def append_row(path: Path, row: dict[str, Any]) -> None:
    """Append one JSON line and fsync, so a crash loses at most the row being written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


# ---- LM and retriever ---------------------------------------------------------------------------
@contextlib.contextmanager
def open_lm(spec: str, delay: float, true_rate: float) -> Iterator[Any]:
    """The LM to benchmark; for ``fake`` the server lives exactly as long as the block."""
    import dspy

    if spec == "fake":
        from ambiqa.testing_server import serve

        url, shutdown = serve(delay, true_rate=true_rate)
        try:
            yield dspy.LM("openai/fake", api_base=url, api_key="not-needed", cache=False,
                          num_retries=0, temperature=0.0, max_tokens=512)
        finally:
            shutdown()
    else:
        from ambiqa.lm import make_lm

        yield make_lm(spec, cache=False)  # uncached: every call must really cost


def open_benchmark_retriever(kind: str, index_root: Path, corpus: Path) -> tuple[Any, str]:
    """``(retriever, description)``: ColBERT index "wiki", or BM25 over the corpus (built
    once into ``index_root/wiki-bm25``); ``auto`` takes ColBERT when it can be loaded."""
    if kind in ("auto", "colbert"):
        try:
            from ambiqa.retrieval.colbert import ColBERTRetriever

            retriever = ColBERTRetriever.load(index_root, "wiki")
            return retriever, f"colbert:wiki ({retriever.fingerprint})"
        except (AmbiqaError, OSError, ImportError) as exc:
            if kind == "colbert":
                raise
            print(f"note: ColBERT index 'wiki' not loadable ({str(exc).splitlines()[0]}); "
                  "using BM25", file=sys.stderr)
    from ambiqa.retrieval.bm25 import BM25Retriever

    index_dir = index_root / BM25_INDEX
    if (index_dir / "manifest.json").is_file():
        try:
            retriever = BM25Retriever.load(index_dir)
            return retriever, f"bm25:{BM25_INDEX} ({retriever.fingerprint})"
        except AmbiqaError as exc:
            print(f"note: rebuilding the BM25 index ({exc})", file=sys.stderr)
    from ambiqa.data import load_corpus

    print(f"building the BM25 index over {corpus} into {index_dir} ...", file=sys.stderr)
    retriever = BM25Retriever.build(load_corpus(corpus), index_dir)
    return retriever, f"bm25:{BM25_INDEX} ({retriever.fingerprint})"


def warm_up(lm: Any, programs: list[str], retriever: Any) -> float:
    """One-time costs (LiteLLM import, encoder and index loading) kept out of the timings."""
    import dspy

    t0 = time.perf_counter()

    class Ping(dspy.Signature):
        """Reply briefly."""

        text: str = dspy.InputField()
        reply: str = dspy.OutputField()

    with dspy.context(lm=lm):
        with contextlib.suppress(Exception):  # a failing LM shows up in the rows anyway
            dspy.Predict(Ping)(text="ping")
    if any(p in USES_ENCODER for p in programs):
        from ambiqa.retrieval.encoder import get_encoder

        get_encoder().encode(["warm up"])
        from ambiqa.retrieval.encoder import get_encoder

        get_encoder()
    if "verdict" in programs:
        import sklearn.cluster  # noqa: F401  (HDBSCAN's first import takes seconds)
    warm = getattr(retriever, "warm", None)
    if callable(warm):
        warm()
    with contextlib.suppress(Exception):
        retriever.search("warm up", 1)
    return time.perf_counter() - t0


# ---- one question -------------------------------------------------------------------------------
def lm_rounds(spans: list[tuple[float, float]], slack: float = CHAIN_SLACK_S) -> int:
    """Dependent LM rounds actually taken: the longest chain of calls in which each call
    starts after the previous one ended (an interval-graph longest path; O(n^2), n small).

    Calls that overlap in time ran concurrently and share a round; a program that runs its
    independent calls one at a time gets one round per call.
    """
    order = sorted(spans, key=lambda se: (se[1], se[0]))
    best: list[int] = []
    for i, (start, _end) in enumerate(order):
        prev = [best[j] for j in range(i) if order[j][1] <= start + slack]
        best.append(1 + max(prev, default=0))
    return max(best, default=0)


def _extras(pred: Any) -> dict[str, Any]:
    """Program-specific facts that explain a row's cost (path taken, iterations, tree size)."""
    out: dict[str, Any] = {}
    for key in ("iterations", "stop_reason", "path", "verdict", "grounded", "n_abstained",
                "pool_size", "winner", "discarded_expansions", "n_duplicates"):
        value = getattr(pred, key, None)
        if value is not None and not callable(value):
            out[key] = value
    tree = getattr(pred, "tree", None)
    if isinstance(tree, list):
        out["tree_nodes"] = max(0, len(tree) - 1)
        out["tree_valid"] = sum(1 for n in tree[1:] if n.get("valid"))
    pseudo = getattr(pred, "pseudo_interpretations", None)
    if isinstance(pseudo, list):
        out["n_pseudo"] = len(pseudo)
    interps = getattr(pred, "interpretations", None)
    if isinstance(interps, list):
        out["n_interpretations"] = len(interps)
    return out


def run_one(program: Any, name: str, example: Any, lm: Any, settings: dict[str, Any]
            ) -> dict[str, Any]:
    """Run one program on one question; a row whatever happens (errors are recorded)."""
    import dspy

    from ambiqa.tracing import track

    row: dict[str, Any] = {"program": name, "dataset": DATASET_OF[name],
                           "id": str(example.id),  # ids only: data stays out of the repo
                           **settings, "config": program.config(),
                           "started_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    error, pred = "", None
    with dspy.context(lm=lm), track() as outer:
        t0 = time.perf_counter()
        try:
            pred = program(question=example.question)
        except Exception as exc:  # record, keep benchmarking the other questions
            error = f"{type(exc).__name__}: {exc}"[:500]
            row["traceback"] = traceback.format_exc(limit=6)[-2000:]
        wall = time.perf_counter() - t0
    # the sentence encoder records its batches in the trace (kind 'compute')
    encoder_spans = [r for r in outer.records if r.kind == "compute"]
    encoder_s = sum(r.latency_s for r in encoder_spans)
    encoder_calls = len(encoder_spans)
    trace = dict(pred.trace) if pred is not None else outer.summary()
    lm_spans = [(r.start, r.end) for r in outer.records if r.kind == "lm" and r.end > 0]
    lm_path = union_length(lm_spans)
    row.update({
        "error": error,
        "lm_calls": trace["lm_calls"],
        "input_tokens": trace["input_tokens"],
        "output_tokens": trace["output_tokens"],
        "retriever_calls": trace["retriever_calls"],
        "truncated_calls": trace["truncated_calls"],
        "lm_errors": trace["lm_errors"],
        "lm_latency_s": trace["lm_latency_s"],
        "wall_s": trace["wall_s"] if pred is not None else round(wall, 3),
        "critical_path_s": trace["critical_path_s"],
        "lm_path_s": round(lm_path, 3),
        "outer_wall_s": round(wall, 3),
        "encoder_s": round(encoder_s, 3),
        "encoder_calls": encoder_calls,
        "calls_by_module": trace["calls_by_module"],
        "n_events": len(trace["events"]),
        "events": [e[:200] for e in trace["events"][:10]],
    })
    # the instance: a setting may change it (vanilla_rag's short form needs 1 round, not 2)
    row["min_lm_rounds"] = getattr(program, "min_lm_rounds", None)
    row["lm_rounds"] = lm_rounds(lm_spans)
    delay = settings.get("delay")
    if delay and row["lm_rounds"]:
        row["wall_over_rounds_delay"] = round(row["wall_s"] / (row["lm_rounds"] * delay), 3)
        row["off_lm_s"] = round(row["wall_s"] - row["lm_rounds"] * delay, 3)
    if pred is not None:
        row.update(_extras(pred))
    return row


# ---- the table ----------------------------------------------------------------------------------
def _mean(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def _fmt(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def summarize(rows: list[dict[str, Any]], programs: list[str]) -> list[dict[str, Any]]:
    out = []
    for name in programs:
        mine = [r for r in rows if r.get("program") == name]
        if not mine:
            continue
        ok = [r for r in mine if not r.get("error")]
        rounds = [r["lm_rounds"] for r in ok if r.get("lm_rounds") is not None]
        minimum = next((r.get("min_lm_rounds") for r in ok if r.get("min_lm_rounds")), None)
        ratio = [r["wall_over_rounds_delay"] for r in ok if r.get("wall_over_rounds_delay")]
        out.append({
            "program": name, "dataset": mine[0]["dataset"], "n": len(mine),
            "errors": len(mine) - len(ok),
            "lm_calls": _mean([r["lm_calls"] for r in ok]),
            "input_tokens": _mean([r["input_tokens"] for r in ok]),
            "output_tokens": _mean([r["output_tokens"] for r in ok]),
            "retriever_calls": _mean([r["retriever_calls"] for r in ok]),
            "wall_s": _mean([r["wall_s"] for r in ok]),
            "encoder_s": _mean([r.get("encoder_s") for r in ok]),
            "min_lm_rounds": minimum,
            "rounds_mean": _mean(rounds), "rounds_max": max(rounds) if rounds else None,
            "at_min": sum(1 for x in rounds if minimum is not None and x == minimum),
            "below_min": sum(1 for x in rounds if minimum is not None and x < minimum),
            "n_rounds": len(rounds),
            "ratio_mean": _mean(ratio), "ratio_max": max(ratio) if ratio else None,
            "off_lm_s": _mean([r.get("off_lm_s") for r in ok]),
            "iterations": _mean([r.get("iterations") for r in ok]) if name == "resp" or any(
                "iterations" in r for r in ok) else None,
            "degraded": sum(r.get("n_events", 0) for r in ok),
        })
    return out


def markdown(summary: list[dict[str, Any]], header: dict[str, Any]) -> str:
    fake = header.get("lm") == "fake"
    lines = [
        f"# Per-question cost of ambiqa programs ({header['lm']})",
        "",
        *([f"Produced by `{header['command']}` (rows: the JSONL beside this file).", ""]
          if header.get("command") else []),
        f"- LM: `{header['lm']}`" + (f", fixed delay {header['delay']} s per call, "
                                     f"{header['true_rate']:.0%} of bool fields True"
                                     if fake else ", uncached"),
        f"- retriever: {header['retriever']}",
        f"- AMBIQA_PARALLEL={header['parallel']} (workers for independent LM calls)",
        f"- questions: first {header['n']} of ASQA dev (ambiguous programs) and of HotpotQA dev "
        "(resp, ircot); program settings: paper defaults"
        + (f"; overrides {json.dumps(header['overrides'])}" if header["overrides"] else ""),
        f"- machine: {os.cpu_count()} CPUs; written {time.strftime('%Y-%m-%d %H:%M')}",
        "",
        "Means per question over questions without an error. *min rounds* is the program's "
        "minimal number of dependent LM rounds per question, stated from its algorithm "
        "(`min_lm_rounds` in ambiqa/programs/*.py). *rounds* is what the run took: the longest "
        "chain of LM calls each starting after the previous one ended (overlapping calls share "
        "a round); mean and max, *=min* counts questions at the minimum and *<min* questions "
        "below it (which would mean the stated minimum is wrong). "
        + ("*wall/(rounds×delay)* divides each question's wall time by its rounds times the "
           f"fixed {header['delay']} s per call (mean and max): 1.0 means the question waited "
           "for nothing but its chain of LM calls; *off-LM s* = wall − rounds × delay "
           "(retrieval, encoder, orchestration). " if fake else "")
        + "*encoder s*: time in the shared sentence encoder. A \"wall / critical path\" ratio is "
        "not reported: the critical path is the union of the recorded call intervals, so a "
        "fully sequential program scores 1.0 on it by construction.",
        "",
    ]
    cols = ["program", "data", "n", "err", "LM calls", "in tok", "out tok", "retr calls",
            "wall s", "min rounds", "rounds mean", "rounds max", "=min", "<min"]
    if fake:
        cols += ["wall/(rounds×delay) mean", "wall/(rounds×delay) max", "off-LM s"]
    cols += ["encoder s", "iterations", "degraded steps"]
    lines.append("| " + " | ".join(cols) + " |")
    lines.append("|" + "|".join("---" if i < 2 else "---:" for i in range(len(cols))) + "|")
    for s in summary:
        cells = [s["program"], s["dataset"].split(":")[0], str(s["n"]), str(s["errors"]),
                 _fmt(s["lm_calls"]), _fmt(s["input_tokens"], 0), _fmt(s["output_tokens"], 0),
                 _fmt(s["retriever_calls"]), _fmt(s["wall_s"], 2),
                 "–" if s["min_lm_rounds"] is None else str(s["min_lm_rounds"]),
                 _fmt(s["rounds_mean"], 2), _fmt(s["rounds_max"], 0),
                 f"{s['at_min']}/{s['n_rounds']}", f"{s['below_min']}/{s['n_rounds']}"]
        if fake:
            cells += [_fmt(s["ratio_mean"], 2), _fmt(s["ratio_max"], 2), _fmt(s["off_lm_s"], 2)]
        cells += [_fmt(s["encoder_s"], 2), _fmt(s["iterations"], 2), str(s["degraded"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# ---- main ---------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Per-question cost of every ambiqa program.")
    p.add_argument("--lm", default="embedded",
                   help="fake | embedded | embedded:qwen2.5-coder-0.5b | provider/model")
    p.add_argument("--delay", type=float, default=0.5, help="fake LM: seconds per call (0.5)")
    p.add_argument("--true-rate", type=float, default=0.5,
                   help="fake LM: share of bool outputs that are True (0.5)")
    p.add_argument("--n", type=int, default=20, help="questions per data set (20)")
    p.add_argument("--programs", default=",".join(ALL_PROGRAMS),
                   help="comma-separated subset (default: all)")
    p.add_argument("--program-config", action="append", default=[], metavar="NAME=JSON",
                   help='override settings, e.g. diva=\'{"top_k": 5}\' (repeatable)')
    p.add_argument("--retriever", choices=("auto", "colbert", "bm25"), default="auto",
                   help="auto: the ColBERT index 'wiki' if it loads, else BM25")
    p.add_argument("--index-root", default=None, help="index root ($AMBIQA_CACHE/indexes)")
    p.add_argument("--corpus", default=None, help="corpus JSONL for building the BM25 index")
    p.add_argument("--parallel", type=int, default=None,
                   help="AMBIQA_PARALLEL for the run (default: 8 with the fake LM, else the "
                        "environment's value or 4)")
    p.add_argument("--out", default=None,
                   help="rows JSONL (default benchmarks/results/methods_cost-<lm>.jsonl)")
    p.add_argument("--md", default=None, help="table (default: the JSONL path with .md)")
    p.add_argument("--retry-errors", action="store_true",
                   help="re-run (program, question) pairs whose stored row has an error")
    args = p.parse_args(argv)
    if args.n < 1:
        p.error("--n must be >= 1")
    if args.delay < 0:
        p.error("--delay must be >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    programs = [x.strip().lower().replace("-", "_") for x in args.programs.split(",")
                if x.strip()]
    unknown = [p for p in programs if p not in ALL_PROGRAMS]
    if unknown:
        print(f"error: unknown program(s) {', '.join(unknown)}; choose from "
              f"{', '.join(ALL_PROGRAMS)}", file=sys.stderr)
        return 2
    try:
        overrides = parse_program_configs(args.program_config)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    parallel = args.parallel or (8 if args.lm == "fake" else
                                 int(os.environ.get("AMBIQA_PARALLEL", "4")))
    os.environ["AMBIQA_PARALLEL"] = str(parallel)

    slug = lm_slug(args.lm)
    out = Path(args.out) if args.out else HERE / "results" / f"methods_cost-{slug}.jsonl"
    md_path = Path(args.md) if args.md else out.with_suffix(".md")

    from ambiqa.data import default_data_root, load_dataset
    from ambiqa.lm import configure
    from ambiqa.programs.registry import build_program
    from ambiqa.retrieval.factory import index_root

    root = Path(args.index_root) if args.index_root else index_root()
    corpus = Path(args.corpus) if args.corpus else (
        default_data_root() / "corpus" / "wiki_passages.jsonl")
    try:  # user-fixable problems: say what and how, before any LM call
        datasets = {spec: load_dataset(f"{spec}:{args.n}")
                    for spec in sorted({DATASET_OF[p] for p in programs})}
        retriever, retriever_desc = open_benchmark_retriever(args.retriever, root, corpus)
        built = {name: build_program(name, retriever=retriever, **overrides.get(name, {}))
                 for name in programs}
    except AmbiqaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    existing = read_rows(out)
    done = {(r["program"], r["id"]) for r in existing
            if not (args.retry_errors and r.get("error"))}
    settings = {"lm": args.lm, "retriever": retriever_desc.split(" ")[0], "parallel": parallel,
                "delay": args.delay if args.lm == "fake" else None}
    for r in existing:
        mismatch = {k: (r.get(k), v) for k, v in settings.items() if r.get(k) != v}
        if mismatch:
            print(f"warning: {out} holds rows run with other settings {mismatch}; "
                  "use another --out to keep results comparable", file=sys.stderr)
            break

    with open_lm(args.lm, args.delay, args.true_rate) as lm:
        configure(lm)  # installs ambiqa's cost-tracing callback
        warm = warm_up(lm, programs, retriever)
        print(f"warm-up {warm:.1f} s; LM {args.lm}; retriever {retriever_desc}; "
              f"AMBIQA_PARALLEL={parallel}; rows -> {out}", file=sys.stderr)
        for name, program in built.items():
            for example in datasets[DATASET_OF[name]]:
                if (name, str(example.id)) in done:
                    continue
                row = run_one(program, name, example, lm, settings)
                append_row(out, row)
                done.add((name, str(example.id)))
                status = f"ERROR {row['error'][:120]}" if row["error"] else (
                    f"{row['lm_calls']} LM calls, wall {row['wall_s']:.2f}s, "
                    f"{row['lm_rounds']} LM rounds (min {row['min_lm_rounds']})")
                print(f"{name:16s} {row['id']:>20s}  {status}", file=sys.stderr, flush=True)

    ids = {spec: {str(e.id) for e in exs} for spec, exs in datasets.items()}
    rows = [r for r in read_rows(out) if r.get("program") in ALL_PROGRAMS
            and r.get("id") in ids.get(r.get("dataset"), set())]
    # keep the newest row per pair (a --retry-errors run appends a second one)
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        latest[(r["program"], r["id"])] = r
    order = [p for p in ALL_PROGRAMS if p in programs or any(k[0] == p for k in latest)]
    header = {"lm": args.lm, "delay": args.delay, "true_rate": args.true_rate,
              "retriever": retriever_desc, "parallel": parallel, "n": args.n,
              "overrides": overrides,
              "command": " ".join(["python -m benchmarks.methods_cost",
                                   *(sys.argv[1:] if argv is None else argv)])}
    table = markdown(summarize(list(latest.values()), order), header)
    atomic_write_text(md_path, table)
    print(table)
    print(f"table -> {md_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
