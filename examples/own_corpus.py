"""Your corpus, your questions, your DSPy app -- ambiqa from Python only.

What it does, step by step:

1. index a folder of .txt files (``examples/notes/``) as a BM25 index named ``notes``;
2. build ``ambiqa.Diva`` over it with a plain function ``search(query, k)`` as retriever;
3. compile it with ``labeled`` demos from a 10-line JSONL question file
   (``examples/questions.jsonl``), and save the artifact;
4. in a fresh Python process: load the artifact, ``await prog.acall(question=...)``, with a
   callback of the user's own (an MLflow-style ``dspy`` ``BaseCallback``) still receiving
   every event beside ambiqa's cost tracing.

Run it::

    python examples/own_corpus.py                       # the embedded model (default)
    python examples/own_corpus.py --lm openai/gpt-4o-mini
    python examples/own_corpus.py --lm fake             # a scripted fake LM (tests, seconds)

``--workdir`` (default: a temporary directory) receives the index and the artifact.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
NOTES = HERE / "notes"
QUESTIONS = HERE / "questions.jsonl"
QUESTION = "What is Paris?"  # not one of the training questions


# --- the user's own pieces -------------------------------------------------------------------

def make_search(index_root: Path) -> Any:
    """The user's retriever: any function ``query, k -> passages`` (here over a BM25 index
    ambiqa built; it could call Elasticsearch, a vector store, a web API...)."""
    import ambiqa

    index = ambiqa.open_index("notes", root=index_root)  # the kind comes from its manifest

    def search(query: str, k: int) -> list[dict[str, Any]]:
        return [{"id": p.id, "title": p.title, "text": p.text} for p in index.search(query, k)]

    return search


def make_logger() -> Any:
    """What MLflow or Langfuse autologging installs: a DSPy callback of the user's own."""
    from dspy.utils.callback import BaseCallback

    class EventLog(BaseCallback):
        def __init__(self) -> None:
            self.events: list[str] = []

        def on_module_start(self, call_id, instance, inputs):
            self.events.append(f"module:{type(instance).__name__}")

        def on_lm_end(self, call_id, outputs, exception=None):
            self.events.append("lm_end")

    return EventLog()


def make_lm(spec: str) -> Any:
    """``fake``: a scripted LM (ambiqa.testing) answering each Diva step, for tests; anything
    else: :func:`ambiqa.make_lm` (embedded model, or an endpoint such as openai/gpt-4o-mini)."""
    import ambiqa

    if spec != "fake":
        return ambiqa.make_lm(None if spec == "embedded" else spec)
    from ambiqa.testing import scripted_lm, titles_as_answers

    return scripted_lm({
        "TypeAmbiguity": {"reason": "Paris names a city in France and one in Texas.",
                          "ambiguity_type": "AmbObj"},
        "PseudoInterpretations": {"interpretations": [
            "What is Paris, the capital of France?", "What is Paris, the city in Texas?"]},
        "VerifyRetrieval": {"evidence": "[1] quoted", "verdict": "yes"},
        "ClarifyFromPassages": titles_as_answers,
        "WriteLongAnswer": lambda inp: {"long_answer": "Readings: " + inp["interpretations"]},
        "ClosedBookLongAnswer": {"long_answer": "Paris is the capital of France."},
        # D-F1's reader when no extractive one is installed (the compile scores candidates)
        "ReadShortAnswer": {"answer": "Paris"},
    })


def make_encoder(spec: str) -> Any:
    """Diva ranks passages with a sentence encoder (MiniLM by default); the fake run uses a
    hashing encoder so it needs no model."""
    if spec != "fake":
        return None
    from ambiqa.testing import HashEncoder

    return HashEncoder(dim=64)


# --- the two halves --------------------------------------------------------------------------

def build_and_compile(workdir: Path, lm_spec: str) -> Path:
    """Steps 1-3: index, build, compile, save. Returns the artifact path."""
    import dspy

    import ambiqa

    built = ambiqa.index(NOTES, name="notes", kind="bm25", index_root=workdir / "indexes")
    print(f"indexed {built.n_passages} passages as {built.spec}")
    dspy.configure(lm=make_lm(lm_spec))  # plain DSPy set-up: ambiqa traces beside it
    diva = ambiqa.Diva(retriever=make_search(workdir / "indexes"),
                       encoder=make_encoder(lm_spec), temperature=0.0)
    result = ambiqa.compile(diva, QUESTIONS, optimizer="labeled", k=2,
                            out=workdir / "diva.json")
    # the compile scored zero-shot, the input and the labeled program on held-out training
    # questions and shipped the best (zero-shot unless beaten); this line says which
    print(result.manifest["optimizer"]["selection"].get("reason", "not checked"))
    print(f"compiled: demos per predictor {result.manifest['demos_per_predictor']}")
    return result.path


async def ask(artifact: Path, workdir: Path, lm_spec: str, question: str) -> dict[str, Any]:
    """Step 4 (in a fresh process): load, then ``await prog.acall`` with the user's callback."""
    import dspy

    import ambiqa

    logger = make_logger()
    dspy.configure(lm=make_lm(lm_spec), callbacks=[logger])
    prog = ambiqa.load(artifact, retriever=make_search(workdir / "indexes"),
                       program_kwargs={"encoder": make_encoder(lm_spec)})
    pred = await prog.acall(question=question)
    return {"answer": pred.answer, "interpretations": pred.interpretations,
            "lm_calls": pred.trace["lm_calls"], "callback_events": len(logger.events),
            "callback_lm_ends": logger.events.count("lm_end"),
            "demos": {name: len(p.demos) for name, p in prog.named_predictors()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lm", default="embedded", help="embedded, fake, or provider/model")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--question", default=QUESTION)
    parser.add_argument("--ask", default=None, metavar="ARTIFACT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="ambiqa-example-"))
    if args.ask:  # the fresh process
        print(json.dumps(asyncio.run(ask(Path(args.ask), workdir, args.lm, args.question))))
        return 0
    artifact = build_and_compile(workdir, args.lm)
    child = subprocess.run([sys.executable, __file__, "--ask", str(artifact), "--lm", args.lm,
                            "--workdir", str(workdir), "--question", args.question],
                           capture_output=True, text=True, check=False)
    if child.returncode != 0:
        print(child.stderr, file=sys.stderr)
        return child.returncode
    out = json.loads(child.stdout.strip().splitlines()[-1])
    print(json.dumps(out, indent=2))
    ok = out["callback_lm_ends"] == out["lm_calls"] > 0
    print("your callback saw every LM call" if ok else "your callback MISSED LM calls")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
