"""Artifacts and security: loading never unpickles; malformed artifacts are refused whole;
API keys never reach exported prompts, logs or results; importing ambiqa opens no socket;
names inside artifacts cannot steer a read or a write outside the chosen directories."""

from __future__ import annotations

import ast
import json
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ambiqa.errors import AmbiqaError, ArtifactError
from ambiqa.testing import SeededEncoder
from tests.faults.conftest import cli_env, run_cli, small_passages

pytestmark = pytest.mark.fault("Artifacts / security")

ROOT = Path(__file__).resolve().parents[2]
SECRET = "sk-fake-DO-NOT-LEAK-8d1f0c"


def _artifact(tmp_path: Path, program: str = "vanilla_rag") -> Path:
    """A real artifact: a compiled (labeled demos) program saved by ambiqa itself."""
    import dspy

    from ambiqa.optimizers.artifact import save_artifact
    from ambiqa.programs.registry import build_program

    prog = build_program(program, retriever=None)
    for _, pred in prog.named_predictors():
        pred.demos = [dspy.Example(question="Who wrote Emma?", long_answer="Jane Austen.",
                                   passages="[1] Emma: a novel by Jane Austen.",
                                   pairs=[], interpretations="(none)").with_inputs("question")]
    path = tmp_path / "art" / f"{program}.json"
    save_artifact(path, prog, {"program": program, "program_config": {},
                               "ambiqa_version": "0.1.0", "lm": "scripted/fake",
                               "retriever": {"kind": None, "index": None, "fingerprint": None},
                               "metric": "rouge-l", "optimizer": {"name": "labeled"},
                               "created": "2026-01-01T00:00:00+00:00"})
    return path


# ---- no unpickling -------------------------------------------------------------------------
@pytest.fixture()
def no_pickle(monkeypatch):
    calls: list[str] = []

    def refuse(name):
        def f(*a, **k):
            calls.append(name)
            raise AssertionError(f"{name} called while loading")
        return f
    # (pickle.Unpickler stays: libraries subclass it at import time; every stdlib entry point
    # to it goes through these functions)
    for name in ("load", "loads", "_load", "_loads"):
        monkeypatch.setattr(pickle, name, refuse(f"pickle.{name}"))
    import torch

    real_load = torch.load

    def checked_torch_load(*a, **k):  # plain torch.load is fine only while it is weights_only
        if k.get("weights_only") is False:
            calls.append("torch.load(weights_only=False)")
            raise AssertionError("torch.load(weights_only=False)")
        return real_load(*a, **k)
    monkeypatch.setattr(torch, "load", checked_torch_load)
    return calls


def test_loading_artifacts_and_indexes_never_unpickles(tmp_path, fault_colbert_index,
                                                       no_pickle):
    from ambiqa.optimizers.artifact import load_artifact
    from ambiqa.retrieval.bm25 import BM25Retriever
    from ambiqa.retrieval.dense import DenseRetriever

    art = _artifact(tmp_path)
    load_artifact(art)
    BM25Retriever.build(small_passages(), tmp_path / "bm25")
    BM25Retriever.load(tmp_path / "bm25").search("Ron Weasley", 2)
    DenseRetriever.build(small_passages(), tmp_path / "dense", encoder=SeededEncoder())
    DenseRetriever.load(tmp_path / "dense", encoder=SeededEncoder()) \
        if "encoder" in DenseRetriever.load.__code__.co_varnames else \
        DenseRetriever.load(tmp_path / "dense")
    from ambiqa.retrieval.colbert import ColBERTRetriever

    colbert = ColBERTRetriever.load(fault_colbert_index.parent, fault_colbert_index.name)
    assert colbert.search("Belgium language", 2)  # the search loads the index tensors
    assert no_pickle == []


def test_torch_load_refuses_pickled_code(tmp_path):
    """colbert-ai reads its index tensors with a plain ``torch.load(path)``; that is safe only
    because torch (>= 2.6, pinned 2.13) defaults to ``weights_only=True``. Pin it."""
    import torch

    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (Path.touch, (marker,))
    bad = tmp_path / "0.codes.pt"
    torch.save({"codes": Evil()}, bad)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(bad, map_location="cpu")  # exactly colbert-ai's call
    assert not marker.exists()


