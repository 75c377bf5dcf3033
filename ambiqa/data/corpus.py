"""Retrieval corpora as users have them → :class:`Passage` streams.

Accepted formats (chosen by the path: a folder, or the file's ending; ``.gz`` is read on the fly):

**JSON Lines** (``.jsonl``, ``.ndjson``) -- one object per line with the text in ``text`` or
``contents`` (FlashRAG); ``title`` and ``id`` are optional::

    {"id": "p1", "title": "Paris", "text": "Paris is the capital of France."}
    {"contents": "Lyon is a city in France."}
    {"title": "Nice", "text": "Nice is on the Riviera."}

**CSV / TSV** (``.csv``, ``.tsv``) -- a header line naming the columns; the text column is
``text``, ``contents``, ``passage``, ``body`` or ``content`` (or ``text_column=``); ``title`` and
``id`` columns are optional. DPR's ``psgs_w100.tsv`` (``id text title``) is one of these::

    id,title,text
    p1,Paris,Paris is the capital of France.
    p2,Lyon,"Lyon is a city in France, on the Rhone."

**A folder of ``.txt`` / ``.md`` files** (searched recursively, in path order) -- one passage per
file, titled by the file name; with ``split_words=100`` each file is cut into passages of about
100 words (ids ``PATH#1``, ``PATH#2``...)::

    notes/paris.txt      Paris is the capital of France. ...
    notes/lyon.md        Lyon is a city in France. ...
    notes/sub/nice.txt   Nice is on the Riviera. ...

**Parquet** (``.parquet``) -- the JSONL fields as columns; read only when ``pyarrow`` is
installed (ambiqa does not depend on it).

Ids: a passage without an id gets a stable one -- its file path for a folder, else
``h`` + 12 hex digits of sha256(title, text) -- so re-indexing the same corpus gives the same ids
(citations and compiled demos stay valid). Identical passages share a hash; later copies get
``#2``, ``#3``... A real corpus (a Wikipedia dump: ~21M passages) does not fit in memory as
objects, so :func:`iter_corpus` streams it; index builders consume the stream.

Every malformed passage is a :class:`~ambiqa.errors.DataError` naming the file and line: broken
JSON, a missing text, an empty text (an empty passage can only be a retrieval false hit) and a
duplicate id (ids are how programs cite passages, so they must be unique). A file in another
format names the format it saw and the ones accepted.
"""

from __future__ import annotations

import csv
import hashlib
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ambiqa.data._io import Where, iter_jsonl, open_text
from ambiqa.errors import DataError
from ambiqa.types import Passage

#: what a user may hand to ``ambiqa index`` / ``ambiqa.index`` (for messages and --help)
ACCEPTED = ("JSONL (.jsonl/.ndjson, field text or contents; title and id optional)",
            "CSV/TSV with a header naming the text column",
            "a folder of .txt/.md files",
            "Parquet (.parquet, needs pyarrow)")
TEXT_KEYS = ("text", "contents", "passage", "body", "content")
ID_KEYS = ("id", "_id", "docid", "pid")
FOLDER_SUFFIXES = (".txt", ".md")
#: passage length a folder's files are cut to with ``split_words`` (the DPR passage size)
DEFAULT_SPLIT_WORDS = 100


def accepted() -> str:
    return "; ".join(ACCEPTED)


def corpus_format(path: Path) -> str:
    """``jsonl``, ``csv``, ``tsv``, ``folder`` or ``parquet``; anything else is a DataError
    naming what was seen and what is accepted."""
    if path.is_dir():
        return "folder"
    name = path.name.lower().removesuffix(".gz")
    for ending, fmt in ((".jsonl", "jsonl"), (".ndjson", "jsonl"), (".csv", "csv"),
                        (".tsv", "tsv"), (".parquet", "parquet")):
        if name.endswith(ending):
            return fmt
    seen = Path(name).suffix or "no file extension"
    raise DataError(f"{path}: cannot read a corpus from a {seen!r} file; accepted: "
                    f"{accepted()}", hint="rename or convert the file (see `ambiqa index --help`)")


def _check_path(path: Path) -> Path:
    if not path.exists():
        raise DataError(f"corpus file not found: {path}",
                        hint=f"pass a corpus file or folder; accepted: {accepted()}")
    return path


def stable_id(title: str, text: str) -> str:
    """An id for a passage that has none: the same title and text always give the same id."""
    return "h" + hashlib.sha256(f"{title}\0{text}".encode()).hexdigest()[:12]


# --- records → passages ----------------------------------------------------------------------

