"""Retriever-pool specs for Ensemble of Retrievers (EoR, Li et al. 2024, Sec. 2.1 and App. C.1).

A pool member is a *retriever* in the paper's sense: a knowledge source plus processing. Specs
are written the paper's way:

====================  ============================================================================
``Wiki@10``           top-10 passages of source ``Wiki`` (truncation, "@k")
``Wiki@RR@5``         retrieve a deeper list, re-rank it with the sentence encoder, keep 5 ("@RR")
``BM25@5&Wiki@5``     concatenate the two lists ("&"; a passage already present is not repeated)
``Wiki@10@CP``        compress every passage for the question with the LM ("@CP", always last)
``PK``                one background document written by the LM (GenRead-style parametric
                      knowledge); may also be a part of a concatenation: ``PK&Wiki@5``
``ReFree``            retrieval-free: no passages at all (stands alone)
``(BM25@20&PK&Wiki@20)@RR@10``
                      merge the parts (PK included), re-rank the merged list against the
                      question, keep 10: the paper's hybrid ``HB@RR@10`` (search-engine chunks
                      and DPR's top 20 re-ranked together)
====================  ============================================================================

Operation order (paper: @RR > @k > & > @CP): a source is re-ranked first, then truncated, the
truncated lists are concatenated, and compression applies to the concatenation, so
``BM25@RR@5&Wiki@5@CP`` reads ``((BM25@RR)@5 & Wiki@5)@CP``. Writing the operations in another
order (``Wiki@5@RR``, ``Wiki@5@CP&BM25@5``) is an error rather than a silent reinterpretation.
A parenthesised group is a concatenation re-ranked as one list; it must be followed by
``@RR@k`` and is itself a part that can be concatenated or compressed:
``(SE@10&Wiki@20)@RR@5&PK@CP`` is not valid (PK takes no operations) but
``(SE@10&Wiki@20)@RR@5&Wiki@5@CP`` is.

Sources are names the caller maps to retrievers, e.g. ``{"Wiki": colbert, "BM25": bm25,
"Dense": dense}``; ``Wiki`` is, by convention, the default retriever over the corpus. The
paper's search-engine source (SE, Google via an API) and its web pages cannot be reached
offline: local retrievers stand in for it, and a user with a web-search retriever can pass it
as ``"SE"``. Keywords (RR, CP, PK, ReFree) and source names are matched case-insensitively.

This module runs no LM itself: the LM-backed steps (PK's background writer, @CP's compressor)
and the re-ranking encoder are supplied by the caller (the EoR program owns the predictors,
so they are optimized and saved with it).
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ambiqa.errors import ConfigError
from ambiqa.parallel import run_parallel
from ambiqa.retrieval.encoder import SharedEncoder
from ambiqa.types import Passage

MAX_K = 1000
KEYWORDS = ("RR", "CP", "PK", "REFREE")


# ---- the spec tree -------------------------------------------------------------------------
class SpecNode:
    """A parsed retriever spec; ``str(node)`` gives its canonical spelling."""

    def source_names(self) -> list[str]:
        return []


@dataclass(frozen=True)
class Source(SpecNode):
    """Top-``k`` passages of a named source, optionally re-ranked before truncation."""

    name: str
    k: int
    rerank: bool = False

    def source_names(self) -> list[str]:
        return [self.name]

    def __str__(self) -> str:
        return f"{self.name}@RR@{self.k}" if self.rerank else f"{self.name}@{self.k}"


@dataclass(frozen=True)
class Background(SpecNode):
    """PK: one document the LM writes from its own knowledge."""

    def __str__(self) -> str:
        return "PK"


@dataclass(frozen=True)
class NoRetrieval(SpecNode):
    """ReFree: the reader gets no passages."""

    def __str__(self) -> str:
        return "ReFree"


@dataclass(frozen=True)
class Concat(SpecNode):
    parts: tuple[SpecNode, ...]

    def source_names(self) -> list[str]:
        return [n for p in self.parts for n in p.source_names()]

    def __str__(self) -> str:
        return "&".join(str(p) for p in self.parts)


@dataclass(frozen=True)
class GroupRerank(SpecNode):
    """``(A&B&...)@RR@k``: the parts' passages merged, re-ranked together, top ``k`` kept."""

    child: Concat
    k: int

    def source_names(self) -> list[str]:
        return self.child.source_names()

    def has_background(self) -> bool:
        return any(isinstance(p, Background) for p in self.child.parts)

    def __str__(self) -> str:
        return f"({self.child})@RR@{self.k}"


