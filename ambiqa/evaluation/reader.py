"""Readers for Disambig-F1: extract a short answer to a question from a long answer.

ASQA's Disambig-F1 asks a reading-comprehension model each disambiguated question against
the system's long answer. The official reader is RoBERTa-large fine-tuned on SQuAD 2.0. No
model hub is reachable here, so three readers exist and every report names the one it used
(``reader.name``):

* :class:`~ambiqa.evaluation.extractive.ExtractiveReader` -- the default: all-MiniLM-L6-v2
  with a span head trained on ASQA, HotpotQA and AmbigNQ *training* data. The default one,
  ``extractive:minilm-asqa-v4``, ships with ambiqa (:mod:`ambiqa.evaluation.shipped_reader`
  installs it into the cache on first use); ``ambiqa reader train`` trains others. Deterministic,
  no LM call, reads long contexts in strides. Name ``extractive:<checkpoint dir name>``.
* :class:`HFQAReader` -- any other local extractive QA checkpoint directory (e.g. a
  RoBERTa-large SQuAD2 copy the user already has), run the way the ASQA scorer runs it: the
  transformers question-answering pipeline with the "no answer" option enabled (which strides
  over long contexts too). Name ``hf:<dirname>``.
* :class:`LMReader` -- a stand-in: the configured (or given) DSPy LM asked to copy a short
  answer from the context, or say "unknown". Name ``lm-reader:<model id>``. It costs one LM
  call per disambiguated question and lets the program's LM grade itself; used only when asked
  for with ``--reader lm``.

Scores from any of them are not comparable to published D-F1 numbers (a different reader).
An empty answer means "no answer", like a SQuAD 2.0 reader's null prediction.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ambiqa.errors import ConfigError, ModelError
from ambiqa.evaluation import extractive as ex
from ambiqa.evaluation.shipped_reader import ensure_installed
from ambiqa.lm import lm_id
from ambiqa.lm.failures import lm_failure_in
from ambiqa.signatures.answering import ReadShortAnswer
from ambiqa.tracing import record_event
from ambiqa.types import SharedResource

#: replies of the LM reader that mean "the context does not say"
_NO_ANSWER = frozenset({"", "unknown", "none", "n/a", "na", "no answer", "not mentioned",
                        "not stated", "null"})


@runtime_checkable
class Reader(Protocol):
    """Extracts a short answer to ``question`` from ``context`` ("" = no answer)."""

    name: str

    def answer(self, question: str, context: str) -> str: ...


class HFQAReader(SharedResource):
    """An extractive QA checkpoint from a local directory (never downloaded).

    Runs transformers' question-answering pipeline on CPU with ``handle_impossible_answer``
    on, as the ASQA scorer does with its RoBERTa-large SQuAD2 reader: when the model prefers
    the null span, the answer is "". Shared (not copied) when a program or metric is
    deep-copied, and calls are serialized because the pipeline is not thread-safe.
    """

    def __init__(self, checkpoint_dir: str | Path, *, max_answer_len: int = 30) -> None:
        path = Path(checkpoint_dir).expanduser()
        if not path.is_dir():
            raise ModelError(f"reader checkpoint directory not found: {path}",
                             hint="pass a local extractive QA checkpoint (config.json, weights, "
                                  "tokenizer), build one with `ambiqa reader train`, or use "
                                  "--reader lm for the LM stand-in reader")
        try:
            from transformers import (
                AutoConfig,
                AutoModelForQuestionAnswering,
                AutoTokenizer,
                pipeline,
            )

            config = AutoConfig.from_pretrained(path, local_files_only=True)
        except (OSError, ValueError) as exc:
            raise ModelError(f"{path} is not a transformers checkpoint: {exc}",
                             hint="the directory needs a config.json written by "
                                  "save_pretrained()") from exc
        archs = list(getattr(config, "architectures", None) or [])
        if not any(a.endswith("ForQuestionAnswering") for a in archs):
            raise ModelError(
                f"{path} is not an extractive QA checkpoint (architectures: "
                f"{', '.join(archs) or 'none'})",
                hint="use a model fine-tuned for question answering (e.g. SQuAD 2.0); a base "
                     "encoder would get an untrained answer head and read at random")
        try:
            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
            model = AutoModelForQuestionAnswering.from_pretrained(path, local_files_only=True)
        except (OSError, ValueError) as exc:
            raise ModelError(f"cannot load the QA checkpoint in {path}: {exc}",
                             hint="check that the weights and tokenizer files are complete"
                             ) from exc
        model.eval()
        self._pipe: Any = pipeline("question-answering", model=model, tokenizer=tokenizer,
                                   device=-1)
        self._lock = threading.Lock()
        self.max_answer_len = max_answer_len
        self.path = path
        self.name = f"hf:{path.name}"

    def answer(self, question: str, context: str) -> str:
        if not str(context or "").strip() or not str(question or "").strip():
            return ""
        with self._lock:
            out = self._pipe(question=question, context=context,
                             handle_impossible_answer=True, max_answer_len=self.max_answer_len)
        if isinstance(out, list):  # the pipeline returns a list when top_k > 1
            out = out[0] if out else {"answer": ""}
        return str(out.get("answer", "")).strip()


class LMReader:
    """Stand-in reader: the LM copies a short answer from the context (``ReadShortAnswer``).

    ``lm`` is the DSPy LM to use; if omitted, the LM configured when the reader is made (or,
    failing that, at call time) is used. Calls run with DSPy tracing switched off, so when
    this reader scores a program inside a teleprompter, its own predictor never lands in the
    bootstrapped traces. An unparseable reply or "unknown" becomes "" (no answer), recorded as
    a trace event.
    """

    def __init__(self, lm: Any = None) -> None:
        import dspy

        self.lm = lm if lm is not None else dspy.settings.lm
        self.read = dspy.Predict(ReadShortAnswer)

    def _active_lm(self) -> Any:
        import dspy

        return self.lm if self.lm is not None else dspy.settings.lm

    @property
    def name(self) -> str:
        lm = self._active_lm()
        return f"lm-reader:{lm_id(lm) if lm is not None else 'unconfigured'}"

    def answer(self, question: str, context: str) -> str:
        import dspy
        from dspy.utils.exceptions import AdapterParseError

        if not str(context or "").strip() or not str(question or "").strip():
            return ""
        lm = self._active_lm()
        if lm is None:
            raise ConfigError("the LM reader has no LM",
                              hint="configure an LM (ambiqa.configure(ambiqa.make_lm())) or "
                                   "pass a QA checkpoint as the reader")
        try:
            with dspy.context(lm=lm, trace=None):
                pred = self.read(question=question, context=context)
        except (AdapterParseError, ValueError) as exc:
            # an LM that gave no reply fails the question (issue 33); only a reply that
            # does not parse is scored as no answer
            if (cause := lm_failure_in(exc.__cause__ or exc.__context__)) is not None:
                raise cause from exc
            record_event("reader", f"degraded: {type(exc).__name__}: {str(exc)[:200]}")
            return ""
        text = " ".join(str(pred.answer or "").split()).strip()
        if text.lower().strip(" .\"'") in _NO_ANSWER:
            return ""
        return text


def make_reader(checkpoint: str | None = None, *, lm: Any = None) -> Reader:
    """The reader for Disambig-F1.

    ``checkpoint``:

    * ``None`` or ``""`` -- the shipped extractive reader (``extractive:minilm-asqa-v4``,
      :func:`~ambiqa.evaluation.extractive.default_reader_dir`, installed into the cache from
      the package on first use). The LM stand-in is never a silent fallback: a missing or
      corrupt default is an error;
    * ``"lm"`` -- the LM stand-in (:class:`LMReader`, with ``lm`` or the configured LM);
    * ``"extractive"`` / ``"extractive:NAME"`` -- a reader trained here, by name in the cache;
    * a directory -- a reader trained here (it has a ``reader_manifest.json``) or any local
      extractive QA checkpoint (:class:`HFQAReader`).

    A missing or corrupt checkpoint raises ModelError naming the path and the command that
    builds it.
    """
    spec = "" if checkpoint is None else str(checkpoint).strip()
    if spec.lower() == "lm":
        return LMReader(lm)
    if not spec:
        default = ex.default_reader_dir()
        ensure_installed(default)
        return ex.ExtractiveReader(default)
    if spec.lower() == "extractive" or spec.lower().startswith("extractive:"):
        name = spec.partition(":")[2].strip() or ex.default_reader_dir().name
        path = Path(name).expanduser() if ("/" in name or name.startswith("~")) \
            else ex.readers_dir() / name
        ensure_installed(path)
        return ex.ExtractiveReader(path)
    path = Path(spec).expanduser()
    if ex.is_reader_checkpoint(path):
        return ex.ExtractiveReader(path)
    if not path.exists():
        raise ModelError(f"reader checkpoint directory not found: {path}",
                         hint=f"build a reader with `{ex.BUILD_COMMAND} --out {path}`, pass "
                              "a local extractive QA checkpoint directory, or --reader lm for "
                              "the LM stand-in")
    return HFQAReader(path)


def reader_identity(reader: Any) -> dict[str, Any]:
    """What read D-F1, for run.json and reports: the reader's name, its kind, and for a
    trained extractive reader the sha256 of its weights -- a name alone does not say which
    weights (a checkpoint rebuilt on another machine keeps the name, not the numbers)."""
    name = getattr(reader, "name", None) or type(reader).__name__
    if isinstance(reader, LMReader):
        return {"name": name, "kind": "lm",
                "note": "LM stand-in: the configured LM reads the answers (not comparable "
                        "with runs read by an extractive reader)"}
    manifest = getattr(reader, "manifest", None) or {}
    weights = (manifest.get("weights") or {}).get("sha256") if isinstance(manifest, dict) \
        else None
    out: dict[str, Any] = {"name": name, "kind": "extractive" if weights else "checkpoint"}
    if weights:
        out["weights_sha256"] = weights
    return out


def stand_in_note(reader: Any, explicit: bool) -> str | None:
    """The one line a run prints when D-F1 is read by the LM stand-in although nobody asked
    for it (an API caller passed an LMReader without saying so); None otherwise."""
    if not isinstance(reader, LMReader) or explicit:
        return None
    return ("note: D-F1/DR are read by the LM stand-in (the LM under test grades its own "
            "answers), so these scores are not comparable with BENCHMARKS.md; pass --reader lm "
            "to say you mean it, or leave --reader out for the shipped extractive reader")
