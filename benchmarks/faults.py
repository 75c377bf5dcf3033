"""Run the fault suite (tests/faults) and write the fault table for BENCHMARKS.md.

    python -m benchmarks.faults                      # run the suite, write the table
    python -m benchmarks.faults --junit report.xml   # only tabulate an existing JUnit report
                                                     # (of tests/faults or the whole suite)

Each test in tests/faults carries ``pytest.mark.fault(CLASS)`` and may record JUnit
properties: ``runs`` (kill/resume seeds a test went through), ``data_lost`` (rows, artifacts,
index states or trials that differ from an uninterrupted reference run -- missing, doubled or
different -- *computed* by the test before it asserts there are none) and
``generated_inputs`` (inputs hypothesis generated for a property test, counted as the test
body runs). The table counts, per fault class: tests (one per test case, parametrized cases
included; seeds are not counted as tests), tests passed, kill/resume runs, generated inputs,
and data lost (the sum of the computed counts; a failed integrity test that recorded none
shows "?", never a guess). Output: ``benchmarks/results/faults.md``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "faults.md"
ORDER = ["LM faults", "Retriever / index faults", "Kill and resume", "Run directory",
         "Bad inputs", "Artifacts / security", "Concurrency"]
INTEGRITY = {"Kill and resume", "Concurrency", "Run directory"}

NOT_HANDLED = [
    ("An embedded-LM call past its deadline keeps running in the background",
     "llama.cpp cannot be interrupted from Python; the caller stops waiting (the question "
     "fails with a timeout and the run goes on), but the abandoned generation holds the "
     "model's one slot until it ends (bounded by max_tokens), so the next call may wait for "
     "it."),
    ("A dead endpoint stops `evaluate` after 4 of 4 failed questions, not after all of them",
     "the --max-error-rate guard (default 0.5, checked once 4 rows exist) stops the run and "
     "names how many were not run; with --max-error-rate 1 every question is tried and the "
     "run exits 1 with failed = N. `--resume --retry-errors` redoes both kinds."),
    ("The run-directory lock on network file systems",
     "the lock is fcntl.flock on OUT/.lock; NFS and some FUSE mounts may not honour flock "
     "between machines, so two hosts writing one --out are not refused there."),
    ("Credentials printed by third-party libraries",
     "ambiqa redacts URL credentials in every event, error row, run.json, report, its own "
     "messages and every Python log record (once an endpoint LM is made); a library that "
     "prints the raw URL to the terminal itself (LiteLLM's verbose mode) is not filtered."),
    ("`ambiqa compile` does not resume mid-run",
     "DSPy's BootstrapFewShot keeps its state in memory; a kill loses the compile's work "
     "(never a half-written artifact: the artifact is written atomically at the end). "
     "`ambiqa tune` is the resumable way to optimize."),
    ("Results equal after a killed `ambiqa tune`: finished trials only",
     "trials killed mid-way stay RUNNING/FAIL and the sampler's later choices can differ, so "
     "the test compares the trials finished before the kill (all must survive unchanged), "
     "the study's integrity, the trial count and the artifact -- not the parameters of "
     "trials run after the resume with an uninterrupted run's."),
    ("A kill inside the index swap's two renames",
     "between moving the old index aside and renaming the new one in (microseconds), the "
     "name is briefly absent; the old copy survives as NAME.old-PID-* but the next build "
     "removes it. Not reproduced by the random-kill test."),
    ("Disk full / read-only file systems, power loss (fsync of directories)",
     "writes are atomic renames of fsynced files, but directory fsync and ENOSPC are not "
     "fault-injected here."),
    ("A resume asking for fewer examples keeps rows past its count, stale or not",
     "`--data x.jsonl:20 --resume` into a run of the first 50 keeps rows 21-50 (the run's "
     "spec keeps the larger count); the runner sees only the first 20 data rows, so it "
     "cannot tell a deleted question from one past the count. A resume over the whole run "
     "drops the rows of deleted questions (results.stale.jsonl)."),
    ("Parts written before data fingerprints merge unchecked for data changes",
     "`ambiqa merge` compares each part's data_sha; parts whose run.json predates it carry "
     "none and are held to the other checks only (slices, overlaps, run.json settings)."),
    ("Malicious colbert-ai index tensors",
     "colbert-ai calls plain torch.load; safe only because torch >= 2.6 defaults to "
     "weights_only=True (pinned 2.13, asserted by a test), not by ambiqa's code."),
]


def run_suite(junit: Path, extra: list[str]) -> float:
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "pytest", "-q", "tests/faults", f"--junitxml={junit}",
           "-o", "junit_family=xunit1", "-p", "no:cacheprovider", *extra]
    subprocess.run(cmd, cwd=ROOT, check=False)
    return time.perf_counter() - t0


def tabulate(junit: Path) -> tuple[dict[str, dict[str, int]], list[str]]:
    rows: dict[str, dict[str, int]] = defaultdict(lambda: {
        "tests": 0, "passed": 0, "skipped": 0, "runs": 0, "generated": 0, "lost": 0,
        "unknown": 0, "integrity": 0})
    failures: list[str] = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        if not str(case.get("classname", "")).startswith("tests.faults."):
            continue  # a report of the whole suite: only the fault suite's cases count here
        props: dict[str, str] = {}
        for p in case.iter("property"):  # a property recorded repeatedly: the last value
            props[p.get("name")] = p.get("value")
        cls = props.get("fault_class", "unclassified")
        row = rows[cls]
        if case.find("skipped") is not None:
            row["skipped"] += 1
            continue
        failed = case.find("failure") is not None or case.find("error") is not None
        row["tests"] += 1
        row["runs"] += int(props.get("runs", 0))
        row["generated"] += int(props.get("generated_inputs", 0))
        if "data_lost" in props:
            row["integrity"] += 1
            row["lost"] += int(props["data_lost"])
        elif failed and cls in INTEGRITY:
            row["unknown"] += 1
        if failed:
            failures.append(f"{case.get('classname')}::{case.get('name')}")
        else:
            row["passed"] += 1
    return rows, failures


def render(rows: dict[str, dict[str, int]], failures: list[str], seconds: float | None) -> str:
    lines = ["| fault class | tests | passed | kill/resume runs | generated inputs | "
             "integrity tests | data lost |", "|---|---:|---:|---:|---:|---:|---:|"]
    keys = ("tests", "passed", "skipped", "runs", "generated", "lost", "unknown", "integrity")
    total = dict.fromkeys(keys, 0)

    def lost(r: dict[str, int]) -> str:
        if not r["integrity"] and not r["unknown"]:
            return "–"  # no test of this class compares data with a reference run
        return f"{r['lost']}" + (f" + {r['unknown']} ?" if r["unknown"] else "")

    for cls in [*ORDER, *sorted(set(rows) - set(ORDER))]:
        if cls not in rows:
            continue
        r = rows[cls]
        skipped = f" ({r['skipped']} skipped)" if r["skipped"] else ""
        lines.append(f"| {cls} | {r['tests']}{skipped} | {r['passed']} | {r['runs'] or '–'} | "
                     f"{r['generated'] or '–'} | {r['integrity'] or '–'} | {lost(r)} |")
        for k in keys:
            total[k] += r[k]
    lines.append(f"| **all** | **{total['tests']}** | **{total['passed']}** | "
                 f"**{total['runs']}** | **{total['generated']}** | **{total['integrity']}** | "
                 f"**{lost(total)}** |")
    out = ["# Fault suite", "",
           "`python -m benchmarks.faults` (runs `pytest tests/faults`). *tests* counts test "
           "cases (each parametrized case once; a kill/resume test's seeds are its *runs*, "
           "not extra tests). *generated inputs* is how many inputs the hypothesis property "
           "tests actually generated and ran (counted in the test bodies). *data lost* is "
           "computed: each integrity test (kill/resume, concurrency, torn-line repair, two "
           "concurrent resumes, retry after a dead endpoint, a partly failing endpoint, a "
           "changed data row) compares what the interrupted-and-resumed (or 8-thread, or "
           "two-process) run holds with an uninterrupted reference and counts missing, "
           "doubled and different rows (for a failing endpoint: questions that met a fault "
           "yet were scored as answered), artifacts, index states or trials. Every kill is "
           "triggered by a mid-work event "
           "(rows partly written, compile-loop LM calls partly served, the index build "
           "directory present, trials partly complete) and the test asserts the process was "
           "still running when killed.", "", *lines, ""]
    if seconds is not None:
        out += [f"Suite wall time: {seconds:.0f} s.", ""]
    if failures:
        out += ["Failed:", "", *[f"- `{f}`" for f in failures], ""]
    out += ["## Faults deliberately not handled (or only partly)", ""]
    out += [f"- **{what}** -- {why}" for what, why in NOT_HANDLED]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--junit", type=Path, default=None,
                    help="tabulate this JUnit XML instead of running the suite")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("pytest_args", nargs="*", help="extra pytest arguments")
    args = ap.parse_args(argv)
    seconds = None
    junit = args.junit
    if junit is None:
        import tempfile

        junit = Path(tempfile.mkdtemp(prefix="ambiqa-faults-")) / "junit.xml"
        seconds = run_suite(junit, args.pytest_args)
    rows, failures = tabulate(junit)
    if seconds is None:  # tabulating a stored report: pytest's own total time
        suite = ET.parse(junit).getroot()
        suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
        seconds = float(suite.get("time", 0)) if suite is not None else None
    text = render(rows, failures, seconds)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(text)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
