"""The grammar of EoR retriever-pool specs: a small recursive-descent parser to a spec tree.

Split from :mod:`ambiqa.retrieval.pool` (whose docstring describes the grammar and the
operation order, and which re-exports every name here): parsing is pure string work that the
EoR program, the artifact checks and the CLI need without running anything.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ambiqa.errors import ConfigError

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