def record_passage(where: Where, rec: dict[str, Any], text_key: str | None = None) -> Passage:
    """One passage from a JSON/CSV/Parquet record (see the module docstring for the fields)."""
    keys = (text_key,) if text_key else TEXT_KEYS
    text_field = next((k for k in keys if rec.get(k) is not None), None)
    if text_field is None:
        raise where.error(f"missing field 'text' (or 'contents'); the record has "
                          f"{sorted(map(str, rec))[:8]}",
                          hint="name the text column text or contents")
    text, title = rec[text_field], rec.get("title")
    id_field = next((k for k in ID_KEYS if rec.get(k) is not None), None)
    pid = rec[id_field] if id_field else None
    if pid is not None and (isinstance(pid, bool) or not isinstance(pid, str | int)):
        raise where.error(f"field 'id' must be a string, got {type(pid).__name__}")
    if id_field and not str(pid).strip():
        raise where.error("field 'id' is empty")
    label = str(pid).strip() if id_field else where.label
    if not isinstance(text, str):
        raise where.error(f"field '{text_field}' of passage '{label}' must be a string, "
                          f"got {type(text).__name__}")
    if title is not None and not isinstance(title, str):
        raise where.error(f"field 'title' of passage '{label}' must be a string, "
                          f"got {type(title).__name__}")
    title = (title or "").strip()
    if not title and text_field == "contents":
        title, text = _flashrag_title(text)
    if not text.strip():
        raise where.error(f"passage '{label}' has an empty text",
                          hint="drop the passage from the corpus")
    text = text.strip()
    return Passage(str(pid).strip() if id_field else stable_id(title, text), title, text)


def _flashrag_title(contents: str) -> tuple[str, str]:
    """FlashRAG's ``contents`` is ``"Title"\\ntext``: take the quoted first line as the title."""
    first, sep, rest = contents.partition("\n")
    first = first.strip()
    if sep and len(first) >= 2 and first[0] == first[-1] == '"' and rest.strip():
        return first[1:-1].strip(), rest
    return "", contents


def passages_from(items: Iterable[Any], *, source: str = "<list>") -> Iterator[Passage]:
    """Passages from Python objects: strings, dicts (the JSONL fields) or Passages."""
    for n, item in enumerate(items, start=1):
        where = Where(Path(source), f"item {n}")
        if isinstance(item, Passage):
            yield item
        elif isinstance(item, str):
            if not item.strip():
                raise where.error("empty passage text")
            yield Passage(stable_id("", item.strip()), "", item.strip())
        elif isinstance(item, dict):
            yield record_passage(where, item)
        else:
            raise where.error(f"a passage is a string, a dict or a Passage, got "
                              f"{type(item).__name__}")


# --- formats ---------------------------------------------------------------------------------

def _iter_jsonl_checked(path: Path) -> Iterator[tuple[Where, dict[str, Any]]]:
    """JSON Lines; a first line that is not JSON names the format it looks like."""
    try:
        yield from iter_jsonl(path)
    except DataError as exc:
        if "line 1:" not in exc.message or "invalid JSON" not in exc.message:
            raise
        with open_text(path) as fh:
            first = fh.readline()
        seen = ("TSV" if "\t" in first else "CSV" if "," in first else "plain text")
        raise DataError(f"{path} is named like JSON Lines but line 1 is not JSON (it looks "
                        f"like {seen}); accepted: {accepted()}",
                        hint=f"rename it to .{seen.lower()}" if seen != "plain text" else
                        "put plain-text passages in .txt files in a folder") from exc


def _iter_table(path: Path, delimiter: str, text_column: str | None
                ) -> Iterator[tuple[Where, dict[str, Any], str | None]]:
    """CSV/TSV rows keyed by the header (lower-cased); names the text column once."""
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))  # passages may exceed csv's 128 KiB
    with open_text(path) as fh:
        reader = csv.reader(fh, delimiter=delimiter)
        try:
            header = [h.strip().lower() for h in next(reader)]
        except StopIteration:
            return
        key = text_column.lower() if text_column else next(
            (k for k in TEXT_KEYS if k in header), None)
        if key is None or key not in header:
            kind = "TSV" if delimiter == "\t" else "CSV"
            raise Where(path, "line 1").error(
                f"the {kind} header lacks column(s) {text_column or 'text'} (it has: {header})",
                hint="the first line must name the columns, one of them text (or pass "
                     "--text-column NAME)")
        try:
            for lineno, row in enumerate(reader, start=2):
                if not row:
                    continue
                if len(row) != len(header):
                    raise Where(path, f"line {lineno}").error(
                        f"expected {len(header)} columns, got {len(row)}",
                        hint="quote fields that contain the delimiter")
                yield Where(path, f"line {lineno}"), dict(zip(header, row, strict=True)), key
        except csv.Error as exc:
            raise DataError(f"{path}: not readable as {'TSV' if delimiter == chr(9) else 'CSV'}"
                            f" ({exc}); accepted: {accepted()}") from exc