@dataclass(frozen=True)
class Compress(SpecNode):
    child: SpecNode

    def source_names(self) -> list[str]:
        return self.child.source_names()

    def __str__(self) -> str:
        return f"{self.child}@CP"


# ---- parsing -------------------------------------------------------------------------------
_TOKEN = re.compile(r"\s*(?:(?P<num>\d+)|(?P<name>[A-Za-z_][A-Za-z0-9_.\-]*)|(?P<op>[@&()]))")


@dataclass(frozen=True)
class _Tok:
    kind: str  # "num" | "name" | "@" | "&" | "(" | ")" | "end"
    text: str
    pos: int


def _lex(spec: str) -> list[_Tok]:
    toks: list[_Tok] = []
    pos = 0
    while pos < len(spec):
        if spec[pos:].strip() == "":
            break
        m = _TOKEN.match(spec, pos)
        if m is None or m.end() == pos:
            bad = spec[pos:].lstrip()
            at = len(spec) - len(bad)
            negative = re.match(r"-\d+", bad)
            if negative and spec[:at].rstrip().endswith("@"):
                raise _err(spec, at, "k must be a positive number of passages, got "
                                     f"{negative.group(0)}")
            raise _err(spec, at, f"unexpected character {bad[0]!r}")
        kind = m.lastgroup or ""
        text = m.group(kind)
        start = m.start(kind)
        toks.append(_Tok(text if kind == "op" else kind, text, start))
        pos = m.end()
    toks.append(_Tok("end", "", len(spec)))
    return toks


def _err(spec: str, pos: int, what: str, hint: str | None = None) -> ConfigError:
    return ConfigError(f"bad retriever spec {spec!r} at position {pos}: {what}",
                       hint=hint or "write e.g. 'Wiki@10', 'Wiki@RR@5', 'BM25@5&Wiki@5', "
                                    "'Wiki@10@CP', 'PK' or 'ReFree'")


def _describe(tok: _Tok) -> str:
    return "the end of the spec" if tok.kind == "end" else repr(tok.text)


