"""The extractive Disambig-F1 reader: span location, striding, checkpoint loading.

ASQA's Disambig-F1 reads each disambiguated question against a long answer with an extractive
SQuAD 2.0 reader (RoBERTa-large in the paper). None can be downloaded here, so the packaged
all-MiniLM-L6-v2 is fine-tuned with a span head on *training* data -- the default reader ships
with ambiqa (:mod:`ambiqa.evaluation.shipped_reader`), ``ambiqa reader train``
(:mod:`ambiqa.reader_training.train`) trains others -- and this module reads with the result.
It is deterministic and costs no LM call, so D-F1 no longer grades a program with
the program's own LM.

Three pieces live here because training and reading must agree on them exactly:

* :func:`locate_answer` -- where a short answer occurs in a context, matched on SQuAD-normalised
  tokens (the scorer's own normalisation) and mapped back to character offsets;
* :func:`windows` -- the question/context token windows. A context (or a question) longer than
  the encoder's window is cut into overlapping windows (``doc_stride`` tokens of overlap) and
  every window is read; nothing is silently truncated;
* :class:`ExtractiveReader` -- loads a checkpoint directory written by the trainer, checks its
  manifest and the sha256 of its weights (a corrupt or half-written checkpoint is refused with
  the path and the command that rebuilds it), and answers "" when the null span wins, like a
  SQuAD 2.0 reader.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ambiqa.errors import ModelError
from ambiqa.fsutil import sha256_file
from ambiqa.jsonio import read_json
from ambiqa.paths import cache_root
from ambiqa.text import PUNCTUATION as _PUNCT  # one SQuAD fold for scoring and labels
from ambiqa.text import squad_word as _norm_word
from ambiqa.tracing import record_compute
from ambiqa.types import SharedResource

#: the manifest that marks a finished reader checkpoint (written last, atomically)
MANIFEST_NAME = "reader_manifest.json"
#: weights file of a reader checkpoint (safetensors only; pickled weights are never read)
WEIGHTS_NAME = "model.safetensors"
#: the checkpoint ``ambiqa reader train`` writes when no --name is given
DEFAULT_READER_NAME = "minilm-asqa"
#: how the user rebuilds the default reader (quoted in every error about a missing one)
BUILD_COMMAND = "ambiqa reader train"
MANIFEST_FORMAT = "ambiqa-extractive-reader/1"

_WORD = re.compile(r"\S+")


def readers_dir() -> Path:
    """Where trained readers live: ``$AMBIQA_CACHE/readers``."""
    return cache_root() / "readers"


#: The reader D-F1 uses by default: the one that ships inside the package
#: (:mod:`ambiqa.evaluation.shipped_reader` installs it into the cache on first use), so a
#: fresh machine reads with the same weights as every stored run. It was chosen on
#: *training-split* validation only (SQuAD 2.0 F1 on the long answers of the last 50 ASQA
#: training questions, benchmarks/results/reader-v4/); ASQA dev only reports.
SHIPPED_NAME = "minilm-asqa-v4"
#: how the user (re)installs the shipped reader
INSTALL_COMMAND = "ambiqa reader install"


def default_reader_dir() -> Path:
    """The checkpoint D-F1 uses by default: ``$AMBIQA_CACHE/readers/minilm-asqa-v4``, the
    shipped reader (:func:`ambiqa.evaluation.reader.make_reader` installs it on first use)."""
    return readers_dir() / SHIPPED_NAME


def is_shipped(path: Path) -> bool:
    """Whether ``path`` is the shipped reader's place in the cache."""
    return path.name == SHIPPED_NAME and path.parent == readers_dir()


# --------------------------------------------------------------------------------------------
# span location
# --------------------------------------------------------------------------------------------


def normalized_tokens(text: str) -> list[tuple[str, int, int]]:
    """``(normalised token, start char, end char)`` for every word that survives
    normalisation; the offsets point into ``text``."""
    out = []
    for m in _WORD.finditer(text):
        tok = _norm_word(m.group())
        if tok:
            out.append((tok, m.start(), m.end()))
    return out


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    """Shrink a span past leading/trailing punctuation and spaces ("(May 2017)," -> "May 2017")."""
    while start < end and (text[start] in _PUNCT or text[start].isspace()):
        start += 1
    while end > start and (text[end - 1] in _PUNCT or text[end - 1].isspace()):
        end -= 1
    return start, end