def _iter_parquet(path: Path) -> Iterator[tuple[Where, dict[str, Any]]]:
    try:
        import pyarrow.parquet as pq  # optional: only when the user has it
    except ImportError as exc:
        raise DataError(f"{path}: reading Parquet needs pyarrow, which is not installed",
                        hint="pip install pyarrow, or convert the file to JSONL") from exc
    try:
        table = pq.ParquetFile(path)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise DataError(f"{path}: not a readable Parquet file ({exc}); accepted: "
                        f"{accepted()}") from exc
    row = 0
    for batch in table.iter_batches(batch_size=4096):
        for rec in batch.to_pylist():
            row += 1
            yield Where(path, f"row {row}"), rec


def _iter_folder(root: Path, split_words: int | None) -> Iterator[Passage]:
    files = sorted(p for p in root.rglob("*") if p.is_file()
                   and p.suffix.lower() in FOLDER_SUFFIXES and not p.name.startswith("."))
    if not files:
        others = sorted({p.suffix or p.name for p in root.rglob("*") if p.is_file()})[:6]
        raise DataError(f"{root} holds no .txt or .md files"
                        + (f" (it has: {', '.join(others)})" if others else " (it is empty)"),
                        hint=f"accepted: {accepted()}")
    for path in files:
        # an empty file holds no passage
        yield from _file_passages(path, path.relative_to(root).as_posix(), split_words)