def test_source_never_unpickles():
    """Grep: no pickle, no ``torch.load`` without ``weights_only=True``, no
    ``allow_pickle=True``, no DSPy ``save_program=True`` anywhere in the package."""
    offenders = []
    for path in (ROOT / "ambiqa").rglob("*.py"):
        source = path.read_text(encoding="utf-8")
        for n, line in enumerate(source.splitlines(), 1):
            code = line.split("#", 1)[0]
            if re.search(r"\bimport pickle\b|\bpickle\.load|\bcloudpickle\b|\bdill\b", code) \
                    or re.search(r"allow_pickle\s*=\s*True", code) \
                    or ("torch.load(" in code and "weights_only=True" not in code):
                offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
        # save_program=True as a real keyword argument of a call (the AST, so the docstring and
        # the error message that *refuse* it are not offenders).
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Call):
                for kw in node.keywords:
                    if kw.arg == "save_program" and isinstance(kw.value, ast.Constant) \
                            and kw.value.value is True:
                        where = f"{path.relative_to(ROOT)}:{node.lineno}"
                        offenders.append(f"{where}: save_program=True")
    assert offenders == []


# ---- malformed artifacts are refused whole -------------------------------------------------
def _mutations(doc: dict) -> dict[str, object]:
    import copy

    def m(fn):
        d = copy.deepcopy(doc)
        return fn(d) or d
    first = next(iter(doc["state"]))
    return {
        "extra_top_key": m(lambda d: d.update(extra=1)),
        "missing_state": m(lambda d: d.pop("state")),
        "missing_manifest_key": m(lambda d: d["manifest"].pop("program")),
        "schema_version_99": m(lambda d: d.update(schema_version=99)),
        "schema_version_str": m(lambda d: d.update(schema_version="2")),
        "wrong_format": m(lambda d: d.update(format="pickle")),
        "state_not_object": m(lambda d: d.update(state=[1, 2])),
        "unknown_program": m(lambda d: d["manifest"].update(program="../../evil")),
        "bad_predictor_state": m(lambda d: d["state"].update({first: {"demos": "oops"}})),
        "not_an_object": [doc],
    }


def test_malformed_artifacts_are_refused_and_nothing_is_half_loaded(tmp_path):
    import dspy

    from ambiqa.optimizers.artifact import load_artifact

    good = json.loads(_artifact(tmp_path).read_text())
    sentinel = dspy.LM("scripted/sentinel", engine=object.__new__(type(
        "E", (), {"complete": lambda self, r: None})), cache=False)
    for name, doc in _mutations(good).items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(doc))
        before = path.read_bytes()
        with dspy.context(lm=sentinel):
            with pytest.raises(AmbiqaError) as err:
                load_artifact(path, lm=dspy.LM("scripted/other", engine=sentinel._engine_spec))
            assert dspy.settings.lm is sentinel, name  # no LM configured by a failed load
        assert str(path) in str(err.value), name
        assert path.read_bytes() == before


# ---- secrets -------------------------------------------------------------------------------
def test_api_key_never_reaches_results_exports_or_logs(tmp_path, fake_server_url, shared_data):
    env = cli_env(tmp_path, AMBIQA_FAKE_KEY=SECRET)
    lm = ["--lm", "openai/fake", "--api-base", fake_server_url, "--api-key-env",
          "AMBIQA_FAKE_KEY"]
    outs = []
    outs.append(run_cli(["evaluate", "closed_book", "--data", "asqa:dev:2", "--metrics",
                         "rouge-l", "--out", str(tmp_path / "run"), *lm], env, timeout=180))
    art = tmp_path / "art.json"
    outs.append(run_cli(["compile", "closed_book", "--train", "demo:train:2", "--metric",
                         "rouge-l", "--optimizer", "bootstrap", "--out", str(art), *lm],
                        env, timeout=180))
    for fmt in ("md", "json"):
        outs.append(run_cli(["export", str(art), "--format", fmt, "--out",
                             str(tmp_path / f"prompts.{fmt}")], env, timeout=120))
    outs.append(run_cli(["ask", "Who wrote Emma?", "--program", "closed_book", "--json", *lm],
                        env, timeout=120))
    for res in outs:
        assert res.returncode == 0, res.stderr[-1500:]
        assert SECRET not in res.stdout and SECRET not in res.stderr
    leaked = [str(p) for p in tmp_path.rglob("*") if p.is_file()
              and SECRET.encode() in p.read_bytes()]
    assert leaked == []
    assert (tmp_path / "prompts.md").stat().st_size > 0