def locate_answer(context: str, aliases: Sequence[str]) -> tuple[int, int] | None:
    """Character span ``(start, end)`` of the first alias found in ``context``, or None.

    Matching is on SQuAD-normalised tokens (lowercase, no punctuation, no articles), as the
    ASQA scorer compares answers, so "The Beatles" is found in "the beatles'" and "U.S." in
    "US". Among the aliases the earliest occurrence wins (the longest alias on a tie). The span
    runs from the first matched word to the last, trimmed of outer punctuation, so it is a
    substring of ``context`` a SQuAD-style label can point at.
    """
    return locate_answer_in_tokens(context, normalized_tokens(context), aliases)


def locate_answer_in_tokens(context: str, toks: Sequence[tuple[str, int, int]],
                            aliases: Sequence[str]) -> tuple[int, int] | None:
    """:func:`locate_answer` with ``normalized_tokens(context)`` already computed (distant
    supervision reads each corpus passage for many questions)."""
    words = [t[0] for t in toks]
    best: tuple[int, int, int] | None = None  # (position, -alias length, alias index)
    best_span: tuple[int, int] | None = None
    for alias in aliases:
        target = [t for t in (_norm_word(w) for w in str(alias).split()) if t]
        if not target:
            continue
        n = len(target)
        for i in range(len(words) - n + 1):
            if words[i:i + n] == target:
                key = (i, -n, 0)
                if best is None or key < best:
                    best = key
                    s, e = _trim(context, toks[i][1], toks[i + n - 1][2])
                    best_span = (s, e) if e > s else (toks[i][1], toks[i + n - 1][2])
                break
    return best_span


# --------------------------------------------------------------------------------------------
# windows (striding)
# --------------------------------------------------------------------------------------------


@dataclass
class Window:
    """One encoder input: ``[CLS] question-part [SEP] context-part [SEP]``.

    ``offsets[i]`` is the character span in the context of input token ``i`` (``None`` for
    special and question tokens), so a predicted token span maps back to context text.
    """

    input_ids: list[int]
    token_type_ids: list[int]
    offsets: list[tuple[int, int] | None]
    context_start: int  # index of the first context token in input_ids
    context_end: int  # one past the last context token
    meta: dict[str, Any] = field(default_factory=dict)


def _chunks(n: int, size: int, stride: int) -> list[tuple[int, int]]:
    """Overlapping ``[start, end)`` ranges covering ``range(n)``: each window holds ``size``
    items and shares ``stride`` items with the previous one."""
    if n <= size:
        return [(0, n)]
    step = max(1, size - stride)
    out = []
    start = 0
    while True:
        end = min(n, start + size)
        out.append((start, end))
        if end >= n:
            return out
        start += step


