"""The do-no-harm guard replayed on the stored compiled ASQA runs (no LM call).

Issue 46 made compiles choose (:mod:`ambiqa.optimizers.select`): the zero-shot program, the
input program, the teleprompter's result and demo-plan variants are scored on a validation
split carved from the training data, and zero-shot ships unless a candidate's mean objective
is *strictly* higher; the paired 95% interval against zero-shot is recorded. This script asks
which of the compiles stored before the guard existed it would have refused.

**Dev rows stand in for the validation split.** A real compile never sees dev. For each stored
compiled run (a ``run.json`` naming an artifact, beside a ``results.jsonl``) this pairs the
compiled program's stored rows with the stored zero-shot run of the same program on the same
questions (only the questions both hold) and applies the guard's rule to them: a replay of the
rule, not of the compile (other questions; and the compile would also have scored the input
program and demo-plan variants).

* **Objective**: the compile's own, as its artifact's manifest records it (``manifest.metric``:
  ``d-f1``, ``dr``, ``d-f1-cov`` ...; the recipe's default when the artifact is not stored, said
  so), computed per question from the rows' stored metric values; a failed question scores 0
  (as in every headline number). ``dr`` is the set-level statistic
  (``sqrt(mean D-F1 × mean ROUGE-L)``, :mod:`ambiqa.evaluation.stats`); the mean of the
  per-question roots, which is how ``select.py`` ranked DR before it took the set-level
  statistic, is kept in the JSON and named in the notes where it decides otherwise.
  ``d-f1-cov`` is the mean of a question's D-F1 and STR-EM, ``str-rouge`` of its STR-EM and
  ROUGE-L.
* **Reader**: D-F1 depends on it. A compiled run stored several times with the same answers
  (``evidence-rescored-v4/`` and ``dr-v4/`` hold copies re-scored by the shipped reader v4,
  ``evidence-rescored/`` by v3) is replayed on the copy read by ``--reader`` (default v4, the
  reader that ships), paired with a zero-shot run read by the same reader; the other copies'
  replays are listed below the table.
* **Decision**: compiled mean > zero-shot mean: "would have shipped"; otherwise "would have
  refused". **Interval**: the paired 95% BCa interval of compiled − zero-shot
  (:func:`ambiqa.evaluation.stats.paired_interval`): "above 0", "below 0" or "undecided at
  n = N".
* Beside it, the same rule with STR-EM, and the answers' median length in words (questions
  both runs answered): compiled − zero-shot median with a paired percentile bootstrap interval,
  and the rule "ship when the compiled median is nearer the references' median" (length has no
  "higher is better").

Zero-shot run: the stored run of the same program (a registry name, no program setting the
artifact's configuration contradicts) on the same data set and split, with the same LM, reader
and index, sharing the most questions. ``compile-v4/`` is left out, not read (its runs are in
progress, made after the guard existed).

    python -m benchmarks.guard_replay
    python -m benchmarks.guard_replay --reader extractive:minilm-asqa-v3 \
        --out benchmarks/results/guard-replay/guard_replay-v3

Writes ``benchmarks/results/guard-replay/guard_replay.md`` and ``guard_replay.json``
(atomically: temp file + rename).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.stored_runs import (
    LONG_ANSWER_DATA,
    RESULTS,
    ROOT,
    References,
    answers_fingerprint,
    cached_references,
    data_split,
    find_artifact,
    find_runs,
    load_references,
    rel,
    words,
)

OUT = f"{RESULTS}/guard-replay/guard_replay"
COMMAND = "python -m benchmarks.guard_replay"
#: run directories left out, not read (relative to results/): in progress
EXCLUDE = ("compile-v4",)
#: the reader whose copy of a run is replayed when a run is stored under several readers:
#: the one that ships with ambiqa (v3's weights did not travel; its stored reads stay history)
PREFERRED_READER = "extractive:minilm-asqa-v4"
#: seed and resamples of the median-length bootstrap (stats.py's intervals use seed 0 too)
SEED = 0
N_RESAMPLES = 2000
#: run.json keys that are expected to differ between a compiled run and its zero-shot run
SPEC_SAME_OK = ("program", "artifact_sha256", "metrics", "old_reader", "index", "data")
STANDS_IN = ("DEV ROWS STAND IN FOR THE VALIDATION SPLIT. A real compile never sees dev: it "
             "scores its candidates on a validation split carved from its training data. This "
             "replays the guard's decision rule on stored dev rows; it is not a replay of the "
             "compile.")


# ------------------------------------------------------------------ reading the stored runs


def load(run_dir: Path, root: Path) -> dict[str, Any]:
    """A run: its ``run.json``, its rows (one per id, a later row wins) and where it lives."""
    from ambiqa.evaluation.runs.run_dir import ResultsFile

    spec = json.loads((run_dir / "run.json").read_text("utf-8"))
    rows = ResultsFile(run_dir / "results.jsonl").read()
    return {"run": rel(run_dir, root / RESULTS), "dir": run_dir, "spec": spec, "rows": rows,
            "reader": spec.get("reader"), "old_reader": spec.get("old_reader"),
            "answers_sha256": answers_fingerprint(rows)}


def is_compiled(spec: dict[str, Any]) -> bool:
    return str(spec.get("program") or "").endswith(".json")


def _recipes() -> dict[str, Any]:
    from ambiqa.optimizers.recipes import RECIPES

    return RECIPES


def _program_from_name(stem: str) -> str | None:
    """The program an artifact's file name starts with (``toc-knn-gold`` -> ``toc``)."""
    names = sorted(_recipes(), key=len, reverse=True)
    return next((n for n in names if stem == n or stem.startswith(n + "-")), None)


