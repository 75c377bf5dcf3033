"""Time one streamed answer from a running ``ambiqa serve``: ``POST /v1/answer/stream`` read
as server-sent events (issue 43). Prints JSON: seconds to the headers, to the first event of
each kind (``first_answer_s`` is the time to the first token of the answer), to the end;
the answer chunks with their arrival times, the answer and the server's own timings.

    python -m benchmarks.serve_stream http://127.0.0.1:8765 "What is Mercury?"
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any


def read_stream(url: str, question: str, timeout_s: float = 600.0) -> dict[str, Any]:
    """One streamed answer from ``url`` (the server's base URL), timed."""
    import httpx

    start = time.perf_counter()
    marks: dict[str, float] = {}
    chunks: list[tuple[float, str]] = []
    name, end_event, end_data = None, None, {}
    with httpx.stream("POST", url.rstrip("/") + "/v1/answer/stream",
                      json={"question": question}, timeout=timeout_s) as reply:
        marks["headers_s"] = time.perf_counter() - start
        if reply.status_code != 200:
            reply.read()
            return {"status": reply.status_code, "detail": reply.json().get("detail")}
        for line in reply.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                now = time.perf_counter() - start
                data = json.loads(line[6:])
                marks.setdefault(f"first_{name}_s", now)
                if name == "answer":
                    chunks.append((round(now, 3), data["text"]))
                elif name in ("done", "error"):
                    end_event, end_data = name, data
    marks["total_s"] = time.perf_counter() - start
    trace = end_data.get("trace") or {}
    return {"status": 200, "end": end_event,
            "marks": {k: round(v, 3) for k, v in marks.items()},
            "answer_chunks": len(chunks), "chunks": chunks,
            "answer": end_data.get("answer", end_data.get("detail")),
            "server_stream": end_data.get("stream"),
            "trace": {k: trace.get(k) for k in ("lm_calls", "input_tokens", "output_tokens",
                                                "wall_s")}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="the server, e.g. http://127.0.0.1:8765")
    parser.add_argument("question")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds (600)")
    args = parser.parse_args(argv)
    print(json.dumps(read_stream(args.url, args.question, args.timeout), indent=1,
                     ensure_ascii=False))


if __name__ == "__main__":
    main()
