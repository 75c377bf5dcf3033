"""Load test of ``ambiqa serve`` on loopback, bounded in requests and seconds.

    python -m benchmarks.serve_load                       # fake LM levels + embedded 0.5B
    python -m benchmarks.serve_load --embedded-requests 0 # fake LM only (~5 min)

What it does:

1. builds a tiny set-up in a temporary directory: a BM25 index over the bundled demo corpus and
   a ``vanilla_rag`` artifact (k=3, no optimizer) that names it;
2. starts the fake OpenAI-compatible server (:mod:`ambiqa.testing_server`, its own
   process) with a fixed delay per call, and ``ambiqa serve`` (its own process) in front of it
   with ``--concurrency SLOTS`` and DSPy's response cache off;
3. measures a *direct* in-process call of the same artifact against the same fake server
   (no HTTP, no admission): its p50 is the service time one slot needs per request;
4. sends REQUESTS requests at client concurrency 1, 4 and 16 (a thread per client, one
   keep-alive connection each, distinct questions): errors, p50 / p95 latency, requests/s
   against what the endpoint's concurrency allows (``min(c, SLOTS) / direct p50``), and the
   server's overhead per request two ways -- served p50 at c=1 minus direct p50, and per
   request the client's latency minus the program's own wall time reported in its trace;
5. starts ``ambiqa serve`` with the embedded model and sends a few requests through it.

Raw output: ``benchmarks/results/serve/serve_load.json`` and ``serve_load.md`` (the table with
the command beside it). Every process it starts is stopped when it ends, also on error.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
INDEX_NAME = "serve-demo-bm25"


# ---- set-up --------------------------------------------------------------------------------
def build_demo_artifact(workdir: Path) -> tuple[Path, Path]:
    """A BM25 index over the demo corpus and a vanilla_rag artifact naming it.

    Returns ``(artifact, index_root)``; serve it with ``AMBIQA_INDEX_ROOT=index_root``.
    """
    from ambiqa.data import demo_corpus_path, load_corpus
    from ambiqa.optimizers.artifact import save_artifact
    from ambiqa.programs.vanilla_rag import VanillaRAG
    from ambiqa.retrieval.bm25 import BM25Retriever
    from ambiqa.retrieval.factory import describe

    index_root = workdir / "indexes"
    retriever = BM25Retriever.build(load_corpus(demo_corpus_path()), index_root / INDEX_NAME)
    info = {**describe(retriever), "kind": "bm25", "index": INDEX_NAME}
    manifest = {"program": "vanilla_rag", "program_config": {"k": 3},
                "ambiqa_version": "0.1.0", "lm": "none", "retriever": info,
                "metric": "d-f1", "optimizer": {"name": "none"},
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    artifact = save_artifact(workdir / "vanilla_rag-demo.json", VanillaRAG(retriever, k=3),
                             manifest)
    return artifact, index_root


def questions(n: int) -> list[str]:
    """``n`` distinct questions: the demo questions, numbered once they repeat."""
    from ambiqa.data import load_dataset

    base = [ex.question for split in ("demo:train", "demo:dev") for ex in load_dataset(split)]
    return [q if i < len(base) else f"{q} (variant {i // len(base)})"
            for i, q in enumerate(base[i % len(base)] for i in range(n))]


def start_fake_server(delay: float, max_seconds: float) -> tuple[subprocess.Popen, str]:
    """The fake OpenAI-compatible server in its own process; returns it and its api_base."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ambiqa.testing_server", "--delay", str(delay),
         "--max-concurrent", "64", "--max-seconds", str(max_seconds)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True)
    url = (proc.stdout.readline() if proc.stdout else "").strip()
    if not url.startswith("http://127.0.0.1:"):
        proc.kill()
        raise RuntimeError(f"fake server did not start (said {url!r})")
    return proc, url


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_serve(artifact: Path, index_root: Path, lm_args: list[str], extra: list[str],
                log_path: Path, ready_s: float = 300.0,
                niceness: int = 0) -> tuple[subprocess.Popen, str, list]:
    """``ambiqa serve`` in its own process on a free loopback port; waits for /readyz.
    ``niceness`` lowers its CPU priority (the embedded model's part shares the machine)."""
    port = free_port()
    cmd = [sys.executable, "-m", "ambiqa.cli", "serve", str(artifact), "--port", str(port),
           "--log-level", "warning", *lm_args, *extra]
    env = {**os.environ, "AMBIQA_INDEX_ROOT": str(index_root)}
    log = open(log_path, "w")  # noqa: SIM115 - closed by stop()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                            preexec_fn=(lambda: os.nice(niceness)) if niceness else None)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + ready_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.close()
            raise RuntimeError(f"ambiqa serve exited with {proc.returncode}: "
                               f"{log_path.read_text()[-2000:]}")
        try:
            if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                return proc, url, [log]
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    stop(proc, [log])
    raise RuntimeError(f"ambiqa serve not ready within {ready_s:.0f} s")


