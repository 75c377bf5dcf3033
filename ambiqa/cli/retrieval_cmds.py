"""Retrieval commands: ``index``, ``colbert train`` and ``doctor``."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from ambiqa.cli.common import INDEX_ROOT_HELP
from ambiqa.doctor import prepare, run_checks
from ambiqa.errors import ConfigError
from ambiqa.paths import index_root
from ambiqa.retrieval.checkpoint import identity_checkpoint
from ambiqa.retrieval.kinds import (
    DEFAULT_KIND,
    addable_kinds,
    find_retriever_kind,
    names_text,
    retriever_kind_names,
    shardable_kinds,
)
from ambiqa.retrieval.training import train_colbert, validation_scores
from ambiqa.retrieval.triples import load_training_data

#: ``ambiqa index --help``'s account of the corpus formats (ambiqa.data.corpus documents them)
CORPUS_HELP = """corpus formats (a passage without an id gets a stable one: its file path, or a hash
of its title and text):

  JSONL, one passage per line; text in "text" or "contents"; "title" and "id" optional
    {"id": "p1", "title": "Paris", "text": "Paris is the capital of France."}
    {"contents": "Lyon is a city in France."}

  CSV or TSV with a header line naming the columns (text column: text, contents, passage,
  body, or --text-column); title and id columns optional
    id,title,text
    p1,Paris,Paris is the capital of France.

  a folder of .txt / .md files: one passage per file, titled by the file name, or
  --split-words 100 for ~100-word passages
    notes/paris.txt  notes/lyon.md  notes/sub/nice.txt

  Parquet (.parquet) with the JSONL fields as columns, if pyarrow is installed