def windows(tokenizer: Any, question: str, context: str, *, max_length: int = 384,
            doc_stride: int = 128, max_question_tokens: int = 64) -> list[Window]:
    """Every window needed to read all of ``context`` for ``question``.

    The context is cut into windows of ``max_length - len(question part) - 3`` tokens that
    overlap by ``doc_stride`` tokens (the SQuAD recipe). A question longer than
    ``max_question_tokens`` is itself cut into overlapping parts, and every question part is
    paired with every context window, so a long question is read in full rather than cut.
    """
    # verbose=False: a context longer than the model's window is expected here (it is cut
    # into windows below), so the tokenizer's "sequence too long" warning would mislead.
    q_ids = tokenizer(question, add_special_tokens=False, verbose=False)["input_ids"]
    enc = tokenizer(context, add_special_tokens=False, return_offsets_mapping=True,
                    verbose=False)
    c_ids, c_off = enc["input_ids"], enc["offset_mapping"]
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    q_parts = [q_ids[s:e] for s, e in
               _chunks(len(q_ids), max_question_tokens, max_question_tokens // 2)] or [[]]
    out: list[Window] = []
    for q in q_parts:
        room = max_length - len(q) - 3
        if room < 8:
            raise ValueError(f"max_length {max_length} leaves no room for the context")
        stride = min(doc_stride, room // 2)
        for s, e in _chunks(len(c_ids), room, stride):
            ids = [cls, *q, sep, *c_ids[s:e], sep]
            types = [0] * (len(q) + 2) + [1] * (e - s + 1)
            offsets: list[tuple[int, int] | None] = [None] * (len(q) + 2)
            offsets += [tuple(o) for o in c_off[s:e]]
            offsets.append(None)
            out.append(Window(ids, types, offsets, len(q) + 2, len(q) + 2 + (e - s)))
    return out


def pad_batch(batch: Sequence[Window], pad_id: int) -> dict[str, Any]:
    """Tensors for a batch of windows, padded to the longest one."""
    import torch

    width = max(len(w.input_ids) for w in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    types = torch.zeros((len(batch), width), dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for i, w in enumerate(batch):
        n = len(w.input_ids)
        ids[i, :n] = torch.tensor(w.input_ids)
        types[i, :n] = torch.tensor(w.token_type_ids)
        mask[i, :n] = 1
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}


def best_span(wins: Sequence[Window], start_logits: Any, end_logits: Any, context: str, *,
              max_answer_tokens: int = 30, top_n: int = 20, null_threshold: float = 0.0
              ) -> tuple[str, float, float]:
    """``(answer, best span score, null score)`` over all windows of one question.

    SQuAD 2.0 decision as transformers' question-answering pipeline makes it: the null score
    is the lowest ``start[CLS] + end[CLS]`` over the windows; the answer is "" unless the best
    span in any window beats it by more than ``null_threshold`` (0 = the pipeline's rule; the
    SQuAD 2.0 recipe calibrates it, here on training data, see ``ambiqa reader train``).
    """
    best_text, best_score = "", float("-inf")
    null_score = float("inf")
    for w, s_log, e_log in zip(wins, start_logits, end_logits, strict=True):
        s_log = [float(x) for x in s_log[:len(w.input_ids)]]
        e_log = [float(x) for x in e_log[:len(w.input_ids)]]
        null_score = min(null_score, s_log[0] + e_log[0])
        ctx = range(w.context_start, w.context_end)
        starts = sorted(ctx, key=lambda i: s_log[i], reverse=True)[:top_n]
        ends = sorted(ctx, key=lambda i: e_log[i], reverse=True)[:top_n]
        for i in starts:
            for j in ends:
                if j < i or j - i + 1 > max_answer_tokens:
                    continue
                score = s_log[i] + e_log[j]
                if score > best_score:
                    a, b = w.offsets[i], w.offsets[j]
                    assert a is not None and b is not None
                    best_score, best_text = score, context[a[0]:b[1]]
    if best_score - null_score <= null_threshold:
        return "", best_score, null_score
    return best_text.strip(), best_score, null_score


# --------------------------------------------------------------------------------------------
# checkpoint
# --------------------------------------------------------------------------------------------


def _rebuild_hint(path: Path) -> str:
    """The command that (re)builds the checkpoint at ``path``."""
    if is_shipped(path):
        return f"install it from the package with `{INSTALL_COMMAND} --force`"
    if path.parent != readers_dir():
        return f"build it with `{BUILD_COMMAND} --out {path}`"
    if path.name != DEFAULT_READER_NAME:
        return f"build it with `{BUILD_COMMAND} --name {path.name}`"
    return f"build it with `{BUILD_COMMAND}`"


def read_manifest(path: str | Path) -> dict[str, Any]:
    """The manifest of a finished reader checkpoint; a ModelError naming the path and the
    command that builds it when the directory, the manifest or the weights are missing."""
    path = Path(path).expanduser()
    if not path.is_dir():
        raise ModelError(f"extractive reader not found: {path}", hint=_rebuild_hint(path))
    mpath = path / MANIFEST_NAME
    if not mpath.is_file():
        raise ModelError(f"{path} has no {MANIFEST_NAME} (training unfinished or not an "
                         f"ambiqa reader)", hint=_rebuild_hint(path))
    try:
        manifest = read_json(mpath, error=ModelError, what="reader manifest")
    except ModelError as exc:
        raise ModelError(f"corrupt reader manifest: {exc.message}",
                         hint=_rebuild_hint(path)) from exc
    fmt = manifest.get("format") if isinstance(manifest, dict) else None
    if fmt != MANIFEST_FORMAT:
        raise ModelError(f"{mpath} is not an ambiqa reader manifest (format {fmt!r})",
                         hint=_rebuild_hint(path))
    return manifest


def verify_checkpoint(path: str | Path) -> dict[str, Any]:
    """Manifest + sha256 check of the weights; returns the manifest."""
    path = Path(path).expanduser()
    manifest = read_manifest(path)
    weights = path / WEIGHTS_NAME
    if not weights.is_file():
        raise ModelError(f"reader weights missing: {weights}", hint=_rebuild_hint(path))
    want = (manifest.get("weights") or {}).get("sha256")
    got = sha256_file(weights)
    if want != got:
        raise ModelError(f"corrupt reader checkpoint {path}: sha256 of {WEIGHTS_NAME} is "
                         f"{got[:16]}…, the manifest says {str(want)[:16]}…",
                         hint=_rebuild_hint(path))
    return manifest


def is_reader_checkpoint(path: str | Path) -> bool:
    """Whether ``path`` looks like a checkpoint written by ``ambiqa reader train``."""
    return (Path(path).expanduser() / MANIFEST_NAME).is_file()


class ExtractiveReader(SharedResource):
    """A span reader from a checkpoint ``ambiqa reader train`` wrote (never downloaded).

    Named ``extractive:<checkpoint dir name>``. Reads every window of a long context (see
    :func:`windows`) and answers "" when the null span wins. Calls are serialised (torch
    modules are not re-entrant) and shared, not copied, when a program is deep-copied.
    """

    def __init__(self, path: str | Path | None = None, *, threads: int | None = None) -> None:
        path = Path(path).expanduser() if path is not None else default_reader_dir()
        self.manifest = verify_checkpoint(path)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            import torch
            from transformers import AutoModelForQuestionAnswering, AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
            model = AutoModelForQuestionAnswering.from_pretrained(
                path, local_files_only=True, use_safetensors=True)
        except (OSError, ValueError) as exc:
            raise ModelError(f"cannot load the reader checkpoint {path}: {exc}",
                             hint=_rebuild_hint(path)) from exc
        if threads:
            torch.set_num_threads(threads)
        model.eval()
        self.model, self.tokenizer, self.path = model, tokenizer, path
        cfg = self.manifest.get("config") or {}
        self.max_length = int(cfg.get("max_length", 384))
        self.doc_stride = int(cfg.get("doc_stride", 128))
        self.max_question_tokens = int(cfg.get("max_question_tokens", 64))
        self.max_answer_tokens = int(cfg.get("max_answer_tokens", 30))
        self.null_threshold = float((self.manifest.get("calibration") or {})
                                    .get("null_threshold", 0.0))
        self.name = f"extractive:{path.name}"
        self._lock = threading.Lock()

    def answer(self, question: str, context: str) -> str:
        return self.answer_with_scores(question, context)[0]

    def answer_with_scores(self, question: str, context: str) -> tuple[str, float, float]:
        """``(answer, span score, null score)``; "" when the context does not answer."""
        import torch

        if not str(context or "").strip() or not str(question or "").strip():
            return "", float("-inf"), 0.0
        t0 = time.perf_counter()
        with self._lock:
            wins = windows(self.tokenizer, question, context, max_length=self.max_length,
                           doc_stride=self.doc_stride,
                           max_question_tokens=self.max_question_tokens)
            starts: list[Any] = []
            ends: list[Any] = []
            with torch.inference_mode():
                for i in range(0, len(wins), 16):
                    batch = pad_batch(wins[i:i + 16], self.tokenizer.pad_token_id)
                    out = self.model(**batch)
                    starts += list(out.start_logits)
                    ends += list(out.end_logits)
            result = best_span(wins, starts, ends, context,
                               max_answer_tokens=self.max_answer_tokens,
                               null_threshold=self.null_threshold)
        record_compute("reader", t0, time.perf_counter())
        return result
