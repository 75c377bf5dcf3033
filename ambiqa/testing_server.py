"""A fake OpenAI-compatible chat-completions server: test support, and the ``fake`` LM of the
cost and latency benchmarks (``python -m ambiqa.testing_server``; stdlib only).

Why: the embedded LM serves one request at a time, so it cannot show whether a program's
independent LM calls really overlap. This server answers every ``POST /v1/chat/completions``
after a fixed delay, on its own thread, so concurrent requests finish together; with it, a
program's wall time approaches its critical path only if its orchestration is concurrent.

Replies are correctly formatted DSPy output for whatever signature asked. DSPy's ChatAdapter
(and JSONAdapter) system message lists the output fields as lines like
``1. `name` (type): description``; for pydantic types it also prints a JSON schema. The server
reads both and writes a plausible value per type:

* ``bool`` -> True or False, decided by a hash of the field name and the request, so a
  program's branches are exercised deterministically (``true_rate`` of them True);
* ``str`` -> a short phrase made from the question, tagged with a digest of the request so
  that different calls give different text (a question mark for question-like fields);
* ``list[str]`` -> two distinct items; arrays of objects (``list[QAPair]``) -> two objects
  filled from their JSON schema (strings, integers 1 and 2, booleans, nested objects);
* ``Literal[...]`` -> the first allowed value other than "None"; ``int`` / ``float`` -> 1.

Layout: ``[[ ## field ## ]]\\nvalue`` blocks ending with ``[[ ## completed ## ]]``, or a JSON
object when the JSONAdapter asked. ``usage`` carries token estimates (characters / 4).

Streaming: ``"stream": true`` gets the reply as OpenAI's server-sent events
(``chat.completion.chunk`` objects, a word or a marker's brackets per chunk, ``--chunk-delay``
seconds apart, then ``data: [DONE]``), so streaming clients are tested offline.

Faults (for the fault suite, ``tests/faults``): ``serve(faults={"500": 0.1, "html": 0.1})``
makes that share of requests misbehave, chosen by a hash of the request body (the same
request always gets the same answer, so a retried call fails again and runs are comparable):
``500`` (HTTP 500 with a JSON error), ``html`` (HTTP 200, ``text/html`` body, as a proxy
page), ``nonjson`` (HTTP 200, a body that is not JSON), ``empty_choices`` (a completion with
``"choices": []``), ``garbage`` (a well-formed completion whose text is in no adapter format:
the one fault a program may answer around), ``null_content`` (a completion whose message has
``"content": null``), ``auth_echo`` (HTTP 401 whose error message repeats the bearer key it
was sent, as some gateways do) and ``500_echo`` (HTTP 500 repeating the key): the last two
prove that no output of ambiqa ever carries a key an endpoint echoes. ``server.faults`` may
be changed while it runs;
``server.faulted`` counts the requests that got a fault. ``port`` picks the port (0: any free
one), so a test can take an endpoint down and bring it back at the same address.

Safety: binds 127.0.0.1 only, on a free port; bodies over 8 MiB are refused; at most
``max_concurrent`` requests are served at once (others get 503); the server stops when
``shutdown()`` is called, when the owning process exits (daemon thread), or, when run as a
script, after ``--max-seconds``.

    url, shutdown = serve(delay=0.5)
    lm = dspy.LM("openai/fake", api_base=url, api_key="not-needed", cache=False,
                 num_retries=0)
    ...
    shutdown()
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_BODY_BYTES = 8 << 20
HOST = "127.0.0.1"  # loopback only, never configurable

_OUTPUT_HEADER = "Your output fields are:"
_FIELD_LINE = re.compile(r"^\s*\d+\.\s+`(\w+)`\s+\(")
_USER_FIELD = re.compile(r"\[\[ ## (\w+) ## \]\]")
_SCHEMA_NOTE = "must adhere to the JSON schema:"
_RESPOND = "Respond with the corresponding output fields"
_QUESTION_FIELDS = ("question", "sub_question", "query", "interpretation", "claim")


# ---- reading the request -------------------------------------------------------------------
def _balanced_type(line: str, start: int) -> str:
    """The type text in ``(...)`` starting at ``start`` (just after the opening bracket),
    respecting nested brackets and quoted Literal values."""
    depth, quote, i = 0, "", start
    while i < len(line):
        ch = line[i]
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                return line[start:i]
            depth -= 1
        i += 1
    return line[start:]


def output_fields(system: str) -> list[tuple[str, str]]:
    """``[(name, type)]`` of the output fields a DSPy system message asks for, in order."""
    at = system.find(_OUTPUT_HEADER)
    if at < 0:
        return []
    fields: list[tuple[str, str]] = []
    for line in system[at + len(_OUTPUT_HEADER):].splitlines():
        if not line.strip():
            continue
        m = _FIELD_LINE.match(line)
        if m is None:
            if fields:  # the list ended (descriptions are single-line in DSPy's layout)
                break
            continue
        fields.append((m.group(1), _balanced_type(line, m.end()).strip()))
    return fields


def field_schema(system: str, name: str) -> dict[str, Any] | None:
    """The JSON schema DSPy printed for output field ``name`` (pydantic types), if any."""
    for m in re.finditer(r"\{" + re.escape(name) + r"\}[^\n]*?" + re.escape(_SCHEMA_NOTE),
                         system):
        text = system[m.end():].lstrip()
        # ChatAdapter prints the schema as is; JSONAdapter inside a JSON string (escaped)
        for candidate in (text, text.replace('\\"', '"')):
            try:
                schema, _ = json.JSONDecoder().raw_decode(candidate)
            except ValueError:
                continue
            if isinstance(schema, dict):
                return schema
    return None


def user_fields(text: str) -> dict[str, str]:
    """``{field: value}`` of a ChatAdapter user message (without DSPy's closing request to
    respond, which follows the last input field)."""
    text = text.split(_RESPOND, 1)[0]
    parts = _USER_FIELD.split(text)
    return {parts[i]: parts[i + 1].strip() for i in range(1, len(parts) - 1, 2)}


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


# ---- making values -------------------------------------------------------------------------
class _Maker:
    """Plausible values for one request; deterministic in the request's content."""

    def __init__(self, question: str, digest: str, true_rate: float) -> None:
        words = re.sub(r"[?.\s]+$", "", " ".join(question.split())).split()
        self.topic = " ".join(words[:12]) or "the topic"
        self.short = " ".join(words[-4:]) or "something"
        self.tag = digest[:6]
        self.digest = digest
        self.true_rate = true_rate

    def boolean(self, name: str) -> bool:
        h = int(hashlib.sha256(f"{name}|{self.digest}".encode()).hexdigest()[:8], 16)
        return (h % 1000) < self.true_rate * 1000

    def phrase(self, name: str, index: int = 0) -> str:
        suffix = f" {index}" if index else ""
        if "question" in name or "interpretation" in name or name == "query":
            return f"{self.topic}, reading {index or 1} ({self.tag})?"
        if "answer" in name:
            return f"{self.short}{suffix} ({self.tag})"
        return f"A {name.replace('_', ' ')} about {self.topic}{suffix} ({self.tag})."

    def from_schema(self, schema: dict[str, Any], defs: dict[str, Any], name: str,
                    index: int = 0) -> Any:
        if "$ref" in schema:
            ref = schema["$ref"].rsplit("/", 1)[-1]
            return self.from_schema(defs.get(ref, {}), defs, name, index)
        for key in ("anyOf", "oneOf", "allOf"):
            if key in schema:
                options = [s for s in schema[key] if s.get("type") != "null"] or schema[key]
                return self.from_schema(options[0], defs, name, index)
        if "enum" in schema:
            return _pick_choice([str(v) for v in schema["enum"]])
        kind = schema.get("type")
        if kind == "object":
            props = schema.get("properties", {})
            return {key: self.from_schema(sub, defs, key, index) for key, sub in props.items()}
        if kind == "array":
            item = schema.get("items", {"type": "string"})
            return [self.from_schema(item, defs, name, i) for i in (1, 2)]
        if kind == "boolean":
            return self.boolean(f"{name}{index}")
        if kind in ("integer", "number"):
            return max(1, index)
        return self.phrase(name, index)

    def value(self, name: str, type_text: str, schema: dict[str, Any] | None) -> Any:
        """A Python value for a field of DSPy type ``type_text``."""
        t = type_text.replace(" ", "")
        if schema is not None:
            return self.from_schema(schema, schema.get("$defs", {}), name)
        if t == "bool":
            return self.boolean(name)
        if t in ("int", "float"):
            return 1
        if t.startswith("Literal["):
            try:
                choices = [str(c) for c in ast.literal_eval(f"[{type_text.strip()[8:-1]}]")]
            except (ValueError, SyntaxError):
                choices = []
            return _pick_choice(choices) if choices else self.phrase(name)
        if t.startswith(("list[", "List[")):
            inner = t[5:-1]
            if inner in ("int", "float"):
                return [1, 2]
            return [self.phrase(name, i) for i in (1, 2)]
        if t.startswith(("dict[", "Dict[")):
            return {"key": self.phrase(name)}
        return self.phrase(name)