def artifact_info(spec: dict[str, Any], root: Path) -> dict[str, Any]:
    """What the compile was: program, optimizer, objective (``metric``) and where it was read.

    ``status``: ``compiled`` (the artifact is here and its sha256 is the run's), ``changed``
    (the file here is another artifact) or ``not stored``; in the last two the program comes
    from the file name and the objective is the program recipe's default (``metric_from``)."""
    program = str(spec.get("program") or "")
    path = find_artifact(program, root)
    stem = Path(program).stem
    out: dict[str, Any] = {"artifact": rel(path, root) if path else program,
                           "status": "not stored", "program": _program_from_name(stem),
                           "optimizer": None, "metric": None, "metric_from": None,
                           "train": None, "program_config": None, "demos_per_predictor": None}
    if path is not None:
        raw = path.read_bytes()
        want = spec.get("artifact_sha256")
        if want and hashlib.sha256(raw).hexdigest() != want:
            out["status"] = "changed"
        else:
            manifest = json.loads(raw).get("manifest") or {}
            opt = manifest.get("optimizer") or {}
            return {**out, "status": "compiled", "program": manifest.get("program"),
                    "optimizer": opt.get("name"), "metric": manifest.get("metric"),
                    "metric_from": "manifest", "train": manifest.get("train"),
                    "program_config": manifest.get("program_config"),
                    "demos_per_predictor": manifest.get("demos_per_predictor")}
    recipe = _recipes().get(out["program"] or "")
    guess = stem[len(out["program"]) + 1:] if out["program"] else stem
    return {**out, "optimizer": f"{guess or '?'} (file name)",
            "metric": recipe.metric if recipe else None,
            "metric_from": (f"recipe default (artifact {out['status']})" if recipe else None)}


def _range(data: str) -> tuple[int, float]:
    """The 1-based question range a data spec takes (``13-500`` -> (13, 500); ``12`` ->
    (1, 12); none -> (1, inf))."""
    from ambiqa.data.specs import parse_spec

    p = parse_spec(str(data))
    return (p.start or 1, float(p.limit) if p.limit else math.inf)