example: ambiqa index my_notes/ --name notes --kind bm25 --split-words 100
         ambiqa ask "..." --program diva --index notes"""


def cmd_index(args: argparse.Namespace) -> int:
    import ambiqa.api as api  # loads DSPy: kept out of the parser, so --help stays fast

    t0 = time.perf_counter()
    result = api.index(args.corpus, api.IndexSettings(
        name=args.name, kind=args.kind, index_root=args.index_root,
        split_words=args.split_words, text_column=args.text_column, checkpoint=args.checkpoint,
        nranks=args.nranks, kmeans_share=args.kmeans_share, shards=args.shards,
        progress=True))
    kind = find_retriever_kind(result.kind)
    built = kind.describe_build(result.retriever) if kind and args.shards == 1 else None
    if built:
        from rich.console import Console  # rich loads only when there is something to print

        Console(stderr=True).print(f"[green]indexed[/] {built}")
    print(f"index {result.name!r} ({result.kind}, {result.n_passages:,} passages, "
          f"{result.fingerprint}) ready in {time.perf_counter() - t0:.0f} s; use it with "
          f"--index {result.name}")
    return 0


def cmd_index_add(args: argparse.Namespace) -> int:
    import ambiqa.api as api  # loads DSPy: kept out of the parser, so --help stays fast
    from ambiqa.retrieval.adding import addable  # loads DSPy (through ambiqa.data)

    addable(args.name, Path(args.index_root).expanduser() if args.index_root else index_root())
    result = api.open_index(args.name, root=args.index_root)
    n_before, fp_before = result.n_passages, result.fingerprint
    result.add([Path(f) for f in args.files], replace=args.replace,
               split_words=args.split_words, text_column=args.text_column, base=args.base)
    done = result.added or {}
    what = f"{done.get('added', 0):,} added"
    if done.get("replaced"):
        what += f", {done['replaced']:,} replaced"
    print(f"index {result.name!r} ({result.kind}): {what}, {n_before:,} -> "
          f"{result.n_passages:,} passages; fingerprint {fp_before} -> {result.fingerprint} "
          "(artifacts compiled against the old index are told it changed)"
          if result.fingerprint != fp_before else
          f"index {result.name!r} ({result.kind}): unchanged ({what}, all identical)")
    return 0


#: ``ambiqa index add`` is parsed on its own (``ambiqa index`` takes the corpus positionally)
INDEX_ADD = ("index", "add")


def index_add_parser() -> argparse.ArgumentParser:
    """The parser of ``ambiqa index add NAME FILES...``."""
    p = argparse.ArgumentParser(
        prog="ambiqa index add", formatter_class=argparse.RawDescriptionHelpFormatter,
        description=f"Add passages to the built index NAME ({names_text(addable_kinds())}; a "
                    "sharded index is refused with the command that rebuilds it). The index is "
                    "replaced only once the new one is complete; its fingerprint changes, so "
                    "artifacts compiled against it before are told the index changed. ColBERT "
                    "encodes only the new passages, with the index's centroids (rebuild after "
                    "adds that change the corpus a lot), and cannot --replace.",
        epilog=CORPUS_HELP.replace("example: ambiqa index my_notes/ --name notes --kind bm25 "
                                   "--split-words 100\n         ambiqa ask \"...\" --program "
                                   "diva --index notes", "")
        + "\n  a single .txt / .md file: one passage, its id the file's path relative to "
          "--base\n\nexample: ambiqa index add notes notes/new_meeting.md --base notes")
    p.add_argument("name", metavar="NAME",
                   help="the index to add to (as built: ambiqa index CORPUS --name NAME)")
    p.add_argument("files", nargs="+", metavar="FILES",
                   help="corpus files or folders in any format `ambiqa index` reads, or single "
                        ".txt/.md files")
    p.add_argument("--replace", action="store_true",
                   help="a passage whose id the index already holds replaces it (default: "
                        "refused, and nothing is added; "
                        f"{names_text(_replacing_kinds(), 'and')} only)")
    p.add_argument("--base", default=None, metavar="DIR",
                   help="single .txt/.md files: their ids are their paths relative to DIR "
                        "(default: their own folder); pass the folder the index was built from "
                        "to get the ids a rebuild would give")
    p.add_argument("--split-words", type=int, default=None, metavar="N",
                   help="folders and .txt/.md files: cut each file into passages of about N "
                        "words (use the build's value)")
    p.add_argument("--text-column", default=None,
                   help="the field holding the text when it is not text/contents/passage/body")
    p.add_argument("--index-root", default=None, help=INDEX_ROOT_HELP)
    p.set_defaults(fn=cmd_index_add, command="index add")
    return p


def parse_index_add(argv: list[str]) -> argparse.Namespace | None:
    """``ambiqa index add ...`` parsed, or None for any other command line (a corpus that is
    literally named ``add`` is written ``./add``)."""
    if tuple(argv[:2]) != INDEX_ADD:
        return None
    return index_add_parser().parse_args(argv[2:])


def cmd_colbert_train(args: argparse.Namespace) -> int:
    corpus = Path(args.corpus).expanduser() if args.corpus else None
    if corpus is None:
        from ambiqa.data import default_data_root  # loads DSPy (the package's loaders)

        root = default_data_root()
        corpus = root / "corpus" / "wiki_passages.jsonl" if root else None
    if corpus is None or not corpus.is_file():
        raise ConfigError(f"corpus file not found: {corpus}",
                          hint="pass --corpus CORPUS.jsonl (negatives are drawn from it)")
    t0 = time.perf_counter()
    out = train_colbert(args.out, dim=args.dim, steps=args.steps, bsize=args.bsize, lr=args.lr,
                        save_every=args.save_every, timeout_s=args.timeout, corpus=corpus,
                        sources=args.data or None, fresh=args.fresh, threads=args.threads,
                        nway=args.nway, dense_index=args.dense_index, distill=args.distill,
                        distill_alpha=args.distill_alpha,
                        negatives_per_positive=args.negatives_per_positive)
    print(f"trained ColBERT checkpoint at {out} ({time.perf_counter() - t0:.0f} s this run); "
          f"index with it: ambiqa index CORPUS --name NAME --checkpoint {out}")
    if args.validate:
        from ambiqa.data.corpus import load_corpus  # loads DSPy (through ambiqa.data)

        data = load_training_data(out.with_name(out.name + ".work"))
        passages = load_corpus(corpus)
        for label, ckpt in (("untrained (identity)", identity_checkpoint()), ("trained", out)):
            print(f"held-out training queries, {label}: "
                  f"{validation_scores(ckpt, data.validation, passages)}")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    if args.prepare:
        prepare(print_fn=print)
    ok = run_checks(print_fn=print, corpus=args.corpus, index=args.index,
                    index_root=args.index_root)
    return 0 if ok else 1


def _kinds_help() -> str:
    """``--kind``'s help from the registry: each kind with its summary, the default marked."""
    return names_text([f"{name} ({kind.summary}{', the default' if name == DEFAULT_KIND else ''})"
                       for name in retriever_kind_names()
                       if (kind := find_retriever_kind(name)) is not None])


def _unshardable_help() -> str:
    others = [n for n in retriever_kind_names() if n not in shardable_kinds()]
    if not others:
        return ""
    verb = "is" if len(others) == 1 else "are"
    return f"; {names_text(others, 'and')} {verb} refused: scores not comparable across shards"


def _replacing_kinds() -> list[str]:
    return [n for n in addable_kinds() if (k := find_retriever_kind(n)) and k.replaces]