class _Parser:
    def __init__(self, spec: str, sources: Mapping[str, str] | None) -> None:
        self.spec = spec
        self.toks = _lex(spec)
        self.i = 0
        self.sources = sources  # lower-cased name -> canonical name, or None (any name)

    @property
    def tok(self) -> _Tok:
        return self.toks[self.i]

    def take(self) -> _Tok:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def fail(self, what: str, tok: _Tok | None = None, hint: str | None = None) -> ConfigError:
        tok = tok or self.tok
        return _err(self.spec, tok.pos, what, hint)

    def parse(self) -> SpecNode:
        first = self.tok
        if first.kind == "name" and first.text.upper() == "REFREE":
            self.take()
            if self.tok.kind != "end":
                raise self.fail("'ReFree' (no retrieval) stands alone; found "
                                f"{_describe(self.tok)} after it")
            return NoRetrieval()
        parts = [self.term()]
        while self.tok.kind == "&":
            self.take()
            parts.append(self.term())
        node: SpecNode = parts[0] if len(parts) == 1 else Concat(tuple(parts))
        if self.tok.kind == "@":
            at = self.take()
            word = self.tok
            if word.kind == "name" and word.text.upper() == "CP":
                self.take()
                node = Compress(node)
            elif word.kind == "name" and word.text.upper() == "RR":
                raise self.fail("'@RR' must come right after a source name, before its '@k' "
                                "(e.g. 'Wiki@RR@5')", word)
            elif word.kind == "num":
                raise self.fail("this part already has its '@k'; only '@CP' may follow", at)
            else:
                raise self.fail(f"expected 'CP' after '@', found {_describe(word)}", word)
        if self.tok.kind == "&":
            raise self.fail("'@CP' applies to the whole concatenation and must come last "
                            "(e.g. 'BM25@5&Wiki@5@CP')")
        if self.tok.kind != "end":
            extra = " (no group is open)" if self.tok.kind == ")" else ""
            raise self.fail(f"expected '&', '@CP' or the end of the spec, found "
                            f"{_describe(self.tok)}{extra}")
        return node

    def _k(self) -> int:
        k_tok = self.tok
        if k_tok.kind != "num":
            raise self.fail(f"expected a number of passages, found {_describe(k_tok)}")
        self.take()
        if len(k_tok.text.lstrip("0")) > len(str(MAX_K)):
            raise self.fail(f"k={k_tok.text} is more than the limit of {MAX_K} passages", k_tok)
        k = int(k_tok.text)
        if k <= 0:
            raise self.fail(f"k must be a positive number of passages, got {k_tok.text}", k_tok)
        if k > MAX_K:
            raise self.fail(f"k={k} is more than the limit of {MAX_K} passages", k_tok)
        return k

    def group(self) -> SpecNode:
        """``( part & part ... ) @RR @k``: a merged list re-ranked as one."""
        opening = self.take()
        parts = [self.term()]
        while self.tok.kind == "&":
            self.take()
            parts.append(self.term())
        if self.tok.kind != ")":
            raise self.fail(f"expected '&' or ')' to close the group opened at position "
                            f"{opening.pos}, found {_describe(self.tok)}")
        self.take()
        if len(parts) < 2:
            raise self.fail("a group merges at least two parts (e.g. '(BM25@20&PK)@RR@10')",
                            opening)
        hint = "a group is re-ranked as one list: write '(A&B)@RR@k'"
        if self.tok.kind != "@" or self.toks[self.i + 1].kind != "name" or \
                self.toks[self.i + 1].text.upper() != "RR":
            raise self.fail(f"expected '@RR@k' after ')', found {_describe(self.tok)}",
                            hint=hint)
        self.take()
        self.take()
        if self.tok.kind != "@":
            raise self.fail(f"expected '@' and a number of passages after '@RR', found "
                            f"{_describe(self.tok)}", hint=hint)
        self.take()
        return GroupRerank(Concat(tuple(parts)), self._k())

    def term(self) -> SpecNode:
        tok = self.tok
        if tok.kind == "(":
            return self.group()
        if tok.kind != "name":
            raise self.fail(f"expected a source name or 'PK', found {_describe(tok)}")
        word = tok.text.upper()
        if word == "REFREE":
            raise self.fail("'ReFree' (no retrieval) stands alone and cannot be combined")
        if word in ("RR", "CP"):
            raise self.fail(f"{tok.text!r} is an operation, not a source; expected a source "
                            "name or 'PK' here")
        self.take()
        if word == "PK":
            if self.tok.kind == "@" and self.toks[self.i + 1].kind == "num":
                raise self.fail("'PK' is one generated document and takes no '@k'")
            return Background()
        name = self.resolve(tok)
        if self.tok.kind != "@":
            raise self.fail(f"expected '@' and a number of passages after {tok.text!r} "
                            f"(e.g. '{tok.text}@5'), found {_describe(self.tok)}")
        self.take()
        rerank = False
        if self.tok.kind == "name" and self.tok.text.upper() == "RR":
            rerank = True
            self.take()
            if self.tok.kind != "@":
                raise self.fail("expected '@' and a number of passages after '@RR' "
                                f"(e.g. '{tok.text}@RR@5'), found {_describe(self.tok)}")
            self.take()
        if self.tok.kind != "num":
            expected = "a number of passages" + ("" if rerank else " or 'RR'")
            raise self.fail(f"expected {expected}, found {_describe(self.tok)}")
        k = self._k()
        if self.tok.kind == "@" and self.toks[self.i + 1].kind == "name" \
                and self.toks[self.i + 1].text.upper() == "RR":
            raise self.fail(f"'@RR' must come before '@k' (write '{name}@RR@{k}')",
                            self.toks[self.i + 1])
        return Source(name, k, rerank)

    def resolve(self, tok: _Tok) -> str:
        if self.sources is None:
            return tok.text
        name = self.sources.get(tok.text.lower())
        if name is None:
            known = ", ".join(sorted(self.sources.values())) or "(none)"
            hint = (f"known sources: {known}; pass sources={{{tok.text!r}: retriever}}")
            if tok.text.upper() in ("SE", "HB"):
                hint += ("; the paper's web-search source is not available offline, so map "
                         "a local retriever to that name if you want to keep the spelling")
            raise self.fail(f"unknown source {tok.text!r}", tok, hint)
        return name