def rows_role(data: str, train: str | None) -> str:
    """What the replayed rows are to the compile: dev rows standing in for its validation
    split, training rows it did not train on (validation-like), or its own training rows."""
    split = data_split(data).split(":")[-1]
    if split != "train":
        return f"{split} (stands in for validation)"
    if not train or data_split(train) != data_split(data):
        return "train (the compile's training slice unknown)"
    (a, b), (c, d) = _range(data), _range(train)
    if b < c or d < a:
        return f"train, held out from the compile's {train}"
    return f"train, overlapping the compile's {train}"


def _index_key(spec: dict[str, Any]) -> str | None:
    if spec.get("index_fingerprint"):
        return str(spec["index_fingerprint"])
    index = spec.get("index")
    return str(index).split(":")[-1] if index else None


def zero_shot_for(compiled: dict[str, Any], art: dict[str, Any], runs: list[dict[str, Any]]
                  ) -> tuple[dict[str, Any] | None, str]:
    """The stored zero-shot run the compiled run is paired with, and why (or why none)."""
    spec = compiled["spec"]
    config = art.get("program_config") or {}
    ids = {str(r["id"]) for r in compiled["rows"]}
    fits = []
    for z in runs:
        zs = z["spec"]
        if is_compiled(zs) or zs.get("program") != art["program"]:
            continue
        own = zs.get("program_config") or {}
        if any(k not in config or config[k] != v for k, v in own.items()):
            continue  # a setting the compiled program does not have (toc-strict, ...)
        if (data_split(zs.get("data", "")) != data_split(spec.get("data", ""))
                or zs.get("lm") != spec.get("lm") or z["reader"] != compiled["reader"]):
            continue
        a, b = _index_key(zs), _index_key(spec)
        if a and b and a != b:
            continue
        shared = len(ids & {str(r["id"]) for r in z["rows"]})
        if shared:
            fits.append((shared, -len(z["run"]), z))
    if not fits:
        return None, (f"no stored zero-shot {art['program']} run on "
                      f"{data_split(spec.get('data'))} with LM {spec.get('lm')}, reader "
                      f"{compiled['reader']} and the same index")
    fits.sort(key=lambda f: (f[0], f[1], f[2]["run"]), reverse=True)
    return fits[0][2], f"{len(fits)} candidate(s); the one sharing most questions"


# ------------------------------------------------------------------ the rule


#: compile objectives that are the per-question mean of two stored metrics
#: (ambiqa/evaluation/registry.py: ``_d_f1_cov``, ``_str_rouge``)
COMPOSED = {"d-f1-cov": ("d-f1", "str-em"), "str-rouge": ("str-em", "rouge-l")}


def objective_arrays(rows: Sequence[dict[str, Any]], metric: str
                     ) -> tuple[list[str], list[list[float]]]:
    """(ids, one array per part) of ``metric`` (failed = 0), via stats.part_arrays; the
    composed compile objectives (``d-f1-cov``: (D-F1 + STR-EM) / 2, ``str-rouge``: (STR-EM +
    ROUGE-L) / 2) are computed per question from their two parts."""
    from ambiqa.evaluation.metric_names import canonical_name
    from ambiqa.evaluation.stats import part_arrays

    name = canonical_name(metric)
    if name not in COMPOSED:
        return part_arrays(rows, name)
    first, second = COMPOSED[name]
    ids_a, (a,) = part_arrays(rows, first)
    ids_b, (b,) = part_arrays(rows, second)
    at = {i: k for k, i in enumerate(ids_b)}
    ids = [i for i in ids_a if i in at]
    return ids, [[(a[ids_a.index(i)] + b[at[i]]) / 2 for i in ids]]


def _verdict(lo: float, hi: float, n: int) -> str:
    if lo is None or hi is None or math.isnan(lo) or math.isnan(hi):
        return f"no interval (n = {n})"
    if lo > 0:
        return "above 0"
    if hi < 0:
        return "below 0"
    return f"undecided at n = {n}"


