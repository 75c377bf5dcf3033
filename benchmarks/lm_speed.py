"""Prefill and decode speed of the embedded GGUF models on this machine.

    python -m benchmarks.lm_speed [--models qwen2.5-coder-0.5b,qwen2.5-coder-1.5b] [--threads 2]

Sends a ~600-token prompt to each model three times through ambiqa's engine (greedy, at most
128 new tokens; the run number comes first so no call reuses a cached prefix) and reports
llama.cpp's own timings: prompt tokens/s (prefill), generated tokens/s (decode) and wall
seconds per call. The models run one after another in one process, so their ratio is
measured side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import ambiqa  # noqa: F401  (environment defaults)
from ambiqa.lm import EmbeddedSettings, XLlamaEngine, assemble_model

PROMPT = ("Summarize the following passages in one paragraph.\n\n" + " ".join(
    f"[{i}] The river town of Example{i} lies on a bend of the valley road; its market, "
    f"founded in the year {1100 + i * 7}, still opens every Saturday morning." for i in range(14)))


def measure(model: str, threads: int, runs: int = 3) -> dict:
    engine = XLlamaEngine(assemble_model(model), EmbeddedSettings(model=model, n_threads=threads))
    t0 = time.perf_counter()
    server = engine._ensure_server()
    load_s = time.perf_counter() - t0
    rows = []
    for i in range(runs):
        # the run number goes first so no call reuses another's cached prompt prefix
        body = {"messages": [{"role": "user", "content": f"Run {i}. " + PROMPT}],
                "max_tokens": 128, "temperature": 0.0}
        t = time.perf_counter()
        out = server.handle_chat_completions(body)
        wall = time.perf_counter() - t
        tm = out["timings"]
        rows.append({"prompt_n": tm["prompt_n"], "prefill_tok_s": tm["prompt_per_second"],
                     "decode_n": tm["predicted_n"], "decode_tok_s": tm["predicted_per_second"],
                     "wall_s": wall})
    return {"model": model, "threads": threads, "load_s": round(load_s, 2),
            "prefill_tok_s": round(statistics.median(r["prefill_tok_s"] for r in rows), 1),
            "decode_tok_s": round(statistics.median(r["decode_tok_s"] for r in rows), 1),
            "prompt_tokens": rows[0]["prompt_n"],
            "decode_tokens": round(statistics.median(r["decode_n"] for r in rows)),
            "wall_s_per_call": round(statistics.median(r["wall_s"] for r in rows), 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="qwen2.5-coder-0.5b,qwen2.5-coder-1.5b")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    results = [measure(m, args.threads) for m in args.models.split(",")]
    print(f"# LM speed ({time.strftime('%Y-%m-%d')}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, {args.threads} threads)\n")
    print("| model | load s | prompt tokens | prefill tok/s | tokens generated | decode tok/s "
          "| wall s/call |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['model']} | {r['load_s']} | {r['prompt_tokens']} | {r['prefill_tok_s']} | "
              f"{r['decode_tokens']} | {r['decode_tok_s']} | {r['wall_s_per_call']} |")
    print("\n" + json.dumps(results))


if __name__ == "__main__":
    main()