def _pick_choice(choices: list[str]) -> str:
    for choice in choices:
        if choice.lower() not in ("none", "null", "n/a"):
            return choice
    return choices[0] if choices else ""


def _chat_render(value: Any) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, ensure_ascii=False)


def make_reply(messages: list[dict[str, Any]], true_rate: float = 0.5,
               want_json: bool = False) -> str:
    """The assistant text DSPy expects for the signature described by ``messages``."""
    system = "\n".join(_text_of(m.get("content")) for m in messages if m.get("role") == "system")
    users = [_text_of(m.get("content")) for m in messages if m.get("role") == "user"]
    last_user = users[-1] if users else ""
    inputs = user_fields(last_user)
    question = next((inputs[k] for k in _QUESTION_FIELDS if inputs.get(k)), "")
    if not question and inputs:
        question = next(iter(inputs.values()))
    digest = hashlib.sha256(last_user.encode()).hexdigest()
    maker = _Maker(question or last_user[:80], digest, true_rate)
    fields = output_fields(system)
    if not fields:
        return "OK"
    values = {name: maker.value(name, type_text, field_schema(system, name))
              for name, type_text in fields}
    if want_json or "Outputs will be a JSON object" in system:
        return json.dumps(values, ensure_ascii=False)
    blocks = [f"[[ ## {name} ## ]]\n{_chat_render(value)}" for name, value in values.items()]
    return "\n\n".join([*blocks, "[[ ## completed ## ]]"])


