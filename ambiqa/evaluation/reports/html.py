"""One document, two renderings: Markdown for the repository, one self-contained HTML page for
a person.

Reports and comparisons are built once as a list of blocks (headings, paragraphs, tables,
images, collapsible details) and rendered twice, so the Markdown and the HTML can never say
different things. Text that comes from the data (questions, answers, passages, errors, run
names) is always a plain ``str`` and is escaped by the renderer: HTML-escaped in the page,
and kept from breaking a Markdown table or opening a raw HTML tag in the Markdown. Formatting
is structural (:class:`Code`, :class:`Bold`), never markup inside a string, so no string from
a run can inject markup.

The HTML page needs nothing outside itself: its CSS is inline, every plot is embedded as a
base64 PNG (``data:`` URI), there is no script, and a Content-Security-Policy forbids the
browser any other load, so the file can be mailed, archived or opened offline.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Union


@dataclass(frozen=True)
class Code:
    """Inline code (a name, a path, a spec)."""

    text: str


@dataclass(frozen=True)
class Bold:
    """Emphasised inline text."""

    text: str


Inline = Union[str, Code, Bold, Sequence["Inline"]]  # noqa: UP007 (a recursive alias)


@dataclass(frozen=True)
class Heading:
    level: int
    text: Inline


@dataclass(frozen=True)
class Para:
    text: Inline
    css: str = ""  #: an HTML class (``note``, ``muted``); Markdown ignores it


@dataclass(frozen=True)
class Bullets:
    items: Sequence[Inline]


@dataclass(frozen=True)
class Table:
    """A table; ``align`` has one letter per column: ``l`` (text), ``r`` (a number) or ``n``
    (a number with its interval: left-aligned, never wrapped)."""

    headers: Sequence[Inline]
    rows: Sequence[Sequence[Inline]]
    align: str = ""


@dataclass(frozen=True)
class Image:
    """A PNG beside the Markdown (linked there) and embedded in the HTML page."""

    title: str
    rel_path: str


@dataclass(frozen=True)
class Quote:
    """A quoted text from the data (an answer, a passage)."""

    text: Inline


@dataclass(frozen=True)
class Details:
    """A collapsible group in HTML (``open`` shows it unfolded); in Markdown a bold line
    followed by the blocks."""

    summary: Inline
    blocks: Sequence[Block]
    open: bool = False


Block = Union[Heading, Para, Bullets, Table, Image, Quote, Details]  # noqa: UP007


@dataclass
class Document:
    """A report or comparison: a title and its blocks."""

    title: str
    blocks: list[Block] = field(default_factory=list)

    def add(self, *blocks: Block) -> Document:
        self.blocks.extend(blocks)
        return self

    def markdown(self) -> str:
        return render_markdown(self)

    def html(self, base_dir: str | Path) -> str:
        return render_html(self, Path(base_dir))


# ------------------------------------------------------------------ Markdown

_MD_TAG = re.compile(r"<(?=[A-Za-z/!?])")


def md_text(text: str, *, cell: bool = False) -> str:
    """Data text for Markdown: one line, no raw HTML tag, and no ``|`` breaking a table."""
    out = _MD_TAG.sub("&lt;", str(text).replace("\r", " ").replace("\n", " "))
    return out.replace("|", "\\|") if cell else out


def _md_inline(x: Inline, cell: bool = False) -> str:
    if isinstance(x, str):
        return md_text(x, cell=cell)
    if isinstance(x, Code):
        body = str(x.text).replace("\n", " ")
        if cell:
            body = body.replace("|", "\\|")
        fence = "``" if "`" in body else "`"
        pad = " " if fence == "``" else ""
        return f"{fence}{pad}{body}{pad}{fence}"
    if isinstance(x, Bold):
        return f"**{md_text(x.text, cell=cell)}**"
    return "".join(_md_inline(p, cell) for p in x)


def _md_row(cells: Sequence[Inline]) -> str:
    """``| a | b |``; an empty cell is ``| |``."""
    return "|" + "".join(f" {t} |" if (t := _md_inline(c, True)) else " |" for c in cells)


def _md_block(b: Block, out: list[str]) -> None:
    if isinstance(b, Heading):
        out += [f"{'#' * b.level} {_md_inline(b.text)}", ""]
    elif isinstance(b, Para):
        out += [_md_inline(b.text), ""]
    elif isinstance(b, Bullets):
        out += [f"- {_md_inline(i)}" for i in b.items] + [""]
    elif isinstance(b, Table):
        align = (b.align or "").ljust(len(b.headers), "l")
        out.append(_md_row(b.headers))
        out.append("|" + "".join("---:|" if a == "r" else "---|" for a in align))
        out += [_md_row(row) for row in b.rows]
        out.append("")
    elif isinstance(b, Image):
        out += [f"![{md_text(b.title)}]({b.rel_path})", ""]
    elif isinstance(b, Quote):
        out += [f"> {_md_inline(b.text)}", ""]
    elif isinstance(b, Details):
        out += [f"**{_md_inline(b.summary)}**", ""]
        for inner in b.blocks:
            _md_block(inner, out)


def render_markdown(doc: Document) -> str:
    out = [f"# {md_text(doc.title)}", ""]
    for b in doc.blocks:
        _md_block(b, out)
    return "\n".join(out).rstrip() + "\n"


# ------------------------------------------------------------------ HTML

CSS = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d2329;
  max-width:1180px;margin:1.5em auto;padding:0 1.2em;background:#fff}
h1{font-size:1.6em;border-bottom:2px solid #4C72B0;padding-bottom:.2em}
h2{font-size:1.3em;margin-top:1.8em;border-bottom:1px solid #d8dee4;padding-bottom:.15em}
h3{font-size:1.08em;margin-top:1.3em}
table{border-collapse:collapse;margin:.6em 0 1em;font-size:.92em;display:block;overflow-x:auto}
th,td{border:1px solid #d8dee4;padding:.28em .6em;vertical-align:top}
th{background:#f3f5f7;text-align:left}
td.r,th.r{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.n{font-variant-numeric:tabular-nums;white-space:nowrap}
tr:nth-child(even) td{background:#fafbfc}
code{font:.9em ui-monospace,SFMono-Regular,Menlo,monospace;background:#f3f5f7;
  padding:.05em .3em;border-radius:3px;overflow-wrap:anywhere}
figure{margin:1em 0}figure img{max-width:100%;height:auto;border:1px solid #e5e8eb}
figcaption{font-size:.85em;color:#57606a}
blockquote{margin:.4em 0 .8em;padding:.3em .8em;border-left:3px solid #4C72B0;
  background:#f6f8fa;white-space:pre-wrap;overflow-wrap:anywhere}
details{margin:.4em 0 .8em;padding:.3em .8em;border:1px solid #e5e8eb;border-radius:4px}
details>summary{cursor:pointer;font-weight:600}
p.note,p.muted{color:#57606a;font-size:.9em}
.missing{color:#a40e26}
nav.toc{font-size:.9em;margin:.2em 0 1em}nav.toc a{color:#4C72B0;text-decoration:none}
"""