def guard(compiled_rows: Sequence[dict[str, Any]], zero_rows: Sequence[dict[str, Any]],
          metric: str, seed: int = SEED) -> dict[str, Any]:
    """The guard's rule on the questions both runs scored: ship the compiled program only when
    its value of ``metric`` is strictly above zero-shot's; the paired interval beside it."""
    from ambiqa.evaluation.stats import paired_interval, set_level_name, set_value

    c_ids, c = objective_arrays(compiled_rows, metric)
    z_ids, z = objective_arrays(zero_rows, metric)
    c_at = {i: k for k, i in enumerate(c_ids)}
    z_at = {i: k for k, i in enumerate(z_ids)}
    shared = [i for i in z_ids if i in c_at]
    xc = [[a[c_at[i]] for i in shared] for a in c]
    xz = [[a[z_at[i]] for i in shared] for a in z]
    key = set_level_name(metric) or metric
    cv, zv = set_value(key, xc), set_value(key, xz)
    lo, hi, method = paired_interval(key, xc, xz, seed)
    failed_c = {str(r["id"]) for r in compiled_rows if r.get("error")}
    failed_z = {str(r["id"]) for r in zero_rows if r.get("error")}
    out = {"metric": metric, "n": len(shared), "compiled": cv, "zero_shot": zv,
           "diff": cv - zv if shared else math.nan, "ci95": [lo, hi], "ci_method": method,
           "failed": {"compiled": len(failed_c & set(shared)),
                      "zero_shot": len(failed_z & set(shared))},
           "decision": ("would have shipped" if shared and cv > zv else "would have refused"),
           "interval": _verdict(lo, hi, len(shared))}
    if set_level_name(metric) == "dr" and shared:
        # how select.py ranked DR before the set-level statistic: each question's own root
        qc = statistics.fmean(math.sqrt(max(d, 0) * max(r, 0)) for d, r in zip(*xc, strict=True))
        qz = statistics.fmean(math.sqrt(max(d, 0) * max(r, 0)) for d, r in zip(*xz, strict=True))
        out["per_question_mean"] = {"compiled": qc, "zero_shot": qz, "diff": qc - qz,
                                    "decision": ("would have shipped" if qc > qz
                                                 else "would have refused")}
    return out


def median_interval(a: Sequence[float], b: Sequence[float], seed: int = SEED
                    ) -> tuple[float, float]:
    """95% percentile bootstrap of median(a) − median(b), questions resampled in pairs."""
    import numpy as np

    n = len(a)
    if n < 3:
        return math.nan, math.nan
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    idx = np.random.default_rng(seed).integers(0, n, size=(N_RESAMPLES, n))
    d = np.median(x[idx], axis=1) - np.median(y[idx], axis=1)
    return float(np.percentile(d, 2.5)), float(np.percentile(d, 97.5))


def length_rule(compiled_rows: Sequence[dict[str, Any]], zero_rows: Sequence[dict[str, Any]],
                refs: dict[str, list[str]]) -> dict[str, Any]:
    """Median answer length (words) on the questions both runs answered, its paired bootstrap,
    the references' median there, and which side is nearer it."""
    def got(rows: Sequence[dict[str, Any]]) -> dict[str, int]:
        return {str(r["id"]): words((r.get("prediction") or {}).get("answer"))
                for r in rows if not r.get("error")}

    c, z = got(compiled_rows), got(zero_rows)
    shared = sorted(set(c) & set(z))
    if not shared:
        return {"n": 0, "compiled": None, "zero_shot": None, "diff": None,
                "ci95": [math.nan, math.nan], "references": None, "nearer": None}
    a, b = [c[i] for i in shared], [z[i] for i in shared]
    ca, zb = float(statistics.median(a)), float(statistics.median(b))
    lo, hi = median_interval(a, b)
    ref = [statistics.median(words(x) for x in refs[i]) for i in shared if refs.get(i)]
    ref_med = float(statistics.median(ref)) if ref else None
    nearer = None
    if ref_med is not None:
        dc, dz = abs(ca - ref_med), abs(zb - ref_med)
        nearer = ("compiled: would have shipped" if dc < dz else
                  "zero-shot: would have refused")
    return {"n": len(shared), "compiled": ca, "zero_shot": zb, "diff": ca - zb,
            "ci95": [lo, hi], "interval": _verdict(lo, hi, len(shared)),
            "references": ref_med, "n_references": len(ref), "nearer": nearer}


