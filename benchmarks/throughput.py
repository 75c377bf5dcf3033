"""Questions per hour from the embedded LM, old settings against new, on the same questions.

    # the measurement (resumable: run it again, or with a larger --n, to extend it)
    python -m benchmarks.throughput --programs vanilla_rag,diva,verdict,toc --n 20
    # the table from what exists, no LM calls (--since also tables the blocks measured then)
    python -m benchmarks.throughput --report-only [--since 2026-11-24]
    # how many llama.cpp slots: the same concurrent calls at 1, 2 and 4 slots (new settings)
    python -m benchmarks.throughput --slot-search 1,2,4 --n 1
    # today's defaults against today's code with some program settings changed (issue 45)
    python -m benchmarks.throughput --programs diva --n 20 \
        --out benchmarks/results/throughput-lean \
        --variant '{"diva": {"verify_evidence": "brief", "trim_sentences": 2}}'

Two configurations of the same program on the same ASQA dev questions, in one process:

* **old** -- the settings before issue 13: one llama.cpp slot behind a lock, a 256 MiB prompt
  cache, ``max_tokens`` 512 for every call, no stop sequence, whole passages, and the
  signatures (prompts and field order) as they were at ``--baseline`` (read from git, so
  later prompt edits by anyone are still compared with the same old prompts; a signature
  added since, or whose fields changed since, runs as today on both sides);
* **new** -- the working tree: ``--slots`` slots with continuous batching and
  ``n_ctx = 4096 × slots``, the prompt cache sized from the model's KV bytes per token,
  per-signature output caps with the ChatAdapter end marker as stop sequence, the
  per-passage word budget, and the current signatures.

With ``--variant JSON`` (``{program: {setting: value}}``, the fields of
``ambiqa/programs/config.py``) both sides are today's engine, prompts and passage budget:
**old** is each program with its default settings, **new** the same program with the
variant's settings, so a token-saving option is timed against the defaults it would replace
(issue 45: LM seconds per question against today's), both answering each block
concurrently.

Questions are split into blocks of ``--block`` questions (default: the slot count). Each block
is answered by both configurations, one after the other, alternating which goes first;
"old" answers a block's questions one at a time (as the old engine served them), "new" answers
them concurrently (the evaluation runner's concurrent questions). Blocks of the programs are
interleaved (vanilla_rag block 0, diva block 0, vanilla_rag block 1, ...), so whatever else
loads the machine falls on both sides. Questions/hour is questions over summed block wall
time; its ratio gets a bootstrap interval over blocks, STR-EM and ROUGE-Lsum paired bootstrap
intervals over questions. DSPy's response cache is off, so every call reaches the LM.

Rows go to ``benchmarks/results/throughput/rows.jsonl`` (one per question and
configuration, with the per-call token accounting) and the table to ``.../table.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

import ambiqa  # noqa: E402,F401  (sets LITELLM_LOCAL_MODEL_COST_MAP etc. before DSPy loads)
from ambiqa.errors import ConfigError  # noqa: E402
from ambiqa.fsutil import atomic_write_text  # noqa: E402

DEFAULT_OUT = HERE / "results" / "throughput"
#: main's commit when issue 13 started: the "old" prompts
DEFAULT_BASELINE = "4ae71a0"


# ---- old prompts from git --------------------------------------------------------------------
def legacy_signatures(commit: str) -> dict[str, type]:
    """Every ``dspy.Signature`` class in ``ambiqa/signatures/*.py`` as it was at ``commit``."""
    import dspy

    listing = subprocess.run(["git", "ls-tree", "--name-only", commit, "ambiqa/signatures/"],
                             cwd=ROOT, check=True, capture_output=True, text=True).stdout.split()
    found: dict[str, type] = {}
    for path in listing:
        if not path.endswith(".py") or path.endswith("__init__.py"):
            continue
        src = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout
        name = f"ambiqa_legacy_{Path(path).stem}"
        mod = types.ModuleType(name)
        mod.__file__ = f"{commit}:{path}"
        sys.modules[name] = mod
        exec(compile(src, mod.__file__, "exec"), mod.__dict__)  # our own repository's history
        for attr, value in vars(mod).items():
            if (isinstance(value, type) and issubclass(value, dspy.Signature)
                    and value is not dspy.Signature and value.__module__ == name):
                found[attr] = value
    return found


#: Signatures :func:`use_signatures` left as today's on the old side (announced once each).
_KEPT_AS_TODAY: set[str] = set()


def same_fields(a: type, b: type) -> bool:
    """Do two signatures take and give the same field names (in any order)?"""
    return (set(a.input_fields) == set(b.input_fields)
            and set(a.output_fields) == set(b.output_fields))


def use_signatures(program: Any, table: dict[str, type]) -> int:
    """Swap each predictor's signature for the same-named one in ``table``; returns swaps.

    A signature whose fields changed since (ToC's ``SelfVerify`` lost its ``interpretation``
    input when it became the paper's check) keeps today's version on the old side too: the
    program passes today's fields, so the old prompt would run with an input left empty -- a
    different step, not the same step under older settings.
    """
    swapped = 0
    for _, predictor in program.named_predictors():
        name = getattr(predictor.signature, "__name__", "")
        if name not in table:
            continue
        if same_fields(table[name], predictor.signature):
            predictor.signature = table[name]
            swapped += 1
        elif name not in _KEPT_AS_TODAY:  # said once per run, so the log shows the exception
            _KEPT_AS_TODAY.add(name)
            print(f"{name}: fields changed since the baseline; the old side runs today's "
                  "signature", flush=True)
    return swapped


# ---- running ---------------------------------------------------------------------------------
class Side:
    """One configuration: an LM, a passage budget and a signature table."""

    def __init__(self, name: str, settings: Any, legacy: dict[str, type] | None,
                 budget_off: bool, overrides: dict[str, dict[str, Any]] | None = None,
                 lm: Any = None) -> None:
        self.name = name
        self.settings = settings
        if lm is None:
            from ambiqa.lm import embedded_lm

            lm = embedded_lm(settings, cache=False)
        self.lm = lm
        self.legacy = legacy
        self.budget_off = budget_off
        #: per program, settings passed to its constructor (``--variant``)
        self.overrides = dict(overrides or {})
        self._programs: dict[str, Any] = {}

    def program(self, name: str, retriever: Any, encoder: Any) -> Any:
        if name not in self._programs:
            from ambiqa.programs.registry import build_program

            config = {"encoder": encoder} if name in ("diva", "verdict", "toc") else {}
            settings = self.overrides.get(name, {})
            try:
                prog = build_program(name, retriever, **config, **settings)
            except ConfigError:
                if not config:
                    raise
                prog = build_program(name, retriever, **settings)  # a program without encoder
            if self.legacy is not None:
                use_signatures(prog, self.legacy)
            self._programs[name] = prog
        return self._programs[name]

    @contextlib.contextmanager
    def active(self):
        import dspy

        from ambiqa.signatures.common import passage_budget

        with dspy.context(lm=self.lm):
            if self.budget_off:
                with passage_budget(None):
                    yield
            else:
                yield

    def warm(self) -> None:
        """Load the model before timing anything (its load is not per-question cost)."""
        engine = self.lm.engine
        inner = getattr(engine, "inner", engine)
        inner._ensure_server()


def score(pred: Any, example: Any) -> dict[str, float]:
    from ambiqa.evaluation.metrics import rouge_lsum, str_em

    answer = str(getattr(pred, "answer", "") or "")
    return {"str_em": str_em(answer, example.qa_pairs),
            "rouge_lsum": rouge_lsum(answer, example.long_answers)}


def run_block(side: Side, program: Any, examples: list[Any], concurrent: bool
              ) -> tuple[float, list[dict[str, Any]]]:
    from ambiqa.parallel import run_parallel

    def one(ex: Any) -> dict[str, Any]:
        t = time.perf_counter()
        try:
            pred = program(question=ex.question)
        except Exception as exc:  # recorded, not fatal: a failure is a result too
            return {"qid": ex.id, "error": f"{type(exc).__name__}: {str(exc)[:200]}",
                    "latency_s": time.perf_counter() - t, "str_em": 0.0, "rouge_lsum": 0.0,
                    "answer": "", "trace": {}}
        return {"qid": ex.id, "latency_s": round(time.perf_counter() - t, 3),
                "answer": str(pred.answer or ""), "trace": pred.trace, **score(pred, ex)}

    with side.active():
        t0 = time.perf_counter()
        if concurrent and len(examples) > 1:
            rows = run_parallel(one, examples, max_workers=len(examples))
        else:
            rows = [one(ex) for ex in examples]
        wall = time.perf_counter() - t0
    return wall, rows


def load_rows(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut by a kill: redo that block
                continue
    return rows


def append_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        fh.flush()


# ---- statistics ------------------------------------------------------------------------------
def bootstrap(values: list[Any], stat, n: int = 2000, seed: int = 0) -> tuple[float, float]:
    if not values:
        return float("nan"), float("nan")
    rng = random.Random(seed)
    draws = sorted(stat([values[rng.randrange(len(values))] for _ in values]) for _ in range(n))
    return draws[int(0.025 * n)], draws[int(0.975 * n) - 1]


def _tok(rows: list[dict[str, Any]], key: str) -> float:
    vals = [r.get("trace", {}).get(key, 0) or 0 for r in rows]
    return statistics.mean(vals) if vals else 0.0


def blocks_since(rows: list[dict[str, Any]], since: str) -> list[dict[str, Any]]:
    """The rows of the blocks whose every side is stamped at or after ``since`` (an ISO time,
    compared as text with the ``at`` stamp a block row gets when that side finishes).

    Why: a block's ratio pairs its two sides under the same load, but blocks measured while
    other jobs shared the cores are slower on both sides by different amounts; this keeps the
    blocks measured on an otherwise idle machine, dropping whole blocks (both sides and their
    questions), never one side of a block.
    """
    late: dict[tuple[str, int], bool] = {}
    for r in rows:
        if r.get("kind") == "block":
            key = (r["program"], r["block"])
            late[key] = late.get(key, True) and str(r.get("at", "")) >= since
    keep = {k for k, ok in late.items() if ok}
    return [r for r in rows if r.get("kind") not in ("block", "question")
            or (r["program"], r["block"]) in keep]


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per program: throughput, tokens and paired quality, old vs new."""
    out = []
    programs = sorted({r["program"] for r in rows if r.get("kind") == "question"},
                      key=lambda p: ["vanilla_rag", "diva", "verdict", "toc"].index(p)
                      if p in ["vanilla_rag", "diva", "verdict", "toc"] else 9)
    for prog in programs:
        blocks = {}
        for r in rows:
            if r.get("kind") == "block" and r["program"] == prog:
                blocks.setdefault(r["block"], {})[r["side"]] = r
        paired_blocks = [b for b in blocks.values() if "old" in b and "new" in b]
        if not paired_blocks:
            continue
        done = {(b["old"]["block"]) for b in paired_blocks}
        q = {side: {r["qid"]: r for r in rows if r.get("kind") == "question"
                    and r["program"] == prog and r["side"] == side and r["block"] in done}
             for side in ("old", "new")}
        qids = sorted(set(q["old"]) & set(q["new"]))
        n_q = len(qids)
        wall = {s: sum(b[s]["wall_s"] for b in paired_blocks) for s in ("old", "new")}
        qph = {s: 3600.0 * n_q / wall[s] if wall[s] else 0.0 for s in ("old", "new")}
        ratio_ci = bootstrap(paired_blocks, lambda bs: sum(b["old"]["wall_s"] for b in bs)
                             / max(sum(b["new"]["wall_s"] for b in bs), 1e-9))
        entry: dict[str, Any] = {"program": prog, "n": n_q, "blocks": len(paired_blocks),
                                 "qph_old": qph["old"], "qph_new": qph["new"],
                                 "ratio": qph["new"] / qph["old"] if qph["old"] else 0.0,
                                 "ratio_ci": ratio_ci}
        for side in ("old", "new"):
            rs = [q[side][i] for i in qids]
            tin = sum(r.get("trace", {}).get("input_tokens", 0) or 0 for r in rs)
            cached = sum(r.get("trace", {}).get("cached_tokens", 0) or 0 for r in rs)
            entry[f"cached_share_{side}"] = cached / tin if tin else 0.0
            entry[f"prompt_{side}"] = _tok(rs, "input_tokens")
            entry[f"computed_{side}"] = _tok(rs, "computed_tokens")
            entry[f"output_{side}"] = _tok(rs, "output_tokens")
            entry[f"calls_{side}"] = _tok(rs, "lm_calls")
            entry[f"truncated_{side}"] = sum(r.get("trace", {}).get("truncated_calls", 0) or 0
                                             for r in rs)
            entry[f"retries_{side}"] = sum(r.get("trace", {}).get("format_retries", 0) or 0
                                           for r in rs)
            entry[f"errors_{side}"] = sum(1 for r in rs if r.get("error"))
            for metric in ("str_em", "rouge_lsum"):
                entry[f"{metric}_{side}"] = statistics.mean(r[metric] for r in rs) if rs else 0
        for metric in ("str_em", "rouge_lsum"):
            diffs = [q["new"][i][metric] - q["old"][i][metric] for i in qids]
            entry[f"{metric}_diff"] = statistics.mean(diffs) if diffs else 0.0
            entry[f"{metric}_diff_ci"] = bootstrap(diffs, statistics.mean)
        out.append(entry)
    return out


def by_signature(rows: list[dict[str, Any]]) -> str:
    """Per signature and side: calls, first-try parse rate, truncations, mean tokens per call
    (all programs together) -- where format retries and cut replies come from."""
    agg: dict[tuple[str, str], dict[str, int]] = {}
    for r in rows:
        if r.get("kind") != "question":
            continue
        for sig, row in (r.get("trace", {}).get("by_signature") or {}).items():
            a = agg.setdefault((sig, r["side"]), {k: 0 for k in row})
            for k, v in row.items():  # the longest reply is a max, every other column a sum
                a[k] = max(a.get(k, 0), v) if k == "max_output_tokens" else a.get(k, 0) + v
    lines = ["| signature | side | calls | first-try parse | truncated | prompt tok/call | "
             "computed tok/call | output tok/call |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for (sig, side), a in sorted(agg.items()):
        first = a["calls"] - a["parse_failures"]  # each failed ChatAdapter parse adds a call
        calls = max(a["calls"], 1)
        rate = (first - a["parse_failures"]) / first if first > 0 else 0.0
        lines.append(f"| {sig} | {side} | {a['calls']} | {rate:.0%} | {a['truncated']} | "
                     f"{a['input_tokens'] / calls:.0f} | {a['computed_tokens'] / calls:.0f} | "
                     f"{a['output_tokens'] / calls:.0f} |")
    return "\n".join(lines) + "\n"


def render_table(summary: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    def ci(pair: tuple[float, float], scale: float = 1.0, digits: int = 1) -> str:
        return f"[{pair[0] * scale:.{digits}f}, {pair[1] * scale:.{digits}f}]"

    lines = [
        "| program | n (blocks) | q/h old | q/h new | ratio [95% CI] | cached share of prompt "
        "tokens old / new | prompt tok/q old / new | computed prompt tok/q old / new | output "
        "tok/q old / new | LM calls/q old / new | truncated old / new | format retries old / "
        "new | STR-EM old / new, diff [CI] | ROUGE-Lsum old / new, diff [CI] |",
        "|---|---:|---:|---:|---|---|---|---|---|---|---|---|---|---|",
    ]
    for e in summary:
        lines.append(
            f"| {e['program']} | {e['n']} ({e['blocks']}) | {e['qph_old']:.1f} | "
            f"{e['qph_new']:.1f} | {e['ratio']:.2f}× "
            f"{ci(e['ratio_ci'], digits=2) if e['blocks'] > 1 else '(one block: no interval)'} | "
            f"{e['cached_share_old']:.0%} / {e['cached_share_new']:.0%} | "
            f"{e['prompt_old']:.0f} / {e['prompt_new']:.0f} | "
            f"{e['computed_old']:.0f} / {e['computed_new']:.0f} | "
            f"{e['output_old']:.0f} / {e['output_new']:.0f} | "
            f"{e['calls_old']:.1f} / {e['calls_new']:.1f} | "
            f"{e['truncated_old']} / {e['truncated_new']} | "
            f"{e['retries_old']} / {e['retries_new']} | "
            f"{e['str_em_old'] * 100:.1f} / {e['str_em_new'] * 100:.1f}, "
            f"{e['str_em_diff'] * 100:+.1f} {ci(e['str_em_diff_ci'], 100)} | "
            f"{e['rouge_lsum_old'] * 100:.1f} / {e['rouge_lsum_new'] * 100:.1f}, "
            f"{e['rouge_lsum_diff'] * 100:+.1f} {ci(e['rouge_lsum_diff_ci'], 100)} |")
    if meta.get("variant"):
        sides = (f"old: today's code with each program's default settings; new: the same with "
                 f"`{json.dumps(meta['variant'], sort_keys=True)}`; both {meta.get('slots')} "
                 f"slots, each block answered concurrently")
    else:
        sides = (f"old prompts from `{meta.get('baseline')}`, new: {meta.get('slots')} slots")
    head = (f"Model `{meta.get('model')}` (embedded, {meta.get('threads')} threads), retriever "
            f"`{meta.get('retriever')}`, ASQA dev in file order, {sides}, blocks of "
            f"{meta.get('block')} questions. Per-question token columns are means; truncated "
            f"and format retries are totals. Intervals: 95% bootstrap (ratio over blocks, "
            f"quality diffs paired over questions).\n\n")
    return head + "\n".join(lines) + "\n"


# ---- main ------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", default="vanilla_rag,diva,verdict,toc")
    ap.add_argument("--n", type=int, default=20, help="first N ASQA dev questions")
    ap.add_argument("--data", default="asqa:dev")
    ap.add_argument("--retriever", default="bm25:wiki-bm25")
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--slots", type=int, default=None, help="new side's slots (default: "
                    "ambiqa.lm.DEFAULT_SLOTS)")
    ap.add_argument("--block", type=int, default=None, help="questions per block "
                    "(default: the slot count)")
    ap.add_argument("--baseline", default=DEFAULT_BASELINE, help="git commit of the old prompts")
    ap.add_argument("--variant", default=None, metavar="JSON",
                    help="old = today's defaults, new = today's with these program settings, "
                         "e.g. '{\"diva\": {\"verify_evidence\": \"brief\"}}'")
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--resume", action="store_true", help="keep existing rows and add to them "
                    "(the default when rows exist; without it an existing rows file is an "
                    "error)")
    ap.add_argument("--max-minutes", type=float, default=None,
                    help="start no new block after this many minutes")
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument("--since", default=None, help="also write table-since-SINCE.md from the "
                    "blocks measured at or after this ISO time (e.g. when the machine became "
                    "otherwise idle)")
    ap.add_argument("--slot-search", default=None,
                    help="comma-separated slot counts: run only the new side at each")
    args = ap.parse_args(argv)

    from ambiqa.lm import DEFAULT_SLOTS, EmbeddedSettings

    out = Path(args.out)
    slots = args.slots or DEFAULT_SLOTS
    block = args.block or slots
    variant = parse_variant(args.variant)
    meta = {"model": args.model, "threads": args.threads, "retriever": args.retriever,
            "baseline": args.baseline, "slots": slots, "block": block, "variant": variant}
    if args.slot_search:
        return slot_search(args, [int(s) for s in args.slot_search.split(",")], out)
    rows_path = out / "rows.jsonl"
    if args.report_only:
        return report(rows_path, out, meta, args.since)
    if rows_path.is_file() and not args.resume:
        print(f"{rows_path} exists: pass --resume to extend it", file=sys.stderr)
        return 2
    rows = load_rows(rows_path)
    for r in rows:  # the run's settings come from the first run
        if r.get("kind") == "meta":
            if (r.get("variant") or None) != variant:
                print(f"{rows_path} was measured with --variant "
                      f"{json.dumps(r.get('variant'))}, not {json.dumps(variant)}: a resume "
                      "keeps the run's settings", file=sys.stderr)
                return 2
            meta = {**meta, **{k: r[k] for k in meta if k in r}}
    if not any(r.get("kind") == "meta" for r in rows):
        append_rows(rows_path, [{"kind": "meta", **meta}])
    slots, block = int(meta["slots"]), int(meta["block"])

    from ambiqa.data.specs import load_dataset
    from ambiqa.lm import configure
    from ambiqa.retrieval.encoder import get_encoder
    from ambiqa.retrieval.factory import open_retriever

    examples = load_dataset(f"{args.data}:{args.n}")
    retriever = open_retriever(args.retriever)
    programs = [p.strip() for p in args.programs.split(",") if p.strip()]
    encoder = get_encoder() if set(programs) & {"diva", "verdict", "toc"} else None
    if encoder is not None:
        encoder.encode(["warm up"])
    today = EmbeddedSettings(model=args.model, n_threads=args.threads, n_parallel=slots)
    if variant:
        old = Side("old", today, None, budget_off=False)
        new = Side("new", today, None, budget_off=False, overrides=variant)
    else:
        old = Side("old", EmbeddedSettings.legacy(model=args.model, n_threads=args.threads),
                   legacy_signatures(args.baseline), budget_off=True)
        new = Side("new", today, None, budget_off=False)
    configure(new.lm)  # installs the trace callback and usage tap; sides switch by context
    old.warm()
    new.warm()

    done = {(r["program"], r["block"], r["side"]) for r in rows if r.get("kind") == "block"}
    blocks = [examples[i:i + block] for i in range(0, len(examples), block)]
    t_start = time.perf_counter()
    for b, chunk in enumerate(blocks):
        for prog in programs:
            if args.max_minutes and time.perf_counter() - t_start > args.max_minutes * 60:
                print(f"time budget reached before {prog} block {b}", flush=True)
                return report(rows_path, out, meta, args.since)
            order = [old, new] if b % 2 == 0 else [new, old]
            for side in order:
                if (prog, b, side.name) in done:
                    continue
                program = side.program(prog, retriever, encoder)
                wall, qrows = run_block(side, program, chunk,
                                        concurrent=side is new or bool(variant))
                stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
                append_rows(rows_path, [
                    *({"kind": "question", "program": prog, "block": b, "side": side.name,
                       **r} for r in qrows),
                    {"kind": "block", "program": prog, "block": b, "side": side.name,
                     "wall_s": round(wall, 3), "n": len(chunk), "at": stamp}])
                print(f"{stamp} {prog} block {b} {side.name}: {len(chunk)} q in {wall:.0f} s; "
                      f"STR-EM {statistics.mean(r['str_em'] for r in qrows):.2f}", flush=True)
    return report(rows_path, out, meta, args.since)


def parse_variant(text: str | None) -> dict[str, dict[str, Any]] | None:
    """``--variant``: a JSON object of program name -> settings, checked before any model
    loads (an unknown program or setting is refused by the program's own config)."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SystemExit(f"--variant: not JSON ({exc.msg})") from None
    if not isinstance(value, dict) or not value or not all(
            isinstance(v, dict) and v for v in value.values()):
        raise SystemExit("--variant: a JSON object of program -> non-empty settings, e.g. "
                         '\'{"diva": {"verify_evidence": "brief"}}\'')
    from ambiqa.programs.registry import program_class

    for name, settings in value.items():
        try:
            cls = program_class(name)
            config = getattr(cls, "config_class", None)
            if config is None:
                raise ConfigError(f"{name} takes no settings")
            config(**settings)
        except (ConfigError, TypeError) as exc:
            raise SystemExit(f"--variant {name}: {getattr(exc, 'message', exc)}") from None
    return value


def report(rows_path: Path, out: Path, meta: dict[str, Any], since: str | None = None) -> int:
    """Write ``table.md`` and ``summary.json`` from every block, and with ``since`` also
    ``table-since-SINCE.md`` / ``summary-since-SINCE.json`` from the blocks measured then."""
    rows = load_rows(rows_path)
    for r in rows:
        if r.get("kind") == "meta":
            meta = {**meta, **{k: r[k] for k in meta if k in r}}
    variants = [("", rows, "")]
    if since:
        variants.append((f"-since-{since}", blocks_since(rows, since),
                         f"Only the blocks measured at or after {since}.\n\n"))
    for suffix, kept, note in variants:
        summary = summarize(kept)
        table = (note + render_table(summary, meta) + "\nPer signature (all programs):\n\n"
                 + by_signature(kept))
        atomic_write_text(out / f"table{suffix}.md", table)
        atomic_write_text(out / f"summary{suffix}.json", json.dumps(summary, indent=2) + "\n")
        print(table)
    return 0


def slot_workload(retriever: Any, examples: list[Any]) -> list[tuple[str, Any, dict[str, str]]]:
    """Independent calls of the kinds the programs make at once, per question: two Diva
    verifications over the same passages (prefix shared), one long answer over other
    passages, one closed-book answer (short prompt, decode-heavy)."""
    import dspy

    from ambiqa.programs.base import format_passages
    from ambiqa.signatures.answering import ClosedBookLongAnswer, WriteLongAnswer
    from ambiqa.signatures.verification import VerifyInterpretation

    tasks = []
    for ex in examples:
        passages = format_passages(retriever.search(ex.question, 5))
        verify = dspy.Predict(VerifyInterpretation)
        for pair in list(ex.qa_pairs)[:2]:
            tasks.append(("verify", verify, {"interpretation": pair["question"],
                                             "passages": passages}))
        tasks.append(("long_answer", dspy.Predict(WriteLongAnswer), {
            "question": ex.question, "interpretations": "(none found)",
            "passages": format_passages(retriever.search(ex.question + " history", 5))}))
        tasks.append(("closed_book", dspy.Predict(ClosedBookLongAnswer),
                      {"question": ex.question}))
    return tasks


def slot_search(args: argparse.Namespace, counts: list[int], out: Path) -> int:
    """The same independent calls, all submitted at once, at each slot count (new settings):
    wall time, tokens, and how many replies equal the first count's (temperature 0)."""
    import dspy

    from ambiqa.data.specs import load_dataset
    from ambiqa.lm import EmbeddedSettings, configure, embedded_lm
    from ambiqa.parallel import run_parallel
    from ambiqa.retrieval.factory import open_retriever
    from ambiqa.tracing import track

    examples = load_dataset(f"{args.data}:{args.n}")
    retriever = open_retriever(args.retriever)
    tasks = slot_workload(retriever, examples)
    path = out / "slot_search.jsonl"
    results = []
    for count in counts:
        lm = embedded_lm(EmbeddedSettings(model=args.model, n_threads=args.threads,
                                          n_parallel=count), cache=False)
        configure(lm)
        lm.engine.inner._ensure_server()  # model load is not part of the measurement

        def call(task: tuple[str, Any, dict[str, str]]) -> str:
            _, predictor, inputs = task
            pred = predictor(**inputs)
            return str(pred.toDict())

        with dspy.context(lm=lm), track() as trace:
            t0 = time.perf_counter()
            replies = run_parallel(call, tasks, max_workers=len(tasks))
            wall = time.perf_counter() - t0
        row = {"kind": "slots", "slots": count, "calls": len(tasks), "wall_s": round(wall, 2),
               "computed_tokens": trace.computed_tokens, "input_tokens": trace.input_tokens,
               "output_tokens": trace.output_tokens, "replies": replies,
               "at": time.strftime("%Y-%m-%dT%H:%M:%S")}
        append_rows(path, [row])
        results.append(row)
        print(f"slots={count}: {len(tasks)} calls in {wall:.0f} s", flush=True)
        lm.engine.close()
    base = results[0]["replies"]
    lines = [f"| slots | calls | wall s | calls/min | computed prompt tok | output tok | replies "
             f"equal to {counts[0]} slot(s) |", "|---:|---:|---:|---:|---:|---:|---|"]
    for r in results:
        same = sum(1 for a, b in zip(r["replies"], base, strict=True) if a == b)
        lines.append(f"| {r['slots']} | {r['calls']} | {r['wall_s']:.0f} | "
                     f"{60 * r['calls'] / r['wall_s']:.2f} | {r['computed_tokens']} | "
                     f"{r['output_tokens']} | {same}/{r['calls']} |")
    table = "\n".join(lines) + "\n"
    atomic_write_text(out / "slot_search.md", table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
