"""The embedded GGUF behind llama.cpp's own HTTP server, used as an OpenAI-compatible LM.

Two uses:

``python -m benchmarks.llama_server serve [--model qwen2.5-coder-0.5b] [--port N]``
    Start llama.cpp's HTTP server (the one xllamacpp ships: ``xllamacpp.Server`` listens on
    ``hostnames``:``port``) on 127.0.0.1 with the model ambiqa assembles, the same slots,
    threads, context and prompt cache as the in-process engine, and an API key read from
    ``$LLAMA_SERVER_API_KEY`` (one is generated and printed when unset: the server is never
    open without one). Prints ``READY <api_base>`` once ``/health`` answers, then serves
    until SIGTERM/SIGINT. Any ambiqa command then uses it with
    ``--lm openai/qwen2.5-coder-0.5b --api-base <api_base> --api-key-env LLAMA_SERVER_API_KEY``.

``python -m benchmarks.llama_server [--n 6] [--threads 1,2,4]``
    Questions per hour of ``vanilla_rag`` (BM25 over the shared corpus, ASQA dev questions)
    with 1, 2 and 4 client threads, through the server and through the in-process engine,
    on the same questions. Each (engine, threads) pair runs in a fresh process (and, for
    the server, a fresh server), so no prompt cache carries over; the model is loaded and
    one short warm-up call made before the clock starts. Both sides get the same output caps
    and stop sequence (the in-process engine's defaults; the endpoint path does not apply
    them by itself, so the benchmark sets them on its engine), so the comparison is the
    transport -- HTTP + JSON + a separate process -- not the amount generated. Results go to
    ``benchmarks/results/llama-server/`` (JSON and a Markdown table), each pair as it
    finishes; a rerun skips pairs already measured with the same settings.

Run it when no other LM job is running (``ps aux | grep -v grep | grep -c ambiqa``): on two
shared cores any other job changes the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT_DIR = ROOT / "benchmarks" / "results" / "llama-server"
KEY_ENV = "LLAMA_SERVER_API_KEY"
ENGINES = ("in-process", "server")


# ---- the server ------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_params(model: str, port: int, api_key: str, slots: int, threads: int) -> Any:
    """xllamacpp parameters mirroring :class:`ambiqa.lm.embedded.XLlamaEngine`'s, plus the
    HTTP listener on 127.0.0.1:``port`` guarded by ``api_key``."""
    import xllamacpp

    from ambiqa.lm.embedded import EmbeddedSettings
    from ambiqa.lm.models import assemble_model

    settings = EmbeddedSettings(model=model, n_threads=threads, n_parallel=slots)
    p = xllamacpp.CommonParams()
    p.model.path = str(assemble_model(model))
    p.n_ctx = settings.n_ctx * slots
    p.n_parallel = slots
    p.kv_unified = False
    p.cont_batching = True
    p.cpuparams.n_threads = threads
    p.cpuparams_batch.n_threads = threads
    p.cache_ram_mib = settings.cache_ram_mib
    p.hostnames = ["127.0.0.1"]
    p.port = port
    p.api_keys = [api_key]
    p.endpoint_metrics = False
    p.endpoint_slots = False
    p.verbosity = -1
    p.warmup = False
    return p


def wait_ready(api_base: str, timeout_s: float = 120.0) -> None:
    """Block until ``GET /health`` answers 200 (the model is loaded)."""
    url = api_base.rsplit("/v1", 1)[0] + "/health"
    end = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError) as exc:
            last = exc
        time.sleep(0.2)
    raise TimeoutError(f"llama.cpp server at {url} not ready after {timeout_s:g} s: {last}")


def serve(model: str, port: int, slots: int, threads: int) -> int:
    """Run llama.cpp's HTTP server in this process until SIGTERM/SIGINT."""
    import xllamacpp

    key = os.environ.get(KEY_ENV)
    if not key:
        key = secrets.token_urlsafe(24)
        print(f"{KEY_ENV} was unset; this server's key: {key}", flush=True)
    port = port or free_port()
    server = xllamacpp.Server(server_params(model, port, key, slots, threads))
    api_base = f"http://127.0.0.1:{port}/v1"
    wait_ready(api_base)
    print(f"READY {api_base}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    del server
    return 0


class ServerProcess:
    """``python -m benchmarks.llama_server serve`` as a child process (a real, separate
    server: the client reaches it only over HTTP)."""

    def __init__(self, model: str, slots: int = 2, threads: int = 2,
                 env: dict[str, str] | None = None) -> None:
        self.key = secrets.token_urlsafe(24)
        child_env = {**(env or os.environ), KEY_ENV: self.key,
                     "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.llama_server", "serve", "--model", model,
             "--slots", str(slots), "--threads", str(threads)],
            cwd=ROOT, env=child_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True)
        self.api_base = self._wait_for_ready()

    def _wait_for_ready(self, timeout_s: float = 180.0) -> str:
        end = time.monotonic() + timeout_s
        seen: list[str] = []
        while time.monotonic() < end:
            line = self.proc.stdout.readline()
            if not line:
                if self.proc.poll() is not None:
                    break
                continue
            seen.append(line)
            if line.startswith("READY "):
                threading.Thread(target=self._drain, daemon=True).start()
                return line.split()[1]
        self.stop()
        raise RuntimeError("llama.cpp server did not start:\n" + "".join(seen[-30:]))

    def _drain(self) -> None:
        for _ in iter(self.proc.stdout.readline, ""):
            pass

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ---- the benchmark -------------------------------------------------------------------------
def _retriever() -> Any:
    from ambiqa.data import default_data_root
    from ambiqa.data.corpus import load_corpus
    from ambiqa.retrieval.bm25 import BM25Retriever

    root = default_data_root()
    if root is None:
        raise SystemExit("the shared data (corpus, ASQA) is needed: set AMBIQA_DATA")
    return BM25Retriever.in_memory(load_corpus(root / "corpus" / "wiki_passages.jsonl"))