# ------------------------------------------------------------------ the replay


def _spec_diffs(a: dict[str, Any], b: dict[str, Any]) -> dict[str, list[Any]]:
    """run.json settings that differ between the compiled run and its zero-shot run."""
    keys = (set(a) | set(b)) - set(SPEC_SAME_OK) - {"program_config", "reader"}
    return {k: [a.get(k), b.get(k)] for k in sorted(keys) if a.get(k) != b.get(k)}


def replay_one(compiled: dict[str, Any], runs: list[dict[str, Any]], root: Path,
               refs: References) -> dict[str, Any]:
    spec = compiled["spec"]
    art = artifact_info(spec, root)
    base = {"run": compiled["run"], "reader": compiled["reader"],
            "old_reader": compiled["old_reader"], "lm": spec.get("lm"),
            "data": spec.get("data"), "n_rows": len(compiled["rows"]),
            "answers_sha256": compiled["answers_sha256"], "artifact": art,
            "rows_role": rows_role(str(spec.get("data")), art.get("train"))}
    if not art["program"] or not art["metric"]:
        return {**base, "replayed": False, "why": "neither the artifact nor its name says "
                "which program and objective it is"}
    zero, why = zero_shot_for(compiled, art, runs)
    if zero is None:
        return {**base, "replayed": False, "why": why}
    obj = guard(compiled["rows"], zero["rows"], art["metric"])
    strem = guard(compiled["rows"], zero["rows"], "str-em")
    length = length_rule(compiled["rows"], zero["rows"], refs(str(spec.get("data"))))
    return {**base, "replayed": True, "zero_shot": zero["run"], "zero_shot_why": why,
            "zero_shot_n_rows": len(zero["rows"]), "objective": obj, "str_em": strem,
            "length": length, "spec_differences": _spec_diffs(spec, zero["spec"])}


def unreplayed_artifacts(results: Path, root: Path, named: set[str]) -> list[dict[str, Any]]:
    """Compiled ASQA artifacts stored under ``results`` that no stored run evaluated."""
    out = []
    for path in sorted(results.rglob("*.json")):
        parts = path.relative_to(results).parts
        if parts[0] in EXCLUDE or rel(path, root) in named:
            continue
        with path.open("rb") as fh:
            if b"ambiqa-artifact" not in fh.read(200):
                continue
        manifest = json.loads(path.read_bytes()).get("manifest") or {}
        train = str(manifest.get("train") or "")
        if train.split(":")[0] not in LONG_ANSWER_DATA:
            continue
        out.append({"artifact": rel(path, root), "program": manifest.get("program"),
                    "optimizer": (manifest.get("optimizer") or {}).get("name"),
                    "metric": manifest.get("metric"), "train": train})
    return out