def parse_spec(spec: object, sources: Iterable[str] | None = None) -> SpecNode:
    """Parse one retriever spec. With ``sources`` given, source names must be among them
    (matched case-insensitively and returned in the given spelling).

    Raises :class:`ConfigError` naming the position and what was expected for any bad spec.
    """
    if not isinstance(spec, str):
        raise ConfigError(f"a retriever spec must be a string, got {type(spec).__name__}")
    if not spec.strip():
        raise ConfigError("empty retriever spec",
                          hint="write e.g. 'Wiki@10', 'BM25@5&Wiki@5', 'PK' or 'ReFree'")
    known = None if sources is None else {s.lower(): s for s in sources}
    return _Parser(spec, known).parse()


# ---- running a spec ------------------------------------------------------------------------
class PoolMemo:
    """Per-question memo so pool members share work (``Wiki@10`` and ``Wiki@10@CP`` search
    once; ``PK`` is written once). Thread-safe; each key is computed at most once, and a
    computation that raised raises again for every later caller."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._locks: dict[Hashable, threading.Lock] = {}
        self._values: dict[Hashable, Any] = {}

    def get(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._values:
                try:
                    self._values[key] = (True, compute())
                except Exception as exc:  # a failed step fails every member that needs it,
                    self._values[key] = (False, exc)  # without being retried per member
            ok, value = self._values[key]
        if not ok:
            raise value
        return value


BackgroundFn = Callable[[str], str]
CompressFn = Callable[[str, Passage], str]


class PoolRetriever:
    """Runs parsed specs against named sources.

    ``background(question) -> str`` writes the PK document; ``compress(question, passage)
    -> str`` returns the part of one passage relevant to the question ("" = nothing relevant,
    the passage is dropped); ``encoder.encode(texts)`` gives unit vectors for @RR.
    ``rerank_depth`` is how many candidates @RR re-ranks (at least ``k``): the paper re-ranks
    every chunk of every search-engine result page; a local source offers a deeper list.
    """

    encoder = SharedEncoder()

    def __init__(self, sources: Mapping[str, Any], *, background: BackgroundFn | None = None,
                 compress: CompressFn | None = None, encoder: Any = None,
                 rerank_depth: int = 20) -> None:
        self.sources = dict(sources)
        self._lower = {name.lower(): name for name in self.sources}
        self.background = background
        self.compress = compress
        self.encoder = encoder
        self.rerank_depth = rerank_depth

    def check(self, node: SpecNode) -> None:
        """Raise :class:`ConfigError` if ``node`` names a source this pool does not have."""
        for name in node.source_names():
            if name.lower() not in self._lower:
                known = ", ".join(self.sources) or "(none)"
                raise ConfigError(
                    f"retriever spec {str(node)!r} uses source {name!r}, which was not supplied",
                    hint=f"supplied sources: {known}. 'Wiki' is the program's retriever= "
                         "argument; others go in sources={...}")

    def run(self, spec: str | SpecNode, question: str, memo: PoolMemo | None = None,
            ) -> list[Passage]:
        node = parse_spec(spec) if isinstance(spec, str) else spec
        self.check(node)
        return self._run(node, question, memo or PoolMemo())

    def prefetch(self, node: SpecNode, question: str, memo: PoolMemo) -> None:
        """Run ``node``'s searches and re-ranking (no LM steps) into ``memo`` now.

        Called in the caller's thread before members run concurrently, so retrievers and the
        encoder are never first loaded from several threads at once (lazy imports of torch /
        transformers are not thread-safe) and searches happen in a fixed order.
        """
        if isinstance(node, Source):
            self._source(node, question, memo)
        elif isinstance(node, Concat):
            for part in node.parts:
                self.prefetch(part, question, memo)
        elif isinstance(node, Compress):
            self.prefetch(node.child, question, memo)
        elif isinstance(node, GroupRerank):
            self.prefetch(node.child, question, memo)
            if node.has_background():  # PK is an LM step: re-rank later, load the encoder now
                self.encoder.encode([question])
            else:
                self._group(node, question, memo)

    def _run(self, node: SpecNode, question: str, memo: PoolMemo) -> list[Passage]:
        if isinstance(node, NoRetrieval):
            return []
        if isinstance(node, Background):
            return memo.get(("pk",), lambda: self._background(question))
        if isinstance(node, Source):
            return self._source(node, question, memo)
        if isinstance(node, Concat):
            out: list[Passage] = []
            seen: set[str] = set()
            for part in node.parts:
                for p in self._run(part, question, memo):
                    if p.id not in seen:
                        seen.add(p.id)
                        out.append(p)
            return out
        if isinstance(node, Compress):
            return self._compress(self._run(node.child, question, memo), question, memo)
        if isinstance(node, GroupRerank):
            return self._group(node, question, memo)
        raise TypeError(f"not a spec node: {node!r}")

    def _group(self, node: GroupRerank, question: str, memo: PoolMemo) -> list[Passage]:
        """Merge the group's parts (deduplicated by id), re-rank them together, keep ``k``."""
        merged = self._run(node.child, question, memo)
        ranked = memo.get(("group", str(node.child).lower()),
                          lambda: self._rerank(question, merged))
        return ranked[: node.k]

    def _search(self, name: str, question: str, n: int, memo: PoolMemo) -> list[Passage]:
        name = self._lower[name.lower()]
        return memo.get(("search", name, n), lambda: list(self.sources[name].search(question, n)))

    def _source(self, node: Source, question: str, memo: PoolMemo) -> list[Passage]:
        if not node.rerank:
            return self._search(node.name, question, node.k, memo)[: node.k]
        depth = max(self.rerank_depth, node.k)
        ranked = memo.get(("rerank", node.name.lower(), depth), lambda: self._rerank(
            question, self._search(node.name, question, depth, memo)))
        return ranked[: node.k]

    def _rerank(self, question: str, candidates: list[Passage]) -> list[Passage]:
        if not candidates:
            return []
        vecs = np.asarray(self.encoder.encode([question] + [p.render() for p in candidates]),
                          dtype=np.float32)
        sims = vecs[1:] @ vecs[0]
        order = sorted(range(len(candidates)), key=lambda i: (-float(sims[i]), i))
        return [candidates[i].with_score(float(sims[i])) for i in order]

    def _background(self, question: str) -> list[Passage]:
        if self.background is None:
            raise ConfigError("spec 'PK' needs a background-document writer (an LM step)",
                              hint="run PK specs through the EoR program, which supplies one")
        text = " ".join(str(self.background(question) or "").split())
        if not text:
            return []
        pid = "pk:" + hashlib.sha256(f"{question}\0{text}".encode()).hexdigest()[:12]
        return [Passage(pid, "Background (model knowledge)", text)]

    def _compress(self, passages: list[Passage], question: str, memo: PoolMemo,
                  ) -> list[Passage]:
        if not passages:
            return []
        if self.compress is None:
            raise ConfigError("spec '@CP' needs a compressor (an LM step)",
                              hint="run @CP specs through the EoR program, which supplies one")
        compress = self.compress

        def one(p: Passage) -> Passage | None:
            key = ("cp", p.id, hashlib.sha256(p.text.encode()).hexdigest()[:16])
            text = memo.get(key, lambda: " ".join(str(compress(question, p) or "").split()))
            return Passage(p.id, p.title, text, p.score) if text else None

        return [p for p in run_parallel(one, passages) if p is not None]


def run_spec(node: str | SpecNode, question: str, sources: Mapping[str, Any],
             **options: Any) -> list[Passage]:
    """Passages for ``question`` from one spec (see :class:`PoolRetriever` for ``options``)."""
    return PoolRetriever(sources, **options).run(node, question)
