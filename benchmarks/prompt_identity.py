"""Did a code change alter what the LM sees? Two git revisions, the same questions, a fake LM.

Issue 46 asks whether zero-shot Diva regressed between the code of 2026-11-26 and today, or
whether the gap is the LM's sampling (Diva decodes at temperature 0.3 and the embedded engine
draws a fresh seed per run). This answers the first half without an LM: each revision is
checked out in a temporary git worktree and runs ``ambiqa evaluate PROGRAM --data SPEC
--index NAME`` against the fake OpenAI-compatible server of :mod:`ambiqa.testing_server`,
whose replies are a pure function of the request. Every request body (messages, temperature,
output cap, stop sequences) is logged. If the two revisions send the same multiset of requests,
nothing in the code between them -- prompts, demos, passages, budgets, decoding settings --
changes what the LM is asked; a difference in quality between runs of the two revisions with
the real LM then comes from the LM side (sampling, engine), not from ambiqa's code. If they
differ, the first differing request of each signature is printed as a diff.

The order of requests is not compared (concurrent calls arrive in either order), and the
fake replies follow the requests, so a difference upstream changes everything downstream: the
report shows the first differing request per signature.

    python -m benchmarks.prompt_identity --old 56c8e60 --new HEAD --program diva \\
        --data asqa:dev:10 --index wiki-dense

Writes ``benchmarks/results/prompt-identity/<old>-<new>-<program>.md`` (temp file + rename).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "prompt-identity"

#: a fake server that appends every request body to a file (run in a subprocess)
_SERVER = """
import importlib.util, sys, time
spec = importlib.util.spec_from_file_location("fake_server", sys.argv[2])  # stdlib only
ts = importlib.util.module_from_spec(spec); spec.loader.exec_module(ts)
log = open(sys.argv[1], "a", encoding="utf-8")
pick = ts.pick_fault
def logged(raw, faults):
    log.write(raw.decode("utf-8") + "\\n"); log.flush()
    return pick(raw, faults)
ts.pick_fault = logged
url, stop = ts.serve(delay=0.0)
print(url, flush=True)
time.sleep(3600)
"""


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def run_side(rev: str, args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    """Check ``rev`` out, run the evaluation against a logging fake server, return requests."""
    tree = work / f"tree-{rev}"
    git("worktree", "add", "--detach", "-f", str(tree), rev)
    log = work / f"requests-{rev}.jsonl"
    env = {**os.environ, "AMBIQA_NO_PROBE": "1"}
    server = subprocess.Popen([sys.executable, "-c", _SERVER, str(log),
                               str(ROOT / "ambiqa" / "testing_server.py")], env=env,
                              stdout=subprocess.PIPE, text=True)
    try:
        url = server.stdout.readline().strip() if server.stdout else ""
        env = {**env, "PYTHONPATH": str(tree)}
        env.setdefault("AMBIQA_DATA", str(ROOT.parent / "shared" / "data"))
        cmd = [sys.executable, "-m", "ambiqa.cli", "evaluate", args.program, "--data", args.data,
               "--index", args.index, "--lm", "openai/fake", "--api-base", url, "--no-cache",
               "--metrics", "str-em", "--threads", "1", "--out", str(work / f"run-{rev}")]
        done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{rev}: evaluate failed ({done.returncode}):\n"
                             + done.stderr[-2000:])
    finally:
        server.kill()
        git("worktree", "remove", "--force", str(tree))
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line]


def signature_of(request: dict[str, Any]) -> str:
    """The first output field named in the system message stands for the signature."""
    system = str((request.get("messages") or [{}])[0].get("content", ""))
    outputs = False
    for line in system.splitlines():
        outputs = outputs or line.strip().startswith("Your output fields are:")
        if outputs and line.strip().startswith("1. `"):
            return line.strip().split("`")[1]
    return "?"


def compare(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> dict[str, Any]:
    key = lambda r: json.dumps(r, sort_keys=True)  # noqa: E731
    a, b = Counter(map(key, old)), Counter(map(key, new))
    only_old = [json.loads(k) for k in (a - b).elements()]
    only_new = [json.loads(k) for k in (b - a).elements()]
    diffs: dict[str, str] = {}
    for r in only_old:
        sig = signature_of(r)
        twin = next((n for n in only_new if signature_of(n) == sig), None)
        if sig in diffs or twin is None:
            continue
        left = json.dumps(r, indent=1, sort_keys=True).splitlines()
        right = json.dumps(twin, indent=1, sort_keys=True).splitlines()
        diffs[sig] = "\n".join(list(difflib.unified_diff(left, right, "old", "new",
                                                         lineterm="", n=1))[:40])
    settings = sorted({json.dumps({k: v for k, v in r.items() if k != "messages"},
                                  sort_keys=True) for r in old + new})
    return {"requests_old": len(old), "requests_new": len(new), "identical": a == b,
            "only_old": len(only_old), "only_new": len(only_new), "diffs": diffs,
            "settings": settings,
            "signatures": dict(Counter(signature_of(r) for r in new))}


def render(args: argparse.Namespace, old_sha: str, new_sha: str, res: dict[str, Any]) -> str:
    lines = [f"# Prompt identity: {args.program} at {old_sha} against {new_sha}", "",
             f"`python -m benchmarks.prompt_identity --old {args.old} --new {args.new} "
             f"--program {args.program} --data {args.data} --index {args.index}` -- the fake "
             "LM (replies are a function of the request), no real LM call.", "",
             f"- requests: {res['requests_old']} (old) / {res['requests_new']} (new); "
             f"by first output field: {res['signatures']}",
             f"- the same multiset of requests (messages, temperature, output cap, stop): "
             f"**{'yes' if res['identical'] else 'no'}**"
             + ("" if res["identical"] else
                f" ({res['only_old']} only in old, {res['only_new']} only in new)"),
             "- request settings seen: " + "; ".join(f"`{s}`" for s in res["settings"]), ""]
    for sig, diff in res["diffs"].items():
        lines += [f"## first differing request for `{sig}`", "", "```diff", diff, "```", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True, help="git revision of the old side")
    ap.add_argument("--new", default="HEAD", help="git revision of the new side (HEAD)")
    ap.add_argument("--program", default="diva")
    ap.add_argument("--data", default="asqa:dev:10")
    ap.add_argument("--index", default="wiki-dense")
    args = ap.parse_args(argv)
    old_sha, new_sha = (git("rev-parse", "--short", r) for r in (args.old, args.new))
    with tempfile.TemporaryDirectory(prefix="ambiqa-prompt-identity-") as tmp:
        old = run_side(old_sha, args, Path(tmp))
        new = run_side(new_sha, args, Path(tmp))
    res = compare(old, new)
    text = render(args, old_sha, new_sha, res)
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{old_sha}-{new_sha}-{args.program}.md"
    tmp_path = path.with_suffix(".md.tmp")
    tmp_path.write_text(text, encoding="utf-8")
    tmp_path.replace(path)
    print(text)
    return 0 if res["identical"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