def measure(root: Path = ROOT, refs: References = load_references,
            reader: str = PREFERRED_READER) -> dict[str, Any]:
    """Every stored compiled ASQA run replayed against its zero-shot run, on the copy read by
    ``reader`` where a run is stored under several readers."""
    refs = cached_references(refs)
    results = root / RESULTS
    runs = [load(d, root) for d in find_runs(results, exclude=EXCLUDE)]
    compiled = [r for r in runs if is_compiled(r["spec"])]
    groups: dict[str, list[dict[str, Any]]] = {}
    for c in compiled:
        groups.setdefault(f"{c['answers_sha256']}:{Path(str(c['spec']['program'])).name}",
                          []).append(c)
    primary, others = [], []
    for copies in groups.values():
        copies.sort(key=lambda c: (c["reader"] != reader, len(c["run"]), c["run"]))
        done = [replay_one(c, runs, root, refs) for c in copies]
        lead = next((d for d in done if d["replayed"]), done[0])
        lead["copies"] = [d["run"] for d in done if d is not lead]
        primary.append(lead)
        others += [{**d, "copy_of": lead["run"]} for d in done if d is not lead]
    primary.sort(key=lambda d: d["run"])
    others.sort(key=lambda d: d["run"])
    named = {d["artifact"]["artifact"] for d in primary + others}
    replayed = [d for d in primary if d["replayed"]]
    command = COMMAND if reader == PREFERRED_READER else f"{COMMAND} --reader {reader}"
    return {"command": command, "preferred_reader": reader, "stands_in": STANDS_IN,
            "excluded": list(EXCLUDE),
            "runs": primary, "other_readers": others,
            "not_replayed_artifacts": unreplayed_artifacts(results, root, named),
            "counts": {"replayed": len(replayed),
                       "refused": sum(d["objective"]["decision"] == "would have refused"
                                      for d in replayed),
                       "shipped": sum(d["objective"]["decision"] == "would have shipped"
                                      for d in replayed)}}


# ------------------------------------------------------------------ the report