def test_endpoint_lm_state_holds_no_key(monkeypatch):
    from ambiqa.lm import make_lm

    monkeypatch.setenv("AMBIQA_FAKE_KEY", SECRET)
    lm = make_lm("openai/gpt-4o-mini", api_key_env="AMBIQA_FAKE_KEY")
    state = json.dumps(lm.dump_state())
    assert SECRET not in state and "AMBIQA_FAKE_KEY" in state
    assert SECRET not in repr(lm) and SECRET not in repr(lm.engine)


# ---- no network at import ------------------------------------------------------------------
def test_importing_every_module_opens_no_socket(tmp_path):
    script = r"""
import socket, sys
attempts = []
def deny(*a, **k):
    attempts.append(repr(a)[:200])
    raise OSError("network access at import time")
socket.socket.connect = deny
socket.socket.connect_ex = deny
socket.create_connection = deny
socket.getaddrinfo = deny
import importlib, pkgutil
import ambiqa
failed = []
for info in pkgutil.walk_packages(ambiqa.__path__, "ambiqa."):
    if info.name.endswith("__main__"):
        continue
    try:
        importlib.import_module(info.name)
    except Exception as exc:
        failed.append(f"{info.name}: {type(exc).__name__}: {exc}")
print("ATTEMPTS", attempts)
print("FAILED", failed)
"""
    env = cli_env(tmp_path)
    res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "ATTEMPTS []" in res.stdout, res.stdout
    assert "FAILED []" in res.stdout, res.stdout


# ---- paths in artifacts --------------------------------------------------------------------
@pytest.mark.parametrize("index", ["../outside", "/etc", "a/../../outside", "..", "x/y",
                                   str(Path("..") / "outside")])
@pytest.mark.parametrize("kind", ["colbert", "bm25", "dense"])
def test_index_names_from_artifacts_cannot_leave_the_index_root(tmp_path, kind, index):
    """An artifact names its index; a name that is a path must not open (or build) anything
    outside the index root -- here a real index waits outside to be found."""
    from ambiqa.retrieval.bm25 import BM25Retriever
    from ambiqa.retrieval.factory import open_retriever

    BM25Retriever.build(small_passages(), tmp_path / "outside")
    (tmp_path / "root").mkdir()
    with pytest.raises(AmbiqaError, match="invalid index name"):
        open_retriever({"kind": kind, "index": index}, root=tmp_path / "root")


def test_export_writes_only_where_asked(tmp_path):
    """An artifact full of path-like names exports to --out and nowhere else."""
    art = _artifact(tmp_path)
    doc = json.loads(art.read_text())
    doc["manifest"].update(train="../../../escape.json", dev="/tmp/escape",
                           created="../../escape")
    art.write_text(json.dumps(doc))
    out_dir = tmp_path / "out"
    before = {p for p in tmp_path.rglob("*")}
    env = cli_env(tmp_path)
    for fmt in ("md", "json", "jinja"):
        res = run_cli(["export", str(art), "--format", fmt, "--out", str(out_dir / f"p.{fmt}")],
                      env, timeout=120)
        assert res.returncode in (0, 2), res.stderr[-1500:]
    created = {p for p in tmp_path.rglob("*")} - before
    assert all(out_dir in p.parents or p == out_dir or "dspy-cache" in str(p)
               for p in created), created
    assert not list(Path("/tmp").glob("escape*"))


def test_unknown_artifact_error_is_an_artifact_error(tmp_path):
    from ambiqa.optimizers.artifact import read_artifact

    with pytest.raises(ArtifactError):
        read_artifact(tmp_path / "nope.json")
