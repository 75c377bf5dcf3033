"""``ambiqa reader``: train and inspect the extractive Disambig-F1 reader.

``ambiqa reader train`` fine-tunes all-MiniLM-L6-v2 with a span head on ASQA training long
answers (see :mod:`ambiqa.reader_training.train`) into ``$AMBIQA_CACHE/readers/<name>``;
once it exists, D-F1 uses it by default (``--reader lm`` keeps the LM stand-in).
``ambiqa reader calibrate [DIR]`` recalibrates the null threshold on training examples and
revalidates; ``ambiqa reader info [DIR]`` checks a checkpoint (manifest, sha256) and prints
its manifest.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from ambiqa.errors import ConfigError
from ambiqa.jsonio import read_json


def cmd_reader_train(args: argparse.Namespace) -> int:
    from ambiqa.evaluation.extractive import readers_dir
    from ambiqa.reader_training import TrainConfig, train_reader

    out = Path(args.out).expanduser() if args.out else readers_dir() / args.name
    cfg = TrainConfig(train=args.train, base=args.base or "", epochs=args.epochs,
                      max_steps=args.max_steps, batch_size=args.batch_size, lr=args.lr,
                      seed=args.seed, max_length=args.max_length, doc_stride=args.doc_stride,
                      removed_negatives=args.removed_negatives,
                      asqa_passages=args.asqa_passages, hotpotqa=args.hotpotqa or "",
                      holdout=args.holdout, ambignq=args.ambignq or "",
                      corpus=args.corpus or "", long_answer_repeat=args.long_answer_repeat,
                      ambignq_lists=args.ambignq_lists)
    if args.pack:
        from ambiqa.reader_training import pack_for_device

        pack_for_device(args.pack, config=cfg, limit=args.limit,
                        log=lambda m: print(m, flush=True))
        return 0
    manifest = train_reader(out, config=cfg, dev=None if args.no_validate else args.dev,
                            limit=args.limit, threads=args.threads, save_every=args.save_every,
                            max_minutes=args.max_minutes, stop_at_step=args.stop_at_step,
                            fresh=args.fresh,
                            log=lambda m: print(m, flush=True),
                            command="ambiqa " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
                            calibration_sample=args.calibration_sample)
    print(f"reader {manifest['name']} written to {out} ({manifest['steps']} steps, "
          f"{manifest['train_s'] / 60:.1f} min)")
    return 0


def cmd_reader_finish(args: argparse.Namespace) -> int:
    from ambiqa.evaluation.extractive import readers_dir
    from ambiqa.reader_training import finish_from_device

    src = Path(args.device_out).expanduser()
    summary = read_json(src / "summary.json", error=ConfigError,
                        hint="give the output directory of benchmarks/reader_gpu_train.py")
    if not isinstance(summary, dict):
        raise ConfigError(f"{src / 'summary.json'} is not a JSON object",
                          hint="give the output directory of benchmarks/reader_gpu_train.py")
    runs = summary.get("runs") or []
    if args.run:
        runs = [r for r in runs if r.get("name") == args.run]
    if not runs:
        raise ConfigError(f"--run {args.run!r} is not in {src / 'summary.json'}",
                          hint="pick a name from its runs")
    run = max(runs, key=lambda r: r.get("best_f1", -1))
    run = {**run, "device": summary.get("device"), "torch": summary.get("torch")}
    out = Path(args.out).expanduser() if args.out else readers_dir() / args.name
    manifest = finish_from_device(out, [src / s for s in run["shards"]], pack=args.pack,
                                  run=run, dev=None if args.no_validate else args.dev,
                                  threads=args.threads, log=lambda m: print(m, flush=True),
                                  command="ambiqa " + " ".join(shlex.quote(a)
                                                               for a in sys.argv[1:]))
    print(f"reader {manifest['name']} written to {out} (run {run['name']}, epoch "
          f"{run.get('best_epoch')}, null threshold "
          f"{(manifest.get('calibration') or {}).get('null_threshold')})")
    return 0


def cmd_reader_info(args: argparse.Namespace) -> int:
    from ambiqa.evaluation.extractive import default_reader_dir, verify_checkpoint

    path = Path(args.path).expanduser() if args.path else default_reader_dir()
    manifest = verify_checkpoint(path)
    print(json.dumps(manifest, indent=2, ensure_ascii=False))
    return 0


def cmd_reader_install(args: argparse.Namespace) -> int:
    from ambiqa.evaluation.extractive import verify_checkpoint
    from ambiqa.evaluation.shipped_reader import install_shipped_reader

    path = install_shipped_reader(force=args.force, log=lambda m: print(m, flush=True))
    manifest = verify_checkpoint(path)
    print(f"{manifest['name']} at {path} (weights sha256 {manifest['weights']['sha256']})")
    return 0


def cmd_reader_calibrate(args: argparse.Namespace) -> int:
    from ambiqa.evaluation.extractive import default_reader_dir
    from ambiqa.reader_training import calibrate_and_validate

    path = Path(args.path).expanduser() if args.path else default_reader_dir()
    manifest = calibrate_and_validate(path, dev=None if args.no_validate else args.dev,
                                      threads=args.threads, calibration_sample=args.sample,
                                      limit=(manifest_limit(path)),
                                      long_answers_only=args.long_answers_only,
                                      on_holdout=args.on_holdout,
                                      log=lambda m: print(m, flush=True))
    print(f"{manifest['name']}: null threshold "
          f"{(manifest.get('calibration') or {}).get('null_threshold')}, validation "
          f"D-F1 on human long answers {(manifest.get('validation') or {}).get('d_f1_human')}")
    return 0


def manifest_limit(path: Path) -> int | None:
    """The training-question limit the checkpoint was trained with (calibration reuses it)."""
    from ambiqa.evaluation.extractive import read_manifest

    return (read_manifest(path).get("data") or {}).get("limit")


#: ``--dev`` help of the reader commands that validate a checkpoint
_DEV_HELP = "validation data for the manifest (default asqa:dev)"


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``ambiqa reader train|info``."""
    p = sub.add_parser("reader", help="the extractive Disambig-F1 reader (install, info, train)")
    rsub = p.add_subparsers(dest="reader_command", required=True)
    t = rsub.add_parser("train", help="fine-tune an extractive QA reader on ASQA training long "
                                      "answers (CPU, resumable)")
    t.add_argument("--train", default="asqa:train", help="training split (dev/test refused)")
    t.add_argument("--dev", default="asqa:dev", help="validation data for the manifest")
    t.add_argument("--no-validate", action="store_true", help="skip validation")
    t.add_argument("--name", default="minilm-asqa",
                   help="checkpoint name under $AMBIQA_CACHE/readers (default minilm-asqa; "
                        "D-F1 reads with the shipped minilm-asqa-v4 unless --reader names "
                        "another)")
    t.add_argument("--out", default=None, help="output directory (outside any git checkout)")
    t.add_argument("--base", default=None,
                   help="local encoder directory (default: packaged all-MiniLM-L6-v2)")
    t.add_argument("--epochs", type=float, default=2.0,
                   help="passes over the training examples (default 2)")
    t.add_argument("--max-steps", type=int, default=0, help="fixed step count (overrides "
                                                            "--epochs)")
    t.add_argument("--batch-size", type=int, default=16,
                   help="examples per optimizer step (default 16)")
    t.add_argument("--lr", type=float, default=1e-4, help="learning rate (default 1e-4)")
    t.add_argument("--seed", type=int, default=0,
                   help="seed for the data order and dropout (default 0)")
    t.add_argument("--max-length", type=int, default=384, help="encoder window in tokens")
    t.add_argument("--doc-stride", type=int, default=128,
                   help="overlap between windows of a long context")
    t.add_argument("--removed-negatives", type=float, default=0.33,
                   help="share of answerable examples also used with the answer sentence "
                        "removed, as no-answer examples (0 = none)")
    t.add_argument("--asqa-passages", action="store_true",
                   help="add ASQA's grounding passages of the training questions as a source "
                        "(passages with a pair's answer; a same-question passage without it "
                        "as no-answer)")
    t.add_argument("--hotpotqa", default=None, metavar="SPEC",
                   help="add a HotpotQA training split as a source, e.g. hotpotqa:train "
                        "(supporting paragraphs with the answer; a distractor as no-answer)")
    t.add_argument("--holdout", type=int, default=0,
                   help="keep the last N --train questions out of training: their grounding "
                        "passages are the training-split validation set in the manifest")
    t.add_argument("--ambignq", default=None, metavar="SPEC",
                   help="add distant supervision from an AmbigNQ training split, e.g. "
                        "ambignq:train_light: its disambiguated questions over --corpus "
                        "passages that contain their answers (evaluation questions dropped)")
    t.add_argument("--corpus", default=None, metavar="FILE",
                   help="passage corpus (JSONL) that --ambignq reads")
    t.add_argument("--ambignq-lists", action="store_true",
                   help="with --ambignq: also its multi-interpretation questions as "
                        "long-answer-like lists (one sentence per interpretation)")
    t.add_argument("--long-answer-repeat", type=int, default=1,
                   help="times the ASQA long-answer examples appear per epoch (the text D-F1 "
                        "reads; the other sources are larger)")
    t.add_argument("--pack", default=None, metavar="DIR",
                   help="do not train: write the pre-tokenised examples and a half-precision "
                        "encoder to DIR for benchmarks/reader_gpu_train.py on another machine "
                        "(then `ambiqa reader finish`)")
    t.add_argument("--limit", type=int, default=None, help="use the first N training questions")
    t.add_argument("--threads", type=int, default=2, help="torch threads")
    t.add_argument("--save-every", type=int, default=25, help="steps between resumable saves")
    t.add_argument("--max-minutes", type=float, default=None,
                   help="stop early at this training time and finish with the steps taken")
    t.add_argument("--stop-at-step", type=int, default=None,
                   help="stop at this step, keeping the --max-steps schedule: rebuilds a reader "
                        "whose manifest says its schedule was cut (its 'steps')")
    t.add_argument("--fresh", action="store_true", help="discard a partial earlier run")
    t.add_argument("--calibration-sample", type=int, default=400,
                   help="training examples used to calibrate the null threshold (0 = none)")
    t.set_defaults(fn=cmd_reader_train)

    c = rsub.add_parser("calibrate", help="recalibrate the null threshold on training "
                                          "examples and revalidate (rewrites the manifest)")
    c.add_argument("path", nargs="?", default=None,
                   help="checkpoint directory (default: the default reader in the cache)")
    c.add_argument("--sample", type=int, default=400, help="training examples to calibrate on")
    c.add_argument("--long-answers-only", action="store_true",
                   help="calibrate on long-answer examples only (what D-F1 reads), not on the "
                        "extra passage sources")
    c.add_argument("--on-holdout", action="store_true",
                   help="calibrate on the long answers of the held-out training questions "
                        "(a reader trained with --holdout N for several epochs: its own "
                        "training examples overstate its margins)")
    c.add_argument("--dev", default="asqa:dev", help=_DEV_HELP)
    c.add_argument("--no-validate", action="store_true", help="skip validation")
    c.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    c.set_defaults(fn=cmd_reader_calibrate)

    f = rsub.add_parser("finish", help="make a reader checkpoint from weights trained by "
                                       "benchmarks/reader_gpu_train.py on a pack")
    f.add_argument("device_out", help="the device script's output directory (summary.json "
                                      "and the best-<run>-NN.safetensors shards)")
    f.add_argument("--pack", required=True, help="the pack the weights were trained from")
    f.add_argument("--run", default=None, help="which run of summary.json (default: the best "
                                               "on the holdout)")
    f.add_argument("--name", default="minilm-asqa-v3",
                   help="checkpoint name under $AMBIQA_CACHE/readers")
    f.add_argument("--out", default=None, help="output directory (outside any git checkout)")
    f.add_argument("--dev", default="asqa:dev", help=_DEV_HELP)
    f.add_argument("--no-validate", action="store_true", help="skip validation")
    f.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    f.set_defaults(fn=cmd_reader_finish)

    n = rsub.add_parser("install", help="put the reader that ships with ambiqa "
                                         "(extractive:minilm-asqa-v4) into the cache; D-F1 "
                                         "does this on first use")
    n.add_argument("--force", action="store_true",
                   help="rebuild it even if the cache holds it (after a corrupt copy)")
    n.set_defaults(fn=cmd_reader_install)
    i = rsub.add_parser("info", help="check a reader checkpoint and print its manifest")
    i.add_argument("path", nargs="?", default=None,
                   help="checkpoint directory (default: the default reader in the cache)")
    i.set_defaults(fn=cmd_reader_info)