def run_one(engine: str, threads: int, n: int, data: str, model: str, slots: int,
            lm_threads: int) -> dict[str, Any]:
    """One (engine, client threads) measurement in this process."""
    from ambiqa.cli.common import metric_fns
    from ambiqa.data import load_dataset
    from ambiqa.evaluation.runs.runner import evaluate
    from ambiqa.lm import configure
    from ambiqa.lm.embedded import EmbeddedSettings
    from ambiqa.lm.factory import embedded_lm, endpoint_lm
    from ambiqa.programs.registry import build_program

    examples = load_dataset(data)[:n]
    program = build_program("vanilla_rag", retriever=_retriever())
    server = None
    if engine == "in-process":
        lm = embedded_lm(EmbeddedSettings(model=model, n_threads=lm_threads, n_parallel=slots),
                         cache=False)
    else:
        server = ServerProcess(model, slots=slots, threads=lm_threads)
        os.environ[KEY_ENV] = server.key
        lm = endpoint_lm(f"openai/{model}", api_base=server.api_base, api_key_env=KEY_ENV,
                         cache=False, timeout=600.0)
        # the in-process engine's output caps and stop sequence, so both generate alike
        lm.engine.output_caps = True
        lm.engine.stop_at_marker = True
    try:
        configure(lm)
        t0 = time.perf_counter()
        lm("Say OK.")  # loads the model (in-process) / opens the connection (server)
        warm_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        summary = evaluate(program, examples, metric_fns(["str-em", "rouge-l"], None),
                           threads=threads, progress=False, max_error_rate=1.0)
        seconds = time.perf_counter() - t0
    finally:
        if server is not None:
            server.stop()
    return {"engine": engine, "threads": threads, "n": len(examples), "seconds": round(seconds, 1),
            "questions_per_hour": round(len(examples) / seconds * 3600, 1),
            "errors": summary["n_errors"], "warm_up_s": round(warm_s, 1),
            "lm_calls_per_q": round(summary["cost"]["lm_calls"], 2),
            "output_tokens_per_q": round(summary["cost"]["output_tokens"], 1),
            "input_tokens_per_q": round(summary["cost"]["input_tokens"], 1),
            "str_em": round(summary["metrics"]["str-em"]["mean"], 4),
            "rouge_l": round(summary["metrics"]["rouge-l"]["mean"], 4),
            "load_avg_1m": round(os.getloadavg()[0], 1)}