def register(sub: argparse._SubParsersAction) -> None:
    """Add the retrieval sub-commands to the top-level parser."""
    p = sub.add_parser(
        "index", help="build a named retrieval index over your corpus (ColBERT by default)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Build a retrieval index NAME over CORPUS. Later commands name it once: "
                    "--index NAME (the kind is read from the index's manifest). To add "
                    "passages to a built index: ambiqa index add NAME FILES... (its own "
                    "--help).",
        epilog=CORPUS_HELP)
    p.add_argument("corpus", help="a JSONL, CSV, TSV or Parquet file, or a folder of .txt/.md "
                                  "files (formats below)")
    p.add_argument("--name", required=True,
                   help="the index's name: letters, digits, '.', '_', '-'; every later command "
                        "refers to it by this name (--index NAME); rebuilding replaces it")
    p.add_argument("--kind", default=DEFAULT_KIND, choices=retriever_kind_names(),
                   help=_kinds_help())
    p.add_argument("--split-words", type=int, default=None, metavar="N",
                   help="folder corpora: cut each file into passages of about N words "
                        "(100 is DPR's size); default: one passage per file")
    p.add_argument("--text-column", default=None,
                   help="the field holding the text when it is not text/contents/passage/body")
    p.add_argument("--index-root", default=None, help=INDEX_ROOT_HELP)
    p.add_argument("--checkpoint", default=None,
                   help="ColBERT checkpoint directory (default: the trained checkpoint in the "
                        "cache if built and measured better, else the identity checkpoint)")
    p.add_argument("--nranks", type=int, default=1,
                   help="indexing processes (colbert-ai ranks; helps only with spare cores)")
    p.add_argument("--kmeans-share", type=float, default=None,
                   help="share of passages encoded to train the centroids (default: "
                        "colbert-ai's rule capped so small corpora are not encoded twice)")
    p.add_argument("--shards", type=int, default=1,
                   help="split the corpus into this many indexes NAME-0..NAME-{n-1}, "
                        f"searched concurrently as one (--kind {names_text(shardable_kinds())}"
                        f"{_unshardable_help()})")
    p.set_defaults(fn=cmd_index)

    p = sub.add_parser("colbert", help="ColBERT checkpoints (train)")
    csub = p.add_subparsers(dest="colbert_command", required=True)
    t = csub.add_parser("train", help="fine-tune a ColBERT checkpoint from all-MiniLM-L6-v2 "
                                      "on CPU (resumable)")
    t.add_argument("--corpus", default=None,
                   help="corpus JSONL for negatives (default: the shared data's corpus)")
    t.add_argument("--data", action="append", default=[],
                   help="training split(s), repeatable (default asqa:train and hotpotqa:train)")
    t.add_argument("--out", default=None,
                   help="output directory (default $AMBIQA_CACHE/colbert/minilm-trained-DIM)")
    t.add_argument("--dim", type=int, default=384,
                   help="output dim: 384 starts from the identity projection, less from a "
                        "PCA projection (default 384)")
    t.add_argument("--steps", type=int, default=240,
                   help="optimizer steps (default 240: ~15-25 min on 2 shared cores)")
    t.add_argument("--bsize", type=int, default=8,
                   help="training examples per optimizer step (default 8)")
    t.add_argument("--nway", type=int, default=None,
                   help="passages per example, 1 positive + nway-1 hard negatives (default: 2, "
                        "or 4 with --dense-index)")
    t.add_argument("--dense-index", default=None,
                   help="a dense index over the same corpus (e.g. dense:wiki-dense) that mines "
                        "hard negatives beside BM25")
    t.add_argument("--distill", action="store_true",
                   help="train on the dense retriever's scores as teacher (KL loss; needs "
                        "--dense-index)")
    t.add_argument("--distill-alpha", type=float, default=20.0,
                   help="teacher inverse temperature (default 20, MiniLM's training scale)")
    t.add_argument("--negatives-per-positive", type=int, default=3,
                   help="training examples drawn per positive passage (default 3)")
    t.add_argument("--lr", type=float, default=1e-5, help="learning rate (default 1e-5)")
    t.add_argument("--save-every", type=int, default=50,
                   help="steps between resumable saves (default 50)")
    t.add_argument("--timeout", type=float, default=None,
                   help="seconds; stop (saved, resumable) when exceeded")
    t.add_argument("--threads", type=int, default=None, help="torch threads")
    t.add_argument("--fresh", action="store_true", help="discard an unfinished earlier run")
    t.add_argument("--validate", action="store_true",
                   help="afterwards, compare trained vs untrained on held-out training "
                        "queries (a few minutes)")
    t.set_defaults(fn=cmd_colbert_train)

    p = sub.add_parser("doctor", help="check the installation and print fixes")
    p.add_argument("--index", default=None, help="also check this index ([kind:]name)")
    p.add_argument("--index-root", default=None, help=INDEX_ROOT_HELP)
    p.add_argument("--corpus", default=None,
                   help="check the index's fingerprint against this corpus JSONL")
    p.add_argument("--prepare", action="store_true",
                   help="first assemble the default LM and compile colbert-ai's C++ "
                        "extensions (~2-3 min once, after the install), then check")
    p.set_defaults(fn=cmd_doctor)