def _file_passages(path: Path, rel: str, split_words: int | None) -> list[Passage]:
    """One text file's passages, ids from ``rel``: the whole file, or ``split_words``-word
    pieces ``rel#1``, ``rel#2``...; none for a file without words."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc.reason})") from exc
    title = path.stem.replace("_", " ").strip()
    words = text.split()
    if not words:
        return []
    if not split_words:
        return [Passage(rel, title, text.strip())]
    return [Passage(f"{rel}#{n}", title, " ".join(words[start:start + split_words]))
            for n, start in enumerate(range(0, len(words), split_words), start=1)]


def _check_split_words(split_words: int | None) -> None:
    if split_words is not None and (isinstance(split_words, bool) or int(split_words) < 1):
        raise DataError(f"split_words must be a positive number of words, got {split_words!r}")


def _records(path: Path, fmt: str, text_column: str | None
             ) -> Iterator[tuple[Where, dict[str, Any], str | None]]:
    if fmt == "jsonl":
        return ((w, r, text_column) for w, r in _iter_jsonl_checked(path))
    if fmt == "parquet":
        return ((w, r, text_column) for w, r in _iter_parquet(path))
    return _iter_table(path, "\t" if fmt == "tsv" else ",", text_column)


# --- the public stream -----------------------------------------------------------------------

def iter_corpus(path: str | Path, *, check_duplicates: bool = True,
                split_words: int | None = None, text_column: str | None = None
                ) -> Iterator[Passage]:
    """Stream the passages of a corpus file or folder, validating each one.

    ``split_words``: a folder's files are cut into passages of this many words (default: one
    passage per file). ``text_column``: the CSV/TSV/JSONL field holding the text when it is
    not one of :data:`TEXT_KEYS`. ``check_duplicates`` keeps a set of the ids seen (a few bytes
    per passage; turn it off only for a corpus known to be clean and too big for that set).
    An empty corpus is an error when the stream ends. A missing path or an unknown format
    fails here, before the first passage.
    """
    path = _check_path(Path(path).expanduser())
    fmt = corpus_format(path)
    _check_split_words(split_words)
    if split_words and fmt != "folder":
        raise DataError(f"split_words applies to a folder of .txt/.md files, not a {fmt} file",
                        hint="a JSONL/CSV corpus is already split into passages")
    return _stream(path, fmt, check_duplicates, split_words, text_column)


def _stream(path: Path, fmt: str, check_duplicates: bool, split_words: int | None,
            text_column: str | None) -> Iterator[Passage]:
    if fmt == "folder":
        rows: Iterable[tuple[str, Passage]] = ((p.id, p) for p in
                                               _iter_folder(path, split_words))
    else:
        rows = ((w.label, record_passage(w, r, key))
                for w, r, key in _records(path, fmt, text_column))
    yield from unique_passages(rows, check_duplicates=check_duplicates, source=path)


def unique_passages(rows: Iterable[tuple[str, Passage]], *, check_duplicates: bool = True,
                    source: Path | str = "<list>") -> Iterator[Passage]:
    """Passages with unique ids: a repeated *hashed* id (the same text twice) gets ``#2``...;
    a repeated id the corpus itself gave is an error naming both places."""
    seen: dict[str, str] = {}
    count = 0
    for label, passage in rows:
        if check_duplicates:
            first = seen.get(passage.id)
            if first is not None:
                if not _hashed(passage):
                    raise DataError(f"{source}, {label}: duplicate passage id '{passage.id}' "
                                    f"(first seen at {first})",
                                    hint="passage ids must be unique; renumber the corpus")
                n = 2
                while f"{passage.id}#{n}" in seen:
                    n += 1
                passage = Passage(f"{passage.id}#{n}", passage.title, passage.text)
            seen[passage.id] = label
        count += 1
        yield passage
    if count == 0:
        raise DataError(f"corpus {source} holds no passages")


def iter_corpora(paths: Iterable[str | Path], *, split_words: int | None = None,
                 text_column: str | None = None, base: str | Path | None = None
                 ) -> Iterator[Passage]:
    """The passages of several corpora as one stream (what ``ambiqa index add`` reads).

    Each path is anything :func:`iter_corpus` takes, or a single ``.txt`` / ``.md`` file: one
    passage (or ``split_words``-word passages) whose id is its path relative to ``base``
    (default: its own folder, so ``notes/new.md`` is ``new.md``; pass the folder the index was
    built from to get the ids a rebuild would give). ``split_words`` applies to folders and
    text files only. Ids must be unique across all the paths.
    """
    paths = [Path(p).expanduser() for p in paths]
    if not paths:
        raise DataError("no corpus files given", hint=f"pass files or folders; accepted: "
                        f"{accepted()}, or single .txt/.md files")
    _check_split_words(split_words)
    texts = [p for p in paths if p.is_file() and p.suffix.lower() in FOLDER_SUFFIXES]
    if split_words and not texts and not any(p.is_dir() for p in paths):
        raise DataError("split_words applies to folders and .txt/.md files, not to "
                        f"{', '.join(p.name for p in paths)}",
                        hint="a JSONL/CSV corpus is already split into passages")
    base_dir = Path(base).expanduser() if base is not None else None

    def rows() -> Iterator[tuple[str, Passage]]:
        for path in paths:
            if path in texts:
                for p in _text_file(path, base_dir or path.parent, split_words):
                    yield f"{path}", p
                continue
            fmt = corpus_format(_check_path(path))
            words = split_words if fmt == "folder" else None
            for p in _stream(path, fmt, True, words, text_column):
                yield f"{path}", p

    yield from unique_passages(rows(), source=", ".join(str(p) for p in paths))


def _text_file(path: Path, base: Path, split_words: int | None) -> Iterator[Passage]:
    """A single .txt/.md file as a folder corpus would give it, its id relative to ``base``."""
    try:
        rel = path.resolve().relative_to(base.resolve()).as_posix()
    except ValueError:
        raise DataError(f"{path} is not inside {base}",
                        hint="--base names the folder the file's id is relative to") from None
    passages = _file_passages(path, rel, split_words)
    if not passages:
        raise DataError(f"{path} is empty: no passage to add")
    yield from passages


def _hashed(p: Passage) -> bool:
    return p.id == stable_id(p.title, p.text)


def load_corpus(path: str | Path, **options: Any) -> list[Passage]:
    """The whole corpus in memory (fine for the shared 13k-passage corpus, not for a dump)."""
    return list(iter_corpus(path, **options))


def corpus_fingerprint(path: str | Path) -> str:
    """First 16 hex digits of the sha256 of the file's bytes (a folder: of each file's path
    and bytes, in path order). Indexes and caches store it to notice another corpus."""
    path = _check_path(Path(path))
    digest = hashlib.sha256()
    files = (sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path])
    try:
        for f in files:
            if path.is_dir():
                digest.update(f.relative_to(path).as_posix().encode() + b"\0")
            with open(f, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    digest.update(chunk)
    except OSError as exc:
        raise DataError(f"cannot read corpus {path}: {exc.strerror or exc}") from exc
    return digest.hexdigest()[:16]
