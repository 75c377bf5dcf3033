"""Train the extractive D-F1 reader from a pre-tokenised pack on an accelerator (or the CPU).

Standalone on purpose: it needs only torch, transformers, safetensors and numpy, so it runs on
a lent GPU machine where ambiqa and its data are absent. ``ambiqa reader pack`` writes the pack
(the encoder in half precision with only the word-embedding rows the data uses, the training
windows and the training-split holdout windows, as token ids); this script trains it with the
same loop as ``ambiqa reader train`` (AdamW, decay groups, frozen word embeddings, linear
warm-up then decay, gradient clipping at 1.0, the data order a function of (seed, epoch)), in
bf16 autocast on a GPU, and after every epoch scores the holdout (the long answers of the last
ASQA *training* questions, never dev) with a SQuAD 2.0 F1 on token ids at the best null
threshold. The best epoch of each configuration is written back as half-precision safetensors
shards of at most 15 MiB (the trainable weights only; the frozen word embeddings stay those of
the packaged encoder); ``ambiqa reader finish`` turns one into a reader checkpoint.

    python benchmarks/reader_gpu_train.py PACK_DIR OUT_DIR --runs "lr=1e-4,epochs=6" \\
        --runs "lr=5e-5,epochs=8"
    python benchmarks/reader_gpu_train.py PACK_DIR /tmp/out --max-steps 3   # CPU smoke test

Resumable: with ``--state DIR`` every finished epoch's full state (weights, AdamW moments,
progress) is saved atomically, and a rerun continues from it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

SHARD_BYTES = 15 * 1024 * 1024


def load_pack(pack: Path) -> dict[str, Any]:
    """The pack's metadata, encoder config/weights and windows (numpy arrays)."""
    import numpy as np

    meta = json.loads((pack / "pack.json").read_text(encoding="utf-8"))
    data = {}
    for split in ("train", "holdout"):
        z = np.load(pack / f"{split}.npz")
        data[split] = {k: z[k] for k in z.files}
    return {"meta": meta, "data": data}


def windows_of(arrays: dict[str, Any]) -> list[dict[str, Any]]:
    """Per-window dicts (ids, context_start, start, end, example) from the packed arrays."""
    offs = arrays["offsets"]
    out = []
    for i in range(len(arrays["lengths"])):
        a, b = int(offs[i]), int(offs[i + 1])
        out.append({"ids": arrays["ids"][a:b].astype("int64"),
                    "cstart": int(arrays["context_start"][i]),
                    "start": int(arrays["start"][i]), "end": int(arrays["end"][i]),
                    "example": int(arrays["example"][i])})
    return out