def stream_pieces(text: str) -> list[str]:
    """``text`` cut where a streaming LM would send its pieces: each word with the space
    before it, and a field marker's brackets apart from its name, so a reader of the stream
    sees markers split across pieces as real models split them. ``"".join`` gives ``text``."""
    return [p for p in re.split(r"(?=\s\S)|(?<=\[\[)|(?=\]\])", text) if p]


def estimate_tokens(text: str) -> int:
    return max(1, len(text) // 4)


# ---- faults --------------------------------------------------------------------------------
#: the fault modes ``serve(faults=...)`` knows
FAULT_MODES = ("500", "html", "nonjson", "empty_choices", "garbage", "null_content",
               "auth_echo", "500_echo")
GARBAGE_TEXT = "Sure! Here is my answer, in no particular format."


def check_faults(faults: dict[str, float] | None) -> dict[str, float]:
    """``{mode: share}`` validated: known modes, shares in [0, 1] summing to at most 1."""
    out = {str(k): float(v) for k, v in (faults or {}).items()}
    for mode, share in out.items():
        if mode not in FAULT_MODES:
            raise ValueError(f"unknown fault {mode!r}; known: {', '.join(FAULT_MODES)}")
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"fault share for {mode} must be within [0, 1], got {share}")
    if sum(out.values()) > 1.0 + 1e-9:
        raise ValueError("fault shares sum to more than 1")
    return out


def pick_fault(raw: bytes, faults: dict[str, float]) -> str | None:
    """The fault for a request body (deterministic in the body), or ``None`` (answer it)."""
    if not faults:
        return None
    u = int(hashlib.sha256(b"fault|" + raw).hexdigest()[:8], 16) / 0x100000000
    edge = 0.0
    for mode in FAULT_MODES:
        edge += faults.get(mode, 0.0)
        if u < edge:
            return mode
    return None


