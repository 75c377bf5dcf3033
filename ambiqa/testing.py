"""A scripted fake LM for testing ambiqa programs exactly, through the real ``dspy.LM`` path.

``ScriptedLM`` answers each predictor call by running a handler chosen by the signature that
made the call, so a test states what each step "says" and then checks the program's control
flow (how many calls, which path, which passages cited). It is a real DSPy custom engine:
requests go through ``dspy.LM``, the ChatAdapter formats and parses, callbacks and cost
tracing fire, exactly as with the embedded model.

    lm = scripted_lm({
        "ClarifyFromPassages": lambda inp: {"pairs": [{"question": "Q1?", "answer": "A",
                                                        "passage": 1}]},
        "WriteLongAnswer": {"long_answer": "Q is ambiguous..."},
    })
    with dspy.context(lm=lm): ...

A handler is a dict of output values, a callable ``inputs -> dict`` (``inputs`` maps each
input field name to its rendered text), a list (consumed in order; the last repeats) or an
exception instance to raise, or a raw string sent as the reply as-is (for
unparseable output). ``lm.engine.calls`` records ``(signature, inputs)`` per call.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

Handler = Mapping[str, Any] | Callable[[dict[str, str]], Any] | list | str | Exception

_FIELD = re.compile(r"\[\[ ## (\w+) ## \]\]")


def parse_fields(text: str) -> dict[str, str]:
    """Split a ChatAdapter message into ``{field: value}``."""
    out: dict[str, str] = {}
    parts = _FIELD.split(text)
    for i in range(1, len(parts) - 1, 2):
        out[parts[i]] = parts[i + 1].strip()
    return out


class ScriptedEngine:
    """DSPy 3.4 custom engine that dispatches on the calling signature's name."""

    supports_response_schema = False

    def __init__(self, handlers: Mapping[str, Handler], *, delay_s: float = 0.0,
                 default: Handler | None = None) -> None:
        self.handlers = dict(handlers)
        self.default = default
        self.delay_s = delay_s
        self.calls: list[tuple[str, dict[str, str]]] = []
        self._lock = threading.Lock()
        self._cursor: dict[str, int] = {}
        self._signatures: dict[str, str] | None = None

    def _signature_of(self, system: str) -> str:
        """Find which handler's signature wrote this system prompt.

        DSPy puts the signature's instructions (its docstring) into the system message; the
        handler key is the Signature class name, so look the class up once and match its
        instructions. Falls back to matching the key text itself.
        """
        with self._lock:  # concurrent first calls must not see a half-built table
            if self._signatures is None:
                table = {}
                for key in self.handlers:
                    instructions = _instructions_for(key)
                    if instructions:
                        table[key] = instructions
                self._signatures = table
        best, best_len = "", -1
        flat = " ".join(system.split())
        for key, instructions in self._signatures.items():
            if instructions and instructions in flat and len(instructions) > best_len:
                best, best_len = key, len(instructions)
        if best:
            return best
        for key in self.handlers:
            if key in system:
                return key
        return ""

    def _next(self, key: str) -> Handler | None:
        handler = self.handlers.get(key, self.default)
        if isinstance(handler, list):
            with self._lock:
                i = self._cursor.get(key, 0)
                self._cursor[key] = i + 1
            return handler[min(i, len(handler) - 1)]
        return handler

    def complete(self, request: Any) -> Any:
        from dspy.lm15 import Message, Response, TextPart, Usage

        system = request.system if isinstance(request.system, str) else "".join(
            getattr(p, "text", "") or "" for p in (request.system or ()))
        # With demos, several user turns exist; the last one holds this call's inputs.
        user = request.messages[-1].text or ""
        system_all = system + "\n" + (request.messages[0].text or "")
        key = self._signature_of(system_all)
        inputs = parse_fields(user)
        with self._lock:
            self.calls.append((key, inputs))
        if self.delay_s:
            time.sleep(self.delay_s)
        handler = self._next(key)
        if handler is None:
            raise AssertionError(f"ScriptedLM has no handler for signature {key or '?'}")
        if isinstance(handler, Exception):
            raise handler
        if isinstance(handler, str):
            values: Any = handler
        else:
            values = handler(inputs) if callable(handler) else dict(handler)
        if isinstance(values, str):  # raw text: lets fault tests send unparseable output
            text = values
        else:
            # The same layout ChatAdapter asks real models for.
            chunks = []
            for name, value in values.items():
                rendered = value if isinstance(value, str) else _render(value)
                chunks.append(f"[[ ## {name} ## ]]\n{rendered}")
            chunks.append("[[ ## completed ## ]]")
            text = "\n\n".join(chunks)
        n_in = sum(len((m.text or "").split()) for m in request.messages) + len(system.split())
        return Response(id=None, model="scripted", message=Message.assistant(TextPart(text)),
                        finish_reason="stop",
                        usage=Usage(input_tokens=n_in, output_tokens=len(text.split())))

    def stream(self, request: Any):
        from dspy.lm15 import response_to_events

        return response_to_events(self.complete(request))

    def close(self) -> None:
        pass

    def count(self, signature: str) -> int:
        return sum(1 for k, _ in self.calls if k == signature)


