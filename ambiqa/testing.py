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

import hashlib
import re
import threading
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

import ambiqa.signatures as pkg
from ambiqa.evaluation.metrics import normalize_answer
from ambiqa.lm import ResilientEngine
from ambiqa.retrieval.base import InMemoryRetriever, TimedSearch, check_query
from ambiqa.types import Passage, SharedResource

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


# --- fake encoders and retrievers ------------------------------------------------------------
# Programs and retrievers take an ``encoder`` (``encode(texts) -> (n, d) array``) and a
# retriever; these fakes stand in for MiniLM and a real index so unit tests need no model and
# know every vector. They share their originals on deep copy, as the real ones do.


def plain_words(text: str) -> list[str]:
    """Lowercased words split at spaces, full stops and apostrophes."""
    return text.lower().replace(".", " ").replace("'", " ").split()


def answer_words(text: str) -> list[str]:
    """The tokens of SQuAD answer normalisation (what the EM/F1 metrics compare)."""
    return normalize_answer(text).split()


def alnum_words(text: str) -> list[str]:
    """Lowercased runs of letters and digits."""
    return "".join(c if c.isalnum() else " " for c in text.lower()).split()


def _md5_bucket(token: str) -> int:
    return int(hashlib.md5(token.encode()).hexdigest(), 16)


def _crc32_bucket(token: str) -> int:
    return zlib.crc32(token.encode())


class HashEncoder(SharedResource):
    """Bag-of-words unit vectors: each token adds 1 at a hashed position (no model needed).

    Texts sharing words get a positive cosine, so ranking by similarity behaves like a real
    encoder on word overlap while every vector stays known. ``calls`` counts ``encode`` calls.
    """

    def __init__(self, dim: int = 64, *, tokenize: Callable[[str], list[str]] = plain_words,
                 hash: str = "md5", name: str = "hash-encoder") -> None:
        if hash not in ("md5", "crc32"):
            raise ValueError(f"hash must be 'md5' or 'crc32', not {hash!r}")
        self.dim, self.tokenize, self.name = dim, tokenize, name
        self._bucket = _md5_bucket if hash == "md5" else _crc32_bucket
        self.calls = 0

    def encode(self, texts: Sequence[str], batch_size: int = 64, **_: Any) -> np.ndarray:
        self.calls += 1
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for token in self.tokenize(text):
                out[row, self._bucket(token) % self.dim] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1.0, norms)


class SeededEncoder(SharedResource):
    """Deterministic random unit vectors seeded by a hash of each whole text (stands in for
    MiniLM where only "some fixed vector per text" matters)."""

    def __init__(self, dim: int = 16) -> None:
        self.dim = dim

    def encode(self, texts: Sequence[str], **_: Any) -> np.ndarray:
        rows = []
        for t in texts:
            seed = int(hashlib.sha256(str(t).encode()).hexdigest()[:8], 16)
            v = np.random.default_rng(seed).standard_normal(self.dim)
            rows.append(v / np.linalg.norm(v))
        return np.asarray(rows, dtype=np.float32).reshape(len(rows), self.dim)


class KeywordEncoder(SharedResource):
    """Maps a text to the vector of the first key (in insertion order) it contains.

    A text with no key gets ``fallback``, or, without one, fails the test (so a test states
    every vector the program asks for). ``calls`` records each batch it was asked to encode.
    """

    def __init__(self, vectors: Mapping[str, Sequence[float]],
                 fallback: Sequence[float] | None = None) -> None:
        self.vectors = {k: np.asarray(v, dtype=np.float32) for k, v in vectors.items()}
        self.fallback = None if fallback is None else np.asarray(fallback, dtype=np.float32)
        self.calls: list[list[str]] = []

    def encode(self, texts: Sequence[str], **_: Any) -> np.ndarray:
        self.calls.append(list(texts))
        rows = []
        for text in texts:
            key = next((k for k in self.vectors if k in text), None)
            if key is not None:
                rows.append(self.vectors[key])
            elif self.fallback is not None:
                rows.append(self.fallback)
            else:
                raise AssertionError(f"no vector for {text!r}")
        if rows:
            return np.stack(rows)
        ref = self.fallback if self.fallback is not None else next(iter(self.vectors.values()),
                                                                    np.zeros(0, np.float32))
        return np.zeros((0, len(ref)), dtype=np.float32)


class CountingRetriever(InMemoryRetriever):
    """An :class:`InMemoryRetriever` that records every ``(query, k)`` it is asked."""

    def __init__(self, passages: Sequence[Passage], *, name: str = "memory",
                 fingerprint: str | None = None) -> None:
        super().__init__(passages)
        self.name = name
        self._fp = fingerprint
        self.calls: list[tuple[str, int]] = []
        self._calls_lock = threading.Lock()

    @property
    def fingerprint(self) -> str:
        return self._fp if self._fp is not None else super().fingerprint

    def search(self, query: str, k: int = 5) -> list[Passage]:
        with self._calls_lock:
            self.calls.append((query, k))
        return super().search(query, k)


class ScriptedRetriever(SharedResource):
    """Returns scripted passage ids per query (``default`` for any other query), scored
    1, 1/2, 1/3, ... by rank, and records every search in ``searches``."""

    name = "recording"
    fingerprint = "recording:test"

    def __init__(self, passages: Mapping[str, Passage], results: Mapping[str, list[str]],
                 default: Sequence[str] = ()) -> None:
        self.passages, self.results, self.default = passages, results, list(default)
        self.searches: list[tuple[str, int]] = []

    def search(self, query: str, k: int = 5) -> list[Passage]:
        query, k = check_query(query, k)
        with TimedSearch(self.name, query, k):
            self.searches.append((query, k))
            ids = self.results.get(query, self.default)[:k]
            return [self.passages[i].with_score(1.0 / (r + 1)) for r, i in enumerate(ids)]

    def batch_search(self, queries: Sequence[str], k: int = 5) -> list[list[Passage]]:
        return [self.search(q, k) for q in queries]

    def get(self, pid: str) -> Passage | None:
        return self.passages.get(pid)


class FixedRetriever(SharedResource):
    """Returns its passages in order (the first ``k``) whatever the query; records every
    ``(query, k)`` in ``calls``."""

    name = "recording"
    fingerprint = "recording:test"

    def __init__(self, passages: list[Passage]) -> None:
        self.passages = passages
        self.calls: list[tuple[str, int]] = []

    def search(self, query: str, k: int = 5) -> list[Passage]:
        with TimedSearch(self.name, query, k):
            self.calls.append((query, k))
            return self.passages[:k]

    def batch_search(self, queries: Sequence[str], k: int = 5) -> list[list[Passage]]:
        return [self.search(q, k) for q in queries]

    def get(self, pid: str) -> Passage | None:
        return next((p for p in self.passages if p.id == pid), None)