def _f(x: float | None, digits: int = 3, sign: bool = False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"


def _ci(ci: Sequence[float], digits: int = 3) -> str:
    lo, hi = ci
    if lo is None or hi is None or math.isnan(lo) or math.isnan(hi):
        return "[–]"
    return f"[{lo:+.{digits}f}, {hi:+.{digits}f}]"


def _planned(data: str) -> int | None:
    """How many questions a data spec names (``asqa:dev:60`` -> 60; None: the whole split)."""
    lo, hi = _range(data)
    return None if math.isinf(hi) else int(hi - lo + 1)


def _setting(v: Any) -> str:
    return "not recorded" if v is None else repr(v)


def _short_reader(name: Any) -> str:
    return str(name or "?").replace("extractive:minilm-asqa-", "")


def _reader(d: dict[str, Any]) -> str:
    r = _short_reader(d["reader"])
    return f"{r} (re-scored; ran under {_short_reader(d['old_reader'])})" if d.get(
        "old_reader") else r


def _refusal(g: dict[str, Any]) -> str:
    return "**refused**" if g["decision"] == "would have refused" else "shipped"


def _words(x: float | None) -> str:
    return "–" if x is None else f"{x:.0f}" if float(x).is_integer() else f"{x:.1f}"


def _length_cell(ln: dict[str, Any]) -> str:
    if not ln["n"]:
        return "–"
    ref = "" if ln["references"] is None else f"; refs {_words(ln['references'])}"
    near = "" if not ln.get("nearer") else (
        " → shipped" if ln["nearer"].startswith("compiled") else " → **refused**")
    return (f"{_words(ln['compiled'])} vs {_words(ln['zero_shot'])} "
            f"({_words(ln['diff']) if ln['diff'] <= 0 else '+' + _words(ln['diff'])} "
            f"{_ci(ln['ci95'], 1)}{ref}){near}")


def _which(runs: list[dict[str, Any]]) -> str:
    """`` Refused: a, b. Shipped: c.`` (run names, by decision on the objective)."""
    out = ""
    for label, decision in (("Refused", "would have refused"), ("Shipped", "would have shipped")):
        got = [f"`{d['run'].rsplit('/', 1)[-1]}` ({d['run'].split('/', 1)[0]})" for d in runs
               if d["replayed"] and d["objective"]["decision"] == decision]
        out += f" {label}: {', '.join(got)}." if got else ""
    return out


def render(m: dict[str, Any]) -> str:
    c = m["counts"]
    lines = ["# The do-no-harm guard replayed on the stored compiles", "",
             f"> **{m['stands_in']}** The questions differ from any validation split, and the "
             "compile would also have scored the input program and demo-plan variants; "
             "here only the shipped compile meets zero-shot.", "",
             f"`{m['command']}` -- no LM call; every stored compiled ASQA run (a `run.json` "
             "naming an artifact) against the stored zero-shot run of the same program on the "
             "questions both hold, same LM, reader and index. The rule "
             "(`ambiqa/optimizers/select.py`): ship the compiled program only when its "
             "objective on the shared questions is **strictly** above zero-shot's; otherwise "
             "ship zero-shot (\"refused\"). Objective: the compile's own (`manifest.metric`), "
             "from the rows' stored per-question scores, a failed question scoring 0; DR is "
             "the set-level `sqrt(mean D-F1 × mean ROUGE-L)`. Δ = compiled − zero-shot with "
             "the paired 95% BCa interval (`ambiqa/evaluation/stats.py`); \"interval\" says "
             "whether it decides: above 0, below 0, or undecided at n = N. Beside it the same "
             "rule with STR-EM, and the median answer length in words (compiled vs zero-shot "
             "on the questions both answered, Δ with a paired percentile bootstrap; the rule "
             "for length: ship when the compiled median is nearer the references' median "
             f"there). Reader: the copy read by `{m.get('preferred_reader', PREFERRED_READER)}` "
             "where one exists. A compiled "
             "run and its zero-shot run were made at different times: a pair's difference "
             "also holds any change of code between them (issue 46: the stored zero-shot Diva "
             "predates a change of the verifier's output cap).", "",
             f"Replayed: {c['replayed']} compiles; the guard would have refused "
             f"**{c['refused']}** and shipped {c['shipped']}." + _which(m["runs"]), "",
             "| compiled run | program | optimizer | objective | reader | rows | zero-shot run "
             "| n | compiled | zero-shot | Δ [95%] | guard | interval | STR-EM Δ [95%] → guard "
             "| median words: compiled vs zero-shot (Δ [95%]; refs) → guard |",
             "|---|---|---|---|---|---|---|---:|---:|---:|---|---|---|---|---|"]
    notes: list[str] = []
    for d in m["runs"]:
        art = d["artifact"]
        run = f"`{d['run']}`" + "".join(f" (= `{x}`)" for x in d.get("copies", []))
        obj_name = str(art["metric"]) + ("" if art["metric_from"] == "manifest"
                                         else f" ({art['metric_from']})")
        if not d["replayed"]:
            lines.append(f"| {run} | {art['program']} | {art['optimizer']} | {obj_name} "
                         f"| {_reader(d)} | {d['rows_role']} | not replayed: {d['why']} "
                         "| | | | | | | | |")
            continue
        o, s = d["objective"], d["str_em"]
        lines.append(
            f"| {run} | {art['program']} | {art['optimizer']} | {obj_name} | {_reader(d)} "
            f"| {d['rows_role']} | `{d['zero_shot']}` | {o['n']} | {_f(o['compiled'])} "
            f"| {_f(o['zero_shot'])} | {_f(o['diff'], sign=True)} {_ci(o['ci95'])} "
            f"| {_refusal(o)} | {o['interval']} "
            f"| {_f(s['diff'], sign=True)} {_ci(s['ci95'])} → {_refusal(s)} ({s['interval']}) "
            f"| {_length_cell(d['length'])} |")
        pq = o.get("per_question_mean")
        if pq and pq["decision"] != o["decision"]:
            notes.append(f"`{d['run']}`: on the mean of per-question DR (how `select.py` "
                         f"ranked DR before) the guard decides otherwise: {_f(pq['compiled'])} vs "
                         f"{_f(pq['zero_shot'])}, {pq['decision']}.")
        if o["failed"]["compiled"] or o["failed"]["zero_shot"]:
            notes.append(f"`{d['run']}`: failed questions (scored 0): compiled "
                         f"{o['failed']['compiled']}, zero-shot {o['failed']['zero_shot']}.")
        if o["n"] < d["n_rows"]:
            notes.append(f"`{d['run']}`: {d['n_rows']} compiled rows, {o['n']} shared with "
                         f"`{d['zero_shot']}` ({d['zero_shot_n_rows']} rows).")
        planned = _planned(str(d["data"]))
        if planned and d["n_rows"] < planned:
            notes.append(f"`{d['run']}` is incomplete: {d['n_rows']} of the {planned} "
                         f"questions its data spec `{d['data']}` names.")
        if d["spec_differences"]:
            diffs = "; ".join(f"{k}: {_setting(v[0])} vs {_setting(v[1])}"
                              for k, v in d["spec_differences"].items())
            notes.append(f"`{d['run']}` vs `{d['zero_shot']}`: their run.json settings differ "
                         f"({diffs}; compiled vs zero-shot): the runs were made at different "
                         "times, with different code.")
    if m["other_readers"]:
        done = [d for d in m["other_readers"] if d["replayed"]]
        refused = sum(d["objective"]["decision"] == "would have refused" for d in done)
        lines += ["", "The same rule on the other reader's copy of the same answers (its "
                  "zero-shot run read by that reader too): of these "
                  f"{len(done)}, the guard would have refused {refused} and shipped "
                  f"{len(done) - refused}. The reader decides the objective: which compiles "
                  "pass the guard depends on it.", "",
                  "| copy | of | reader | zero-shot run | objective | n | compiled | zero-shot "
                  "| Δ [95%] | guard | interval |",
                  "|---|---|---|---|---|---:|---:|---:|---|---|---|"]
        for d in m["other_readers"]:
            if not d["replayed"]:
                lines.append(f"| `{d['run']}` | `{d['copy_of']}` | {_reader(d)} | not replayed: "
                             f"{d['why']} | | | | | | | |")
                continue
            o = d["objective"]
            lines.append(f"| `{d['run']}` | `{d['copy_of']}` | {_reader(d)} | `{d['zero_shot']}` "
                         f"| {o['metric']} | {o['n']} | {_f(o['compiled'])} "
                         f"| {_f(o['zero_shot'])} | {_f(o['diff'], sign=True)} {_ci(o['ci95'])} "
                         f"| {_refusal(o)} | {o['interval']} |")
    if m["not_replayed_artifacts"]:
        lines += ["", "Compiled ASQA artifacts stored with no stored evaluation rows (nothing "
                  "to replay): " + "; ".join(
                      f"`{a['artifact']}` ({a['program']}, {a['optimizer']}, objective "
                      f"{a['metric']}, trained on {a['train']})"
                      for a in m["not_replayed_artifacts"]) + "."]
    if notes:
        lines += ["", "Notes:", ""] + [f"- {n}" for n in notes]
    lines += ["", f"Left out: `{'/`, `'.join(m['excluded'])}/` (not read: runs in progress, "
              "made after the guard existed)."]
    return "\n".join(lines) + "\n"


def _strict(x: Any) -> Any:
    """``x`` with NaN and infinities as null (strict JSON: a missing interval is null)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _strict(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_strict(v) for v in x]
    return x


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=OUT, help=f"output stem (default {OUT}.{{md,json}})")
    ap.add_argument("--reader", default=PREFERRED_READER,
                    help="replay the copies read by this reader where a run has several "
                         f"(default {PREFERRED_READER}, the shipped one)")
    args = ap.parse_args(argv)
    from ambiqa.fsutil import atomic_write_json, atomic_write_text

    m = measure(ROOT, refs=load_references, reader=args.reader)
    out = Path(args.out) if Path(args.out).is_absolute() else ROOT / args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    text = render(m)
    atomic_write_json(out.with_suffix(".json"), _strict(m))
    atomic_write_text(out.with_suffix(".md"), text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