# ---- the HTTP server -----------------------------------------------------------------------
class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128
    allow_reuse_address = False

    def __init__(self, delay: float, max_concurrent: int, true_rate: float, port: int = 0,
                 faults: dict[str, float] | None = None, chunk_delay: float = 0.0) -> None:
        super().__init__((HOST, port), _Handler)
        self.delay = delay
        self.chunk_delay = chunk_delay
        self.streamed = 0  # replies sent as server-sent events
        self.true_rate = true_rate
        self.faults = check_faults(faults)
        self.faulted = 0
        self.slots = threading.BoundedSemaphore(max_concurrent)
        self.served = 0
        self.peak = 0
        self._active = 0
        self._count_lock = threading.Lock()

    def enter(self) -> None:
        with self._count_lock:
            self._active += 1
            self.served += 1
            self.peak = max(self.peak, self._active)

    def leave(self) -> None:
        with self._count_lock:
            self._active -= 1


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: a benchmark prints its own table

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str) -> None:
        self._send(status, {"error": {"message": message, "type": "fake_server_error"}})

    def _raw(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _fault(self, mode: str, body: dict[str, Any]) -> bool:
        """Answer with fault ``mode``; False for ``garbage`` (sent as a normal reply)."""
        with self.server._count_lock:
            self.server.faulted += 1
        if mode == "500":
            self._error(500, "internal server error (injected)")
        elif mode == "html":
            self._raw(200, "text/html", b"<html><head><title>502 Bad Gateway</title></head>"
                                        b"<body><h1>Bad Gateway</h1></body></html>")
        elif mode == "nonjson":
            self._raw(200, "application/json", b"upstream said: not json")
        elif mode in ("auth_echo", "500_echo"):
            sent = self.headers.get("Authorization", "").partition(" ")[2]
            status = 401 if mode == "auth_echo" else 500
            self._error(status, f"Incorrect API key provided: {sent}. You can find your API "
                                f"key at https://example.invalid/keys (key={sent})")
        elif mode == "null_content":
            self._send(200, {"id": "fake-null", "object": "chat.completion",
                             "created": int(time.time()), "model": str(body.get("model")),
                             "choices": [{"index": 0, "finish_reason": "stop",
                                          "message": {"role": "assistant", "content": None}}],
                             "usage": {"prompt_tokens": 1, "completion_tokens": 0,
                                       "total_tokens": 1}})
        elif mode == "empty_choices":
            self._send(200, {"id": "fake-empty", "object": "chat.completion",
                             "created": int(time.time()), "model": str(body.get("model")),
                             "choices": [], "usage": {"prompt_tokens": 1,
                                                      "completion_tokens": 0,
                                                      "total_tokens": 1}})
        else:
            return False
        return True

    def _stream(self, raw: bytes, body: dict[str, Any], text: str, prompt: int,
                completion: int) -> None:
        """The reply as OpenAI's server-sent events: one ``chat.completion.chunk`` per piece
        of :func:`stream_pieces` (``chunk_delay`` seconds apart), a last chunk with the
        finish reason, a usage chunk when ``stream_options.include_usage`` asks, then
        ``data: [DONE]``. The connection closes after it (no length is known up front)."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        base = {"id": f"fake-{hashlib.sha256(raw).hexdigest()[:12]}",
                "object": "chat.completion.chunk", "created": int(time.time()),
                "model": str(body.get("model", "fake"))}

        def event(payload: dict[str, Any]) -> None:
            self.wfile.write(b"data: " + json.dumps({**base, **payload}).encode() + b"\n\n")
            self.wfile.flush()

        try:
            for i, piece in enumerate(stream_pieces(text)):
                if i and self.server.chunk_delay:
                    time.sleep(self.server.chunk_delay)
                delta = {"role": "assistant", "content": piece} if i == 0 else \
                    {"content": piece}
                event({"choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
            event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
            if (body.get("stream_options") or {}).get("include_usage"):
                event({"choices": [], "usage": {"prompt_tokens": prompt,
                                                "completion_tokens": completion,
                                                "total_tokens": prompt + completion}})
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):  # the client stopped reading
            pass
        with self.server._count_lock:
            self.server.streamed += 1

    def do_GET(self) -> None:
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            self._send(200, {"object": "list", "data": [{"id": "fake", "object": "model"}]})
        else:
            self._error(404, f"no route {self.path}")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            self._error(413, "request body too large")
            return
        raw = self.rfile.read(length)
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._error(404, f"no route {self.path}")
            return
        if not self.server.slots.acquire(timeout=30):
            self._error(503, "too many concurrent requests")
            return
        self.server.enter()
        try:
            try:
                body = json.loads(raw or b"{}")
                messages = list(body.get("messages") or [])
            except (ValueError, TypeError, AttributeError):
                self._error(400, "body is not a JSON chat-completions request")
                return
            fmt = body.get("response_format") or {}
            want_json = isinstance(fmt, dict) and fmt.get("type") in ("json_object",
                                                                      "json_schema")
            fault = pick_fault(raw, self.server.faults)
            time.sleep(self.server.delay)
            if fault is not None and self._fault(fault, body):
                return
            text = GARBAGE_TEXT if fault == "garbage" else \
                make_reply(messages, self.server.true_rate, want_json)
            prompt = sum(estimate_tokens(_text_of(m.get("content"))) for m in messages)
            completion = estimate_tokens(text)
            n = max(1, min(int(body.get("n") or 1), 8))
            if body.get("stream"):
                self._stream(raw, body, text, prompt, completion)
                return
            self._send(200, {
                "id": f"fake-{hashlib.sha256(raw).hexdigest()[:12]}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": str(body.get("model", "fake")),
                "choices": [{"index": i, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": text}}
                            for i in range(n)],
                "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                          "total_tokens": prompt + completion},
            })
        finally:
            self.server.leave()
            self.server.slots.release()


def serve(delay: float = 0.5, *, max_concurrent: int = 64, true_rate: float = 0.5,
          port: int = 0, faults: dict[str, float] | None = None, chunk_delay: float = 0.0,
          ) -> tuple[str, Callable[[], None]]:
    """Start the server in a daemon thread; return ``(api_base, shutdown)``.

    A request with ``"stream": true`` is answered with server-sent events, one piece of the
    reply per event, ``chunk_delay`` seconds apart (after ``delay``, the time to the first).

    ``api_base`` ends in ``/v1`` (what LiteLLM's OpenAI client expects). ``shutdown()`` stops
    the server and waits for its thread; calling it twice is harmless.
    """
    if delay < 0:
        raise ValueError("delay must be >= 0")
    if chunk_delay < 0:
        raise ValueError("chunk_delay must be >= 0")
    server = _Server(delay, max_concurrent, true_rate, port=port, faults=faults,
                     chunk_delay=chunk_delay)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                              name="fake-openai-server", daemon=True)
    thread.start()
    stopped = threading.Event()

    def shutdown() -> None:
        if stopped.is_set():
            return
        stopped.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    shutdown.server = server  # type: ignore[attr-defined]  # for stats in tests/benchmarks
    host, port = server.server_address[:2]
    return f"http://{host}:{port}/v1", shutdown


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delay", type=float, default=0.5, help="seconds per reply (0.5)")
    parser.add_argument("--chunk-delay", type=float, default=0.0,
                        help="seconds between the pieces of a streamed reply (0)")
    parser.add_argument("--true-rate", type=float, default=0.5,
                        help="share of bool fields answered True (0.5)")
    parser.add_argument("--max-concurrent", type=int, default=64)
    parser.add_argument("--max-seconds", type=float, default=3600.0,
                        help="stop by itself after this long (3600)")
    parser.add_argument("--port", type=int, default=0, help="port (default: any free one)")
    parser.add_argument("--fault", action="append", default=[], metavar="MODE=SHARE",
                        help=f"inject a fault into SHARE of requests; MODE one of "
                             f"{', '.join(FAULT_MODES)} (repeatable)")
    args = parser.parse_args(argv)
    faults: dict[str, float] = {}
    for item in args.fault:
        mode, _, share = item.partition("=")
        try:
            faults[mode] = float(share)
        except ValueError:
            parser.error(f"--fault {item!r}: expected MODE=SHARE, e.g. 500=0.1")
    try:
        url, shutdown = serve(args.delay, max_concurrent=args.max_concurrent,
                              true_rate=args.true_rate, port=args.port, faults=faults,
                              chunk_delay=args.chunk_delay)
    except ValueError as exc:
        parser.error(str(exc))
    print(url, flush=True)
    try:
        time.sleep(args.max_seconds)
    except KeyboardInterrupt:
        pass
    finally:
        shutdown()


if __name__ == "__main__":
    main()