def stop(proc: subprocess.Popen, files: list | None = None) -> int | None:
    """SIGTERM (the server drains in-flight requests), then SIGKILL after 30 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for f in files or []:
        f.close()
    return proc.returncode


# ---- measuring -----------------------------------------------------------------------------
def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds a process has used (Linux ``/proc``; ``None`` elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def allowed_rps(n: int, concurrency: int, slots: int, service_s: float) -> float:
    """The most requests/s a closed loop of ``concurrency`` clients sending ``n`` requests can
    get from an endpoint with ``slots`` slots and ``service_s`` seconds per request: the
    requests go in ``ceil(n / min(concurrency, slots))`` rounds of one service time each."""
    lanes = min(concurrency, slots)
    return n / (-(-n // lanes) * service_s)


def pct(values: list[float], q: float) -> float:
    """The q-quantile (nearest rank) of ``values``; NaN when empty."""
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * len(s) + 0.5) - 1))]


def direct_calls(artifact: Path, index_root: Path, api_base: str, qs: list[str]) -> list[float]:
    """Seconds per in-process call of the same artifact against the same fake server."""
    import dspy

    from ambiqa.lm import make_lm, trace_callback
    from ambiqa.optimizers.artifact import load_artifact
    from ambiqa.retrieval.factory import open_retriever
    from ambiqa.tracing import UsageTap

    lm = make_lm("openai/fake", api_base=api_base, cache=False)
    program = load_artifact(artifact, retriever=open_retriever(f"bm25:{INDEX_NAME}",
                                                                root=index_root))
    out = []
    with dspy.context(lm=lm, callbacks=[trace_callback()], usage_tracker=UsageTap()):
        program(question="warm-up: who wrote Little Women?")
        for q in qs:
            t0 = time.perf_counter()
            pred = program(question=q)
            out.append(time.perf_counter() - t0)
            if not str(pred.answer).strip():
                raise RuntimeError(f"direct call gave an empty answer for {q!r}")
    return out


def load_level(url: str, qs: list[str], concurrency: int, max_seconds: float,
               timeout_s: float) -> dict[str, Any]:
    """Send every question once with ``concurrency`` client threads; per-request records."""
    records: list[dict[str, Any]] = []
    lock = threading.Lock()
    cursor = iter(range(len(qs)))
    t_start = time.perf_counter()
    stopped_early = threading.Event()

    def client() -> None:
        with httpx.Client(timeout=timeout_s) as http:
            while True:
                with lock:
                    i = next(cursor, None)
                if i is None:
                    return
                if time.perf_counter() - t_start > max_seconds:
                    stopped_early.set()
                    return
                t0 = time.perf_counter()
                rec: dict[str, Any] = {"i": i}
                try:
                    r = http.post(url + "/v1/answer", json={"question": qs[i]})
                    rec["status"] = r.status_code
                    if r.status_code == 200:
                        body = r.json()
                        rec["program_s"] = body["trace"]["wall_s"]
                        rec["lm_calls"] = body["trace"]["lm_calls"]
                        rec["ok"] = bool(body["answer"].strip())
                    else:
                        rec["detail"] = r.text[:300]
                except httpx.HTTPError as exc:
                    rec["status"] = 0
                    rec["detail"] = f"{type(exc).__name__}: {exc}"
                rec["latency_s"] = time.perf_counter() - t0
                with lock:
                    records.append(rec)

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t_start
    ok = [r for r in records if r.get("status") == 200 and r.get("ok")]
    lat = [r["latency_s"] for r in ok]
    overhead = [r["latency_s"] - r["program_s"] for r in ok]
    return {"concurrency": concurrency, "sent": len(records), "ok": len(ok),
            "errors": len(records) - len(ok),
            "error_samples": [r for r in records if r not in ok][:5],
            "wall_s": wall, "rps": len(ok) / wall if wall else 0.0,
            "p50_s": pct(lat, 0.5), "p95_s": pct(lat, 0.95),
            "overhead_vs_trace_p50_ms": pct(overhead, 0.5) * 1000,
            "lm_calls_per_request": statistics.mean(r["lm_calls"] for r in ok) if ok else 0,
            "stopped_early": stopped_early.is_set(), "records": records}


# ---- report --------------------------------------------------------------------------------
def render_md(result: dict[str, Any]) -> str:
    cfg = result["config"]
    lines = [
        "# ambiqa serve: load test on loopback", "",
        f"Command: `{result['command']}`  ",
        f"Machine: {result['machine']}; run {result['started']}.", "",
        f"Fake OpenAI-compatible LM, {cfg['delay_s']} s per call; `ambiqa serve "
        f"--concurrency {cfg['slots']}` (vanilla_rag, k=3, BM25 over the demo corpus, "
        "2 LM calls per request, response cache off). Direct in-process call of the same "
        f"artifact: p50 {result['direct']['p50_s'] * 1000:.1f} ms, p95 "
        f"{result['direct']['p95_s'] * 1000:.1f} ms (n={result['direct']['n']}).", "",
        "| client concurrency | requests | errors | p50 ms | p95 ms | req/s | allowed req/s "
        "| ratio | overhead p50 ms (latency − program wall) | serve CPU ms/request "
        "| load avg (start, end) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for lv in result["levels"]:
        lines.append(
            f"| {lv['concurrency']} | {lv['sent']} | {lv['errors']} | {lv['p50_s'] * 1000:.1f} "
            f"| {lv['p95_s'] * 1000:.1f} | {lv['rps']:.2f} | {lv['allowed_rps']:.2f} "
            f"| {lv['ratio']:.3f} | {lv['overhead_vs_trace_p50_ms']:.1f} "
            f"| {_num(lv.get('serve_cpu_ms_per_request'))} "
            f"| {', '.join(str(x) for x in lv.get('loadavg_1min', []))} |")
    lines += ["", "Allowed req/s: a closed loop of c clients sending n requests to an endpoint "
                  "with s slots needs ceil(n / min(c, s)) rounds of one direct-call p50 each; "
                  "ratio = measured / allowed (target ≥ 0.9). Serve CPU: user+system seconds of "
                  "the `ambiqa serve` process during the level, per request (LiteLLM, DSPy, "
                  "HTTP). Load average: the whole machine's (2 cores, shared)."]
    ov = result["overhead"]
    lines += ["", f"Server overhead per request at concurrency 1: served p50 − direct p50 = "
                  f"**{ov['served_minus_direct_p50_ms']:.1f} ms** (target ≤ 5 ms); "
                  f"latency − program wall time, p50 = {ov['latency_minus_program_p50_ms']:.1f}"
                  " ms (HTTP, JSON, admission and the thread hand-offs, measured per request "
                  "against the program's own trace). The first figure compares two processes "
                  "whose p50s each move by a few ms from run to run on this shared machine, so "
                  "a negative value means no overhead visible above that noise.", ""]
    emb = result.get("embedded")
    if emb:
        if "error" in emb:
            lines += [f"Embedded model: not measured ({emb['error']})."]
        else:
            lines += [
                f"Embedded model `{emb['lm']}` ({emb['slots']} slots), {emb['sent']} requests "
                f"at client concurrency {emb['concurrency']}: {emb['errors']} errors, p50 "
                f"{emb['p50_s']:.1f} s, p95 {emb['p95_s']:.1f} s, {emb['rps'] * 3600:.0f} "
                f"questions/hour, overhead (latency − program wall) p50 "
                f"{emb['overhead_vs_trace_p50_ms']:.1f} ms."]
    return "\n".join(lines) + "\n"


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--delay", type=float, default=0.5, help="fake LM seconds per call (0.5)")
    p.add_argument("--requests", type=int, default=200, help="requests per level (200)")
    p.add_argument("--levels", default="1,4,16", help="client concurrencies (1,4,16)")
    p.add_argument("--slots", type=int, default=16, help="ambiqa serve --concurrency (16)")
    p.add_argument("--direct", type=int, default=40, help="direct in-process calls (40)")
    p.add_argument("--max-seconds", type=float, default=420.0,
                   help="stop sending at a level after this long (420)")
    p.add_argument("--embedded-requests", type=int, default=10)
    p.add_argument("--embedded-concurrency", type=int, default=2)
    p.add_argument("--embedded-model", default="qwen2.5-coder-0.5b",
                   help="embedded model for the last part (default the fast 0.5B)")
    p.add_argument("--embedded-nice", type=int, default=10,
                   help="niceness of the embedded model's server (10: the machine is shared)")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "serve"))
    args = p.parse_args(argv)
    if args.requests < 1 or args.requests > 1000:
        p.error("--requests must be 1..1000")
    levels = [int(x) for x in args.levels.split(",") if x.strip()]
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    command = "python -m benchmarks.serve_load" + (
        " " + shlex.join(argv if argv is not None else sys.argv[1:])
        if (argv if argv is not None else sys.argv[1:]) else "")
    result: dict[str, Any] = {
        "command": command, "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{os.cpu_count()} CPU cores (shared), Python {sys.version.split()[0]}",
        "config": {"delay_s": args.delay, "requests": args.requests, "levels": levels,
                   "slots": args.slots, "max_seconds": args.max_seconds}}
    with tempfile.TemporaryDirectory(prefix="serve-load-") as tmp:
        work = Path(tmp)
        artifact, index_root = build_demo_artifact(work)
        qs = questions(args.requests * len(levels) + args.direct)
        fake, api_base = start_fake_server(args.delay, max_seconds=3 * 3600)
        serve = None
        try:
            print(f"fake LM at {api_base} ({args.delay} s per call)", flush=True)
            d = direct_calls(artifact, index_root, api_base, qs[:args.direct])
            result["direct"] = {"n": len(d), "p50_s": pct(d, 0.5), "p95_s": pct(d, 0.95),
                                "mean_s": statistics.mean(d)}
            print(f"direct in-process: p50 {result['direct']['p50_s'] * 1000:.1f} ms", flush=True)
            serve, url, files = start_serve(
                artifact, index_root, ["--lm", "openai/fake", "--api-base", api_base,
                                       "--no-cache"],
                ["--concurrency", str(args.slots), "--queue", "1024", "--timeout", "120"],
                work / "serve-fake.log")
            result["levels"] = []
            used = args.direct
            for c in levels:
                cpu0, load0 = cpu_seconds(serve.pid), os.getloadavg()[0]
                lv = load_level(url, qs[used:used + args.requests], c, args.max_seconds, 180)
                cpu1 = cpu_seconds(serve.pid)
                used += args.requests
                lv["allowed_rps"] = allowed_rps(lv["sent"], c, args.slots,
                                                result["direct"]["p50_s"])
                lv["ratio"] = lv["rps"] / lv["allowed_rps"]
                lv["serve_cpu_ms_per_request"] = (
                    (cpu1 - cpu0) * 1000 / max(lv["sent"], 1)
                    if cpu0 is not None and cpu1 is not None else None)
                lv["loadavg_1min"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
                result["levels"].append(lv)
                print(f"c={c}: {lv['ok']}/{lv['sent']} ok, p50 {lv['p50_s'] * 1000:.1f} ms, "
                      f"p95 {lv['p95_s'] * 1000:.1f} ms, {lv['rps']:.2f} req/s "
                      f"(ratio {lv['ratio']:.3f})", flush=True)
            first = next(lv for lv in result["levels"] if lv["concurrency"] == 1) \
                if 1 in levels else result["levels"][0]
            result["overhead"] = {
                "served_minus_direct_p50_ms": (first["p50_s"] - result["direct"]["p50_s"]) * 1e3,
                "latency_minus_program_p50_ms": first["overhead_vs_trace_p50_ms"]}
            result["serve_exit_code"] = stop(serve, files)
            serve = None
        finally:
            if serve is not None:
                stop(serve)
            stop(fake)
        if args.embedded_requests > 0:
            result["embedded"] = embedded_part(artifact, index_root, args, qs, work)
    for lv in result.get("levels", []):
        lv["records"] = lv["records"]  # kept: raw per-request latencies in the JSON
    (out_dir / "serve_load.json").write_text(json.dumps(result, indent=1, default=str))
    (out_dir / "serve_load.md").write_text(render_md(result))
    print(render_md(result))
    errors = sum(lv["errors"] for lv in result.get("levels", []))
    return 1 if errors else 0


def embedded_part(artifact: Path, index_root: Path, args: argparse.Namespace, qs: list[str],
                  work: Path) -> dict[str, Any]:
    """A few requests through ``ambiqa serve`` with the embedded model."""
    lm = f"embedded:{args.embedded_model}"
    try:
        serve, url, files = start_serve(artifact, index_root, ["--lm", lm, "--no-cache"],
                                        ["--queue", "64", "--timeout", "600"],
                                        work / "serve-embedded.log", ready_s=600,
                                        niceness=args.embedded_nice)
    except RuntimeError as exc:
        return {"lm": lm, "error": str(exc)[:500]}
    try:
        slots = httpx.get(url + "/readyz", timeout=5).json()["slots"]
        lv = load_level(url, qs[-args.embedded_requests:], args.embedded_concurrency, 1800, 900)
    finally:
        stop(serve, files)
    lv.update({"lm": lm, "slots": slots})
    print(f"embedded {lm}: {lv['ok']}/{lv['sent']} ok, p50 {lv['p50_s']:.1f} s", flush=True)
    return lv


if __name__ == "__main__":
    sys.exit(main())