def render(results: dict[str, Any]) -> str:
    s = results["settings"]
    lines = [
        "# llama.cpp's HTTP server as the LM, against the in-process engine",
        "",
        f"`python -m benchmarks.llama_server --n {s['n']}`: vanilla_rag, BM25 over the shared "
        f"corpus, the first {s['n']} questions of {s['data']}, model {s['model']}, "
        f"{s['slots']} slots and {s['lm_threads']} threads on both sides, same output caps "
        f"and stop sequence, no response cache, a fresh process (and server) per row; "
        f"{results['environment']['cpus']} CPUs. `load avg` is the machine's 1-minute load "
        "average when the row finished (other jobs shared the 2 cores).",
        "",
        "| client threads | engine | questions/hour | seconds | errors | LM calls/q "
        "| output tok/q | STR-EM | ROUGE-L | load avg |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    rows = sorted(results["rows"].values(), key=lambda r: (r["threads"], r["engine"]))
    for r in rows:
        lines.append(f"| {r['threads']} | {r['engine']} | {r['questions_per_hour']} "
                     f"| {r['seconds']} | {r['errors']} | {r['lm_calls_per_q']} "
                     f"| {r['output_tokens_per_q']} | {r['str_em']} | {r['rouge_l']} "
                     f"| {r.get('load_avg_1m', '-')} |")
    by = {(r["engine"], r["threads"]): r for r in rows}
    ratios = [f"{t} thread(s): {by[('server', t)]['questions_per_hour'] / by[('in-process', t)]['questions_per_hour']:.2f}"  # noqa: E501
              for t in sorted({r["threads"] for r in rows})
              if ("server", t) in by and ("in-process", t) in by]
    if ratios:
        lines += ["", "server / in-process questions per hour: " + "; ".join(ratios) + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command")
    sv = sub.add_parser("serve", help="run llama.cpp's HTTP server until SIGTERM")
    one = sub.add_parser("one", help="measure one (engine, threads) pair; prints JSON")
    for p in (ap, sv, one):
        p.add_argument("--model", default="qwen2.5-coder-0.5b")
        p.add_argument("--slots", type=int, default=2)
        p.add_argument("--threads", default="1,2,4" if p is ap else "2",
                       help="client threads (benchmark) / LM threads (serve)")
        p.add_argument("--lm-threads", type=int, default=2)
    sv.add_argument("--port", type=int, default=0)
    for p in (ap, one):
        p.add_argument("--n", type=int, default=6)
        p.add_argument("--data", default="asqa:dev")
    one.add_argument("--engine", choices=ENGINES, required=True)
    ap.add_argument("--out", default=str(OUT_DIR))
    ap.add_argument("--engines", default=",".join(ENGINES),
                    help="engines in the order they run at each thread count (reverse it in "
                         "a second pass to see the machine's drift)")
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args(argv)
    os.environ.setdefault("AMBIQA_CACHE", str(ROOT / ".ambiqa-cache"))
    if args.command == "serve":
        return serve(args.model, args.port, args.slots, int(args.threads))
    if args.command == "one":
        row = run_one(args.engine, int(args.threads), args.n, args.data, args.model,
                      args.slots, args.lm_threads)
        print("RESULT " + json.dumps(row), flush=True)
        return 0

    from ambiqa.fsutil import atomic_write_json, atomic_write_text

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "llama_server.json"
    settings = {"n": args.n, "data": args.data, "model": args.model, "slots": args.slots,
                "lm_threads": args.lm_threads, "program": "vanilla_rag", "retriever": "bm25"}
    results: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
    if results.get("settings") != settings or args.force:
        results = {"settings": settings, "rows": {}}
    results["environment"] = {"cpus": os.cpu_count(), "machine": platform.machine(),
                              "python": sys.version.split()[0]}
    for t in (int(x) for x in str(args.threads).split(",") if x.strip()):
        for engine in [e.strip() for e in args.engines.split(",") if e.strip() in ENGINES]:
            key = f"{engine}@{t}"
            if key in results["rows"]:
                print(f"{key}: measured already (--force to redo)", flush=True)
                continue
            print(f"{key}: running ...", flush=True)
            res = subprocess.run(
                [sys.executable, "-m", "benchmarks.llama_server", "one", "--engine", engine,
                 "--threads", str(t), "--n", str(args.n), "--data", args.data,
                 "--model", args.model, "--slots", str(args.slots),
                 "--lm-threads", str(args.lm_threads)],
                cwd=ROOT, capture_output=True, text=True, timeout=7200)
            lines = [ln for ln in res.stdout.splitlines() if ln.startswith("RESULT ")]
            if res.returncode != 0 or not lines:
                print(f"{key} failed:\n{res.stdout[-2000:]}\n{res.stderr[-3000:]}", flush=True)
                return 1
            results["rows"][key] = json.loads(lines[-1][len("RESULT "):])
            print(json.dumps(results["rows"][key]), flush=True)
            atomic_write_json(path, results)
            atomic_write_text(out / "llama_server.md", render(results))
    atomic_write_text(out / "llama_server.md", render(results))
    print(render(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