def esc(text: object) -> str:
    """HTML-escape anything from the data (quotes included: safe inside attributes too)."""
    return html.escape(str(text), quote=True)


def _html_inline(x: Inline) -> str:
    if isinstance(x, str):
        return esc(x)
    if isinstance(x, Code):
        return f"<code>{esc(x.text)}</code>"
    if isinstance(x, Bold):
        return f"<strong>{esc(x.text)}</strong>"
    return "".join(_html_inline(p) for p in x)


def _slug(text: str, used: set[str]) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"
    slug, k = base, 2
    while slug in used:
        slug, k = f"{base}-{k}", k + 1
    used.add(slug)
    return slug


def _plain(x: Inline) -> str:
    if isinstance(x, str):
        return x
    if isinstance(x, Code | Bold):
        return x.text
    return "".join(_plain(p) for p in x)


def embed_png(path: Path) -> str | None:
    """``data:image/png;base64,...`` for a PNG file, or None when it is missing or not a PNG."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def _html_block(b: Block, base: Path, out: list[str], used: set[str]) -> None:
    if isinstance(b, Heading):
        level = min(max(b.level, 1), 6)
        out.append(f'<h{level} id="{_slug(_plain(b.text), used)}">{_html_inline(b.text)}'
                   f"</h{level}>")
    elif isinstance(b, Para):
        cls = f' class="{esc(b.css)}"' if b.css else ""
        out.append(f"<p{cls}>{_html_inline(b.text)}</p>")
    elif isinstance(b, Bullets):
        out.append("<ul>" + "".join(f"<li>{_html_inline(i)}</li>" for i in b.items) + "</ul>")
    elif isinstance(b, Table):
        align = (b.align or "").ljust(len(b.headers), "l")
        cls = [f' class="{a}"' if a in "rn" else "" for a in align]
        head = "".join(f"<th{c}>{_html_inline(h)}</th>"
                       for c, h in zip(cls, b.headers, strict=False))
        body = "".join("<tr>" + "".join(f"<td{c}>{_html_inline(v)}</td>"
                                        for c, v in zip(cls, row, strict=False)) + "</tr>"
                       for row in b.rows)
        out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
    elif isinstance(b, Image):
        uri = embed_png(base / b.rel_path)
        if uri is None:
            out.append(f'<p class="missing">plot missing: {esc(b.rel_path)}</p>')
        else:
            out.append(f'<figure><img src="{uri}" alt="{esc(b.title)}">'
                       f"<figcaption>{esc(b.title)} ({esc(b.rel_path)})</figcaption></figure>")
    elif isinstance(b, Quote):
        out.append(f"<blockquote>{_html_inline(b.text)}</blockquote>")
    elif isinstance(b, Details):
        out.append(f"<details{' open' if b.open else ''}><summary>{_html_inline(b.summary)}"
                   "</summary>")
        for inner in b.blocks:
            _html_block(inner, base, out, used)
        out.append("</details>")


def render_html(doc: Document, base_dir: Path) -> str:
    """The whole page; images are read from ``base_dir`` (where the Markdown links them)."""
    used: set[str] = set()
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
           "img-src data:; style-src 'unsafe-inline'\">",
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>{esc(doc.title)}</title><style>{CSS}</style></head><body>",
           f'<h1 id="{_slug(doc.title, used)}">{esc(doc.title)}</h1>']
    body: list[str] = []
    for b in doc.blocks:
        _html_block(b, base_dir, body, used)
    # a contents line of the sections (in-page links only)
    sections = [(m.group(1), m.group(2)) for line in body
                if (m := re.match(r'<h2 id="([^"]+)">(.*)</h2>$', line))]
    if len(sections) > 2:
        out.append('<nav class="toc">' + " · ".join(f'<a href="#{sid}">{text}</a>'
                                                    for sid, text in sections) + "</nav>")
    out += body
    out.append("</body></html>")
    return "\n".join(out) + "\n"