def batch_tensors(batch: list[dict[str, Any]], pad: int, device: Any) -> dict[str, Any]:
    """Padded input tensors; token types 1 from the context start on (as the reader builds)."""
    import torch

    width = max(len(w["ids"]) for w in batch)
    ids = torch.full((len(batch), width), pad, dtype=torch.long)
    types = torch.zeros((len(batch), width), dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for i, w in enumerate(batch):
        n = len(w["ids"])
        ids[i, :n] = torch.from_numpy(w["ids"])
        types[i, w["cstart"]:n] = 1
        mask[i, :n] = 1
    return {"input_ids": ids.to(device), "token_type_ids": types.to(device),
            "attention_mask": mask.to(device)}


def lr_factor(step: int, total: int, warmup: int) -> float:
    """The schedule of ``ambiqa reader train``: linear warm-up, then linear decay to 0."""
    if step < warmup:
        return (step + 1) / max(1, warmup)
    return max(0.0, (total - step) / max(1, total - warmup))


def _bag_f1(pred: list[int], gold: list[int]) -> float:
    from collections import Counter

    if not pred or not gold:
        return float(pred == gold)
    common = sum((Counter(pred) & Counter(gold)).values())
    if not common:
        return 0.0
    p, r = common / len(pred), common / len(gold)
    return 2 * p * r / (p + r)


def evaluate(model: Any, wins: list[dict[str, Any]], pad: int, device: Any,
             max_answer_tokens: int = 30) -> dict[str, float]:
    """SQuAD 2.0 F1 on token ids over the holdout examples, at threshold 0 and at the best
    null threshold (the calibration ``ambiqa reader calibrate`` makes afterwards)."""
    import torch

    model.eval()
    best: dict[int, tuple[float, list[int]]] = {}
    null: dict[int, float] = {}
    gold: dict[int, list[int]] = {}
    with torch.inference_mode():
        for i in range(0, len(wins), 64):
            batch = wins[i:i + 64]
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16,
                                enabled=device.type == "cuda"):
                out = model(**batch_tensors(batch, pad, device))
            s_all = out.start_logits.float().cpu()
            e_all = out.end_logits.float().cpu()
            for w, s, e in zip(batch, s_all, e_all, strict=True):
                n, c0, ex = len(w["ids"]), w["cstart"], w["example"]
                s, e = s[:n], e[:n]
                null[ex] = min(null.get(ex, math.inf), float(s[0] + e[0]))
                if w["start"] > 0:
                    gold[ex] = w["ids"][w["start"]:w["end"] + 1].tolist()
                gold.setdefault(ex, [])
                ctx_s = s[c0:n - 1]
                ctx_e = e[c0:n - 1]
                scores = ctx_s[:, None] + ctx_e[None, :]
                m = len(ctx_s)
                valid = torch.triu(torch.ones(m, m, dtype=torch.bool)) & ~torch.triu(
                    torch.ones(m, m, dtype=torch.bool), diagonal=max_answer_tokens)
                scores = scores.masked_fill(~valid, -math.inf)
                flat = int(torch.argmax(scores))
                a, b = divmod(flat, m)
                sc = float(scores[a, b])
                if ex not in best or sc > best[ex][0]:
                    best[ex] = (sc, w["ids"][c0 + a:c0 + b + 1].tolist())
    model.train()
    margins, gains, nulls = [], [], []
    for ex, (sc, span) in best.items():
        margins.append(sc - null[ex])
        g = gold.get(ex) or []
        gains.append(_bag_f1(span, g) if g else 0.0)
        nulls.append(0.0 if g else 1.0)
    n = max(1, len(margins))

    def f1_at(th: float) -> float:
        return sum(g if m > th else z for m, g, z in zip(margins, gains, nulls,
                                                         strict=True)) / n

    cands = sorted({0.0, *(m - 1e-6 for m in margins)})
    th = max(cands, key=lambda t: (round(f1_at(t), 6), -abs(t)))
    return {"f1_at_zero": round(f1_at(0.0), 4), "f1_best": round(f1_at(th), 4),
            "best_threshold": round(th, 4), "n": len(margins)}


def save_shards(state: dict[str, Any], out: Path, stem: str) -> list[str]:
    """Half-precision safetensors shards of at most ``SHARD_BYTES`` each, written atomically."""
    from safetensors.torch import save_file

    names: list[str] = []
    shard: dict[str, Any] = {}
    size = 0

    def flush() -> None:
        nonlocal shard, size
        if not shard:
            return
        name = f"{stem}-{len(names):02d}.safetensors"
        tmp = out / f".{name}.tmp"
        save_file(shard, str(tmp))
        os.replace(tmp, out / name)
        names.append(name)
        shard, size = {}, 0

    for key, val in state.items():
        t = val.detach().to("cpu").half().contiguous()
        nbytes = t.numel() * 2
        if size + nbytes > SHARD_BYTES - 65536:
            flush()
        shard[key] = t
        size += nbytes
    flush()
    return names