def _render(value: Any) -> str:
    import json

    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int | float):
        return str(value)
    if hasattr(value, "model_dump"):
        value = value.model_dump()
    if isinstance(value, list):
        value = [v.model_dump() if hasattr(v, "model_dump") else v for v in value]
    return json.dumps(value, ensure_ascii=False)


def _instructions_for(name: str) -> str:
    """Instructions of the ambiqa Signature class called ``name`` (searched in signatures)."""
    import importlib
    import pkgutil

    import ambiqa.signatures as pkg

    for info in pkgutil.iter_modules(pkg.__path__):
        mod = importlib.import_module(f"ambiqa.signatures.{info.name}")
        cls = getattr(mod, name, None)
        if cls is not None and hasattr(cls, "instructions"):
            return " ".join(str(cls.instructions).split())
    return ""


def scripted_lm(handlers: Mapping[str, Handler], *, delay_s: float = 0.0,
                default: Handler | None = None, policy: Any = None,
                sleep: Callable[[float], None] | None = None, cache: bool = False) -> Any:
    """A ``dspy.LM`` whose engine is a :class:`ScriptedEngine` (no cache, no retries).

    With ``policy`` (an :class:`ambiqa.lm.RetryPolicy`) the engine sits behind the same
    :class:`ambiqa.lm.ResilientEngine` as the real LMs, so fault tests exercise the real
    timeout and retry code; ``sleep`` replaces its backoff wait (tests record, not wait).
    ``lm.engine.calls`` and ``lm.engine.count`` reach the scripted engine either way.
    """
    import dspy

    engine: Any = ScriptedEngine(handlers, delay_s=delay_s, default=default)
    if policy is not None:
        from ambiqa.lm import ResilientEngine

        engine = ResilientEngine(engine, policy, model="scripted/fake",
                                 **({"sleep": sleep} if sleep is not None else {}))
    return dspy.LM("scripted/fake", engine=engine, cache=cache, num_retries=0)


class RecordingRetriever:
    """Wrap a retriever and remember every query it is asked (to pin retrieval control flow)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = getattr(inner, "name", "recording")
        self.queries: list[str] = []
        self._lock = threading.Lock()

    @property
    def fingerprint(self) -> str:
        return self.inner.fingerprint

    def search(self, query: str, k: int = 5) -> list:
        with self._lock:
            self.queries.append(query)
        return self.inner.search(query, k)

    def batch_search(self, queries: list[str], k: int = 5) -> list:
        return [self.search(q, k) for q in queries]

    def get(self, pid: str) -> Any:
        return self.inner.get(pid)

    def __deepcopy__(self, memo: dict) -> RecordingRetriever:
        return self


def titles_as_answers(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """A deterministic fake clarifier: one DQ/DA pair per passage (first two), answer = title.

    Its output depends on what was retrieved, so tests can tell a program that read its
    passages from one that did not.
    """
    lines = [ln for ln in inputs["passages"].splitlines() if ln.startswith("[")]
    pairs = []
    for i, ln in enumerate(lines[:2], start=1):
        title = ln.split("]", 1)[1].split(":", 1)[0].strip()
        pairs.append({"question": f"{inputs['question']} ({title})", "answer": title,
                      "passage": i})
    return {"pairs": pairs}


def vanilla_rag_lm(**kwargs: Any) -> Any:
    """A scripted LM that runs VanillaRAG end to end (clarify by titles, echo a long answer)."""
    return scripted_lm({
        "ClarifyFromPassages": titles_as_answers,
        "WriteLongAnswer": lambda inp: {"long_answer": "Answers: " + inp["interpretations"]},
    }, **kwargs)