def train_run(pack: dict[str, Any], enc_dir: Path, run: dict[str, Any], device: Any,
              max_steps: int | None, log: Any, state_dir: Path | None,
              deadline: float | None = None) -> dict[str, Any]:
    """One configuration: train, score the holdout after every epoch, keep the best epoch."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import AutoConfig, AutoModelForQuestionAnswering

    meta = pack["meta"]
    seed = int(run.get("seed", meta["config"]["seed"]))
    lr = float(run["lr"])
    epochs = float(run["epochs"])
    bs = int(run.get("batch_size", meta["config"]["batch_size"]))
    warm = float(run.get("warmup", meta["config"]["warmup"]))
    wd = float(meta["config"]["weight_decay"])
    train = windows_of(pack["data"]["train"])
    hold = windows_of(pack["data"]["holdout"])
    # drop=a+b leaves those training sources out (the "example" column of a training window
    # is its source's index in pack.json's "sources")
    dropped = [x for x in str(run.get("drop") or "").split("+") if x]
    if dropped:
        names = list(meta.get("sources") or [])
        unknown = [x for x in dropped if x not in names]
        if unknown:
            raise SystemExit(f"drop={'+'.join(unknown)}: not a source of this pack {names}")
        gone = {names.index(x) for x in dropped}
        train = [w for w in train if w["example"] not in gone]
    pad = int(meta["pad_id"])
    spe = math.ceil(len(train) / bs)
    total = max(1, math.ceil(epochs * spe))
    if max_steps:
        total = min(total, max_steps)
    warmup = int(warm * total)
    torch.manual_seed(seed)
    config = AutoConfig.from_pretrained(enc_dir)
    model = AutoModelForQuestionAnswering.from_config(config)
    own = set(model.state_dict())
    # the sentence encoder's pooler (and a stored position_ids buffer) have no place in a
    # span reader: drop them, as from_pretrained does
    weights = {k: v.float() for k, v in load_file(str(enc_dir / "encoder.safetensors")).items()
               if k in own}
    missing, unexpected = model.load_state_dict(weights, strict=False)
    assert not unexpected, unexpected
    assert all(k.startswith("qa_outputs") for k in missing), missing
    model.get_input_embeddings().weight.requires_grad_(False)
    model.to(device)
    model.train()
    no_decay_names = {n for n, _ in model.named_parameters()
                      if n.endswith("bias") or "LayerNorm" in n}
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    optim = torch.optim.AdamW(
        [{"params": [p for n, p in trainable if n not in no_decay_names], "weight_decay": wd},
         {"params": [p for n, p in trainable if n in no_decay_names], "weight_decay": 0.0}],
        lr=lr)
    tag = run.get("name") or f"lr{lr:g}-ep{epochs:g}-s{seed}"
    history: list[dict[str, Any]] = []
    step = 0
    best_f1, best_state, best_epoch = -1.0, None, 0
    sdir = state_dir / tag if state_dir else None
    if sdir and (sdir / "progress.json").is_file():  # resume after the last finished epoch
        prog = json.loads((sdir / "progress.json").read_text())
        model.load_state_dict(load_file(str(sdir / "model.safetensors")))
        optim.load_state_dict(torch.load(sdir / "optim.pt", weights_only=True))
        step, history = int(prog["step"]), prog["history"]
        best_f1, best_epoch = float(prog["best_f1"]), int(prog["best_epoch"])
        if (sdir / "best.safetensors").is_file():
            best_state = load_file(str(sdir / "best.safetensors"))
        log(f"[{tag}] resuming at step {step}/{total}")
    t0 = time.perf_counter()
    loss_sum, loss_n = 0.0, 0
    while step < total:
        epoch, pos = divmod(step, spe)
        order = list(range(len(train)))
        random.Random(seed * 7919 + epoch).shuffle(order)
        batch = [train[i] for i in order[pos * bs:(pos + 1) * bs]]
        torch.manual_seed(seed * 1_000_003 + step)
        inputs = batch_tensors(batch, pad, device)
        inputs["start_positions"] = torch.tensor([w["start"] for w in batch], device=device)
        inputs["end_positions"] = torch.tensor([w["end"] for w in batch], device=device)
        for g in optim.param_groups:
            g["lr"] = lr * lr_factor(step, total, warmup)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16,
                            enabled=device.type == "cuda"):
            loss = model(**inputs).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        optim.zero_grad(set_to_none=True)
        step += 1
        loss_sum += float(loss.detach())
        loss_n += 1
        late = deadline is not None and time.monotonic() > deadline
        if step % spe == 0 or step == total or late:
            scores = evaluate(model, hold, pad, device)
            rec = {"epoch": round(step / spe, 3), "step": step,
                   "train_loss": round(loss_sum / max(1, loss_n), 4),
                   "s": round(time.perf_counter() - t0, 1), **scores}
            history.append(rec)
            loss_sum, loss_n = 0.0, 0
            log(f"[{tag}] {json.dumps(rec)}")
            if scores["f1_best"] > best_f1:
                best_f1, best_epoch = scores["f1_best"], len(history)
                best_state = {k: v.detach().to("cpu").clone()
                              for k, v in model.state_dict().items()
                              if not k.endswith("word_embeddings.weight")}
            if sdir:
                sdir.mkdir(parents=True, exist_ok=True)
                save_file({k: v.detach().cpu().contiguous()
                           for k, v in model.state_dict().items()},
                          str(sdir / ".model.tmp"))
                os.replace(sdir / ".model.tmp", sdir / "model.safetensors")
                torch.save(optim.state_dict(), sdir / ".optim.tmp")
                os.replace(sdir / ".optim.tmp", sdir / "optim.pt")
                if best_state is not None:
                    save_file({k: v.contiguous() for k, v in best_state.items()},
                              str(sdir / ".best.tmp"))
                    os.replace(sdir / ".best.tmp", sdir / "best.safetensors")
                tmp = sdir / ".progress.tmp"
                tmp.write_text(json.dumps({"step": step, "history": history,
                                           "best_f1": best_f1, "best_epoch": best_epoch}))
                os.replace(tmp, sdir / "progress.json")
            if late and step < total:
                log(f"[{tag}] deadline reached at step {step}/{total}: stopping this run")
                break
    return {"name": tag, "lr": lr, "epochs": epochs, "seed": seed, "batch_size": bs,
            "dropped_sources": dropped, "windows": len(train),
            "steps": step, "steps_per_epoch": spe, "history": history,
            "best_epoch": best_epoch, "best_f1": best_f1, "best_state": best_state,
            "train_s": round(time.perf_counter() - t0, 1)}


def parse_run(text: str) -> dict[str, Any]:
    """``"lr=1e-4,epochs=6,seed=0"`` -> a run configuration."""
    out: dict[str, Any] = {}
    for part in text.split(","):
        k, _, v = part.partition("=")
        out[k.strip()] = v.strip()
    if "lr" not in out or "epochs" not in out:
        raise SystemExit(f"--runs {text!r}: give at least lr=... and epochs=...")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("pack", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--runs", action="append", default=[],
                    help='a configuration "lr=..,epochs=..[,seed=..,batch_size=..,name=..,'
                         'drop=source+source]"; repeat for several')
    ap.add_argument("--max-steps", type=int, default=None, help="cap every run (smoke test)")
    ap.add_argument("--state", type=Path, default=None, help="resumable state directory")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="wall-clock budget for all runs: a run past it stops (after scoring "
                         "the holdout) and its best epoch is still written")
    args = ap.parse_args(argv)
    import torch

    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available()
                          else ("cpu" if args.device == "auto" else args.device))
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    args.out.mkdir(parents=True, exist_ok=True)
    pack = load_pack(args.pack)
    runs = [parse_run(r) for r in (args.runs or ["lr=1e-4,epochs=4"])]
    log_path = args.out / "train_log.txt"

    def log(msg: str) -> None:
        print(msg, flush=True)
        with log_path.open("a", encoding="utf-8") as fh:
            fh.write(msg + "\n")

    log(f"device {device} ({torch.cuda.get_device_name(0) if device.type == 'cuda' else 'cpu'})"
        f", torch {torch.__version__}, {len(pack['data']['train']['lengths'])} training "
        f"windows, {len(pack['data']['holdout']['lengths'])} holdout windows")
    summary = []
    deadline = time.monotonic() + args.budget_s if args.budget_s else None
    for run in runs:
        if deadline is not None and time.monotonic() > deadline:
            log(f"budget spent: run {run} not started")
            continue
        res = train_run(pack, args.pack, run, device, args.max_steps, log, args.state,
                        deadline)
        shards = save_shards(res.pop("best_state") or {}, args.out, f"best-{res['name']}")
        res["shards"] = shards
        summary.append(res)
        tmp = args.out / ".summary.tmp"
        tmp.write_text(json.dumps({"device": str(device), "torch": torch.__version__,
                                   "pack": pack["meta"].get("fingerprint"),
                                   "runs": summary}, indent=1))
        os.replace(tmp, args.out / "summary.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
