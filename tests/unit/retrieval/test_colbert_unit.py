"""Fast tests of the ColBERT index's validation paths (no model, no colbert-ai run).

A "fake" index here is a directory with the manifest, ``collection.jsonl`` and empty stand-ins
for colbert-ai's files: enough for :meth:`ColBERTRetriever.load`, which checks files and
fingerprints eagerly and loads the model only on the first search.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path

import pytest

from ambiqa.errors import ConfigError, DataError, ModelError, RetrievalIndexError
from ambiqa.retrieval import colbert as cb
from ambiqa.retrieval.base import Retriever
from ambiqa.retrieval.checkpoint import validate_checkpoint
from ambiqa.retrieval.colbert import ColBERTRetriever
from ambiqa.retrieval.colbert.build import pid_alive, write_collection
from ambiqa.retrieval.colbert.retriever import _search_params
from ambiqa.types import Passage

PASSAGES = [
    Passage("a1", "Alpha", "The first passage mentions alpha particles."),
    Passage("b2", "Beta", "A second passage, about beta decay."),
    Passage("c3", "", "A passage without a title."),
]
FIX = "ambiqa index CORPUS --name"


def make_manifest(passages=PASSAGES, **over):
    m = {
        "format": cb.FORMAT_VERSION, "name": "idx",
        "corpus_sha256": cb.corpus_fingerprint(passages), "n_passages": len(passages),
        "checkpoint": {"path": "/nowhere/ckpt", "kind": "identity", "id": "ck@0123456789ab"},
        "nbits": 2, "doc_maxlen": 180, "query_maxlen": 32, "dim": 384, "build_seconds": 1.5,
        "built_at": "2026-01-01T00:00:00+00:00", "colbert_ai_version": "0.2.22",
    }
    m.update(over)
    return m


def fake_index(root: Path, name: str = "idx", passages=PASSAGES, manifest=None) -> Path:
    d = root / name
    d.mkdir(parents=True)
    for f in cb.COLBERT_FILES:
        (d / f).write_text("{}")
    (d / "metadata.json").write_text(json.dumps({"num_chunks": 1}))
    (d / "doclens.0.json").write_text(json.dumps([10] * len(passages)))
    (d / "0.codes.pt").write_bytes(b"")
    (d / "0.residuals.pt").write_bytes(b"")
    with open(d / cb.COLLECTION, "w", encoding="utf-8") as fh:
        for p in passages:
            fh.write(json.dumps({"id": p.id, "title": p.title, "text": p.text}) + "\n")
    manifest = dict(manifest or make_manifest(passages, name=name))
    if "files" not in manifest:  # what a build records (an index without it is refused)
        from ambiqa.retrieval.integrity import FILES_KEY, record_files

        manifest[FILES_KEY] = record_files(d, {cb.MANIFEST, cb.LOG_FILE})
    (d / cb.MANIFEST).write_text(json.dumps(manifest))
    return d


def rerecord(d: Path) -> None:
    """Record the index's files again after damaging one: the file hashes would catch the
    damage first, and these tests reach the checks behind them."""
    from ambiqa.retrieval.integrity import FILES_KEY, record_files

    manifest = json.loads((d / cb.MANIFEST).read_text())
    manifest[FILES_KEY] = record_files(d, {cb.MANIFEST, cb.LOG_FILE})
    (d / cb.MANIFEST).write_text(json.dumps(manifest))


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# ---- manifest ---------------------------------------------------------------------------------
def test_valid_manifest_passes(tmp_path):
    m = make_manifest()
    assert cb.validate_manifest(m, tmp_path / "idx") is m


@pytest.mark.parametrize("change", [
    {"corpus_sha256": None}, {"n_passages": "3"}, {"n_passages": True}, {"n_passages": 0},
    {"format": 99}, {"checkpoint": {"path": "/x", "kind": "random"}}, {"checkpoint": "x"},
    {"build_seconds": "fast"}, {"dim": None},
])
def test_invalid_manifest_is_rejected_with_fix(tmp_path, change):
    with pytest.raises(RetrievalIndexError) as err:
        cb.validate_manifest(make_manifest(**change), tmp_path / "idx")
    assert "ambiqa_manifest.json" in str(err.value) or "format" in str(err.value)
    assert FIX + " idx" in err.value.hint


def test_manifest_must_be_an_object(tmp_path):
    with pytest.raises(RetrievalIndexError):
        cb.validate_manifest(["not", "a", "dict"], tmp_path / "idx")


# ---- loading ----------------------------------------------------------------------------------
def test_load_missing_index_names_path_and_fix(tmp_path):
    with pytest.raises(RetrievalIndexError) as err:
        ColBERTRetriever.load(tmp_path, "wiki")
    assert str(tmp_path / "wiki") in err.value.message
    assert err.value.hint.endswith(f"{FIX} wiki")


def test_load_without_manifest_is_an_interrupted_build(tmp_path):
    d = fake_index(tmp_path)
    (d / cb.MANIFEST).unlink()
    with pytest.raises(RetrievalIndexError) as err:
        ColBERTRetriever.load(tmp_path, "idx")
    assert "ambiqa_manifest.json" in err.value.message and str(d) in err.value.message
    assert FIX in err.value.hint


def test_load_corrupt_manifest(tmp_path):
    d = fake_index(tmp_path)
    (d / cb.MANIFEST).write_text('{"format": 1, "name": ')
    with pytest.raises(RetrievalIndexError, match="corrupt") as err:
        ColBERTRetriever.load(tmp_path, "idx")
    assert FIX in err.value.hint


def test_load_valid_fake_index_is_lazy_and_maps_ids(tmp_path):
    fake_index(tmp_path)
    r = ColBERTRetriever.load(tmp_path, "idx")
    assert isinstance(r, Retriever)
    assert r._searcher is None  # the model loads on the first search only
    assert len(r) == 3 and r.index_name == "idx"
    assert r.get("b2") == PASSAGES[1] and r.get("zz") is None
    sha = cb.corpus_fingerprint(PASSAGES)
    assert r.fingerprint == f"colbert:idx:{sha[:16]}:ck@0123456789ab"


def test_fingerprint_depends_on_corpus_and_checkpoint(tmp_path):
    fake_index(tmp_path, "one")
    other = [*PASSAGES[:2], Passage("c3", "", "A changed text.")]
    fake_index(tmp_path, "two", passages=other, manifest=make_manifest(other, name="two"))
    ck = make_manifest(checkpoint={"path": "/p", "kind": "trained", "id": "trained@ffff"})
    fake_index(tmp_path, "three", manifest=ck)
    fps = {ColBERTRetriever.load(tmp_path, n).fingerprint.split(":", 2)[2]
           for n in ("one", "two", "three")}
    assert len(fps) == 3


def test_load_detects_corpus_mismatch(tmp_path):
    fake_index(tmp_path)
    ColBERTRetriever.load(tmp_path, "idx", corpus=PASSAGES)  # same corpus: fine
    changed = [PASSAGES[1], PASSAGES[0], PASSAGES[2]]  # order matters: pids are positions
    with pytest.raises(RetrievalIndexError, match="different corpus") as err:
        ColBERTRetriever.load(tmp_path, "idx", corpus=changed)
    assert FIX + " idx" in err.value.hint
    path = write_jsonl(tmp_path / "c.jsonl", [p.to_dict() for p in PASSAGES])
    ColBERTRetriever.load(tmp_path, "idx", corpus=path)  # a JSONL path works too


def test_collection_edited_after_build_is_detected(tmp_path):
    d = fake_index(tmp_path)
    text = (d / cb.COLLECTION).read_text().replace("alpha particles", "gamma rays")
    (d / cb.COLLECTION).write_text(text)
    rerecord(d)
    with pytest.raises(RetrievalIndexError, match="does not match the index manifest"):
        ColBERTRetriever.load(tmp_path, "idx")


def test_missing_colbert_files_and_count_mismatch(tmp_path):
    d = fake_index(tmp_path)
    (d / "ivf.pid.pt").unlink()
    with pytest.raises(RetrievalIndexError, match="ivf.pid.pt"):
        ColBERTRetriever.load(tmp_path, "idx")
    d2 = fake_index(tmp_path, "idx2")
    (d2 / "doclens.0.json").write_text(json.dumps([10, 10]))
    rerecord(d2)
    with pytest.raises(RetrievalIndexError, match="holds 2 passages but its manifest says 3"):
        ColBERTRetriever.load(tmp_path, "idx2")
    d3 = fake_index(tmp_path, "idx3")
    (d3 / "0.residuals.pt").unlink()
    rerecord(d3)
    with pytest.raises(RetrievalIndexError, match="corrupt or missing"):
        ColBERTRetriever.load(tmp_path, "idx3")


def test_bad_search_arguments_fail_before_loading_the_model(tmp_path):
    fake_index(tmp_path)
    r = ColBERTRetriever.load(tmp_path, "idx")
    with pytest.raises(ConfigError):
        r.search("   ", 5)
    with pytest.raises(ConfigError):
        r.search("alpha", 0)
    with pytest.raises(ConfigError):
        r.batch_search(["alpha", ""], 5)
    assert r._searcher is None


# ---- building: everything refused before colbert-ai runs -------------------------------------
def test_build_refuses_duplicate_ids_and_leaves_nothing(tmp_path):
    dup = [*PASSAGES, Passage("a1", "Again", "Same id.")]
    with pytest.raises(DataError, match="duplicate passage id 'a1'"):
        ColBERTRetriever.build(dup, index_root=tmp_path, name="idx", progress=False)
    assert list(tmp_path.iterdir()) == []


def test_build_refuses_empty_corpora(tmp_path):
    with pytest.raises(DataError, match="empty"):
        ColBERTRetriever.build([], index_root=tmp_path, name="idx", progress=False)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(DataError, match="empty"):
        ColBERTRetriever.build(empty, index_root=tmp_path / "ix", name="idx", progress=False)
    assert not any((tmp_path / "ix").iterdir())
    with pytest.raises(DataError, match="neither title nor text"):
        ColBERTRetriever.build([Passage("x", " ", "")], index_root=tmp_path, name="i2",
                               progress=False)


def test_build_reports_bad_corpus_files(tmp_path):
    with pytest.raises(DataError, match="not found"):
        ColBERTRetriever.build(tmp_path / "nope.jsonl", index_root=tmp_path, name="idx")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "1", "title": "t", "text": "ok"}) + "\n{oops\n")
    with pytest.raises(DataError, match=r"bad.jsonl, line 2"):
        ColBERTRetriever.build(bad, index_root=tmp_path, name="idx")
    # A row without an id gets a stable one (issue 35); a row without text is refused.
    bad.write_text(json.dumps({"id": "1", "title": "no text"}) + "\n")
    with pytest.raises(DataError, match="missing field 'text'"):
        ColBERTRetriever.build(bad, index_root=tmp_path, name="idx")


@pytest.mark.parametrize("kwargs", [
    {"name": "../x"}, {"name": ""}, {"name": "a/b"}, {"name": "x.tmp-1-ab"},
    {"nbits": 3}, {"doc_maxlen": 4}, {"nranks": 0},
])
def test_build_rejects_bad_options(tmp_path, kwargs):
    args = {"name": "idx", **kwargs}
    with pytest.raises(ConfigError):
        ColBERTRetriever.build(PASSAGES, index_root=tmp_path, progress=False, **args)


def test_build_rejects_a_bad_checkpoint_before_work(tmp_path):
    with pytest.raises(ModelError, match="not found"):
        ColBERTRetriever.build(PASSAGES, index_root=tmp_path / "ix", name="idx",
                               checkpoint=tmp_path / "missing", progress=False)
    assert not (tmp_path / "ix").exists() or not any((tmp_path / "ix").iterdir())
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "config.json").write_text("{}")
    with pytest.raises(ModelError, match="lacks"):
        validate_checkpoint(tmp_path / "half")


def test_stale_builds_of_dead_processes_are_removed(tmp_path):
    dead_pid = 2**22 + 12345
    while pid_alive(dead_pid):
        dead_pid += 1
    stale = tmp_path / f"idx.tmp-{dead_pid}-abcd1234"
    live = tmp_path / f"idx.tmp-{os.getpid()}-abcd1234"
    other = tmp_path / f"idxother.tmp-{dead_pid}-abcd1234"
    for d in (stale, live, other):
        d.mkdir()
    with pytest.raises(DataError):
        ColBERTRetriever.build([], index_root=tmp_path, name="idx", progress=False)
    assert not stale.exists() and live.exists() and other.exists()
    with pytest.raises(RetrievalIndexError):  # a leftover build directory never loads
        ColBERTRetriever.load(tmp_path, "idx")


# ---- corpus helpers ----------------------------------------------------------------------
def test_corpus_fingerprint_same_for_list_and_file(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [p.to_dict() for p in PASSAGES])
    assert cb.corpus_fingerprint(path) == cb.corpus_fingerprint(PASSAGES)
    assert list(cb.iter_corpus(path)) == PASSAGES
    assert cb.corpus_fingerprint(PASSAGES[:2]) != cb.corpus_fingerprint(PASSAGES)


def test_collection_and_tsv_written_in_order(tmp_path):
    tricky = [*PASSAGES, Passage("t\t1", "Tab\tTitle", "line one\nline\ttwo")]
    n, sha = write_collection(iter(tricky), tmp_path)
    assert n == 4 and sha == cb.corpus_fingerprint(tricky)
    rows = [json.loads(x) for x in (tmp_path / cb.COLLECTION).read_text().splitlines()]
    assert [r["id"] for r in rows] == [p.id for p in tricky]
    tsv = (tmp_path / cb.COLBERT_TSV).read_text().splitlines()
    assert tsv[0] == "0\tThe first passage mentions alpha particles.\tAlpha"
    assert tsv[2] == "2\tA passage without a title."  # no title column: no " | " prefix
    assert tsv[3] == "3\tline one line two\tTab Title"


def test_search_params_do_not_depend_on_call_order():
    assert _search_params(5) == _search_params(10) == {
        "ncells": 1, "centroid_score_threshold": 0.5, "ndocs": 128}
    assert _search_params(20)["ndocs"] == 256
    assert _search_params(100)["ndocs"] == 400  # at least 4 * k candidates
    assert _search_params(2000)["ndocs"] == 8000


def test_captured_output_keeps_prints_out_of_the_terminal(tmp_path, capfd):
    log = tmp_path / "colbert.log"
    with cb.captured_output(log) as terminal:
        print("python-level noise")
        os.write(1, b"c-level noise\n")
        os.write(2, b"c-level err\n")
        sys.stderr.write("stderr noise\n")
        terminal.write("progress line\n")
        terminal.flush()
    out, err = capfd.readouterr()
    assert "noise" not in out + err and "c-level" not in out + err
    assert "progress line" in out + err
    logged = log.read_text()
    for s in ("python-level noise", "c-level noise", "c-level err", "stderr noise"):
        assert s in logged
    print("after")
    assert "after" in capfd.readouterr().out  # stdout is restored


def test_heldout_is_cut_to_what_torch_quantile_accepts():
    """colbert-ai's 50k x 384 held-out sample is over torch.quantile's 2**24-element limit."""
    import torch

    heldout = torch.arange(50_000 * 4, dtype=torch.float32).reshape(50_000, 4)
    assert cb.limit_heldout(heldout).shape == (50_000, 4)  # small dims: untouched
    wide = torch.zeros(50_000, 384)
    cut = cb.limit_heldout(wide)
    assert cut.numel() <= cb.QUANTILE_MAX_ELEMENTS and cut.shape[0] == 2**24 // 384
    cut.quantile(torch.tensor([0.25, 0.5]))  # would raise on the full tensor


# ---- queries that fit ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bert_tok():
    from transformers import AutoTokenizer

    from ambiqa.retrieval.encoder import minilm_path

    return AutoTokenizer.from_pretrained(str(minilm_path()))


Q_MARKER = 1  # [unused0], colbert-ai's query marker


def test_short_query_is_padded_with_masks_like_colbert_ai(bert_tok):
    ids, mask = cb.fit_query_tensors(bert_tok, ["who wrote hamlet"], 32, Q_MARKER)
    pieces = bert_tok("who wrote hamlet", add_special_tokens=False)["input_ids"]
    real = [bert_tok.cls_token_id, Q_MARKER, *pieces, bert_tok.sep_token_id]
    assert ids.shape == (1, 32) and mask.shape == (1, 32)
    assert ids[0].tolist() == real + [bert_tok.mask_token_id] * (32 - len(real))
    assert mask[0].tolist() == [1] * len(real) + [0] * (32 - len(real))


def test_long_query_grows_to_fit_instead_of_being_cut(bert_tok):
    long_q = "which film directed by the man who wrote " * 8
    n = cb.query_token_count(bert_tok, long_q)
    assert n + 3 > 32
    ids, mask = cb.fit_query_tensors(bert_tok, [long_q, "short one"], 32, Q_MARKER)
    assert ids.shape == (2, n + 3)
    assert ids[0, 2:n + 2].tolist() == bert_tok(long_q, add_special_tokens=False)["input_ids"]
    assert ids[0, -1] == bert_tok.sep_token_id and int(mask[0].sum()) == n + 3
    # the short query keeps its own 32-token form; the rest of its row is [PAD] (zeroed by
    # ColBERT's query encoder), so batching does not change its score
    alone, _ = cb.fit_query_tensors(bert_tok, ["short one"], 32, Q_MARKER)
    assert ids[1, :32].tolist() == alone[0].tolist()
    assert set(ids[1, 32:].tolist()) == {bert_tok.pad_token_id}
    assert mask[1, 32:].sum() == 0


def test_only_queries_beyond_the_hard_cap_are_cut(bert_tok):
    words = "alpha " * 400
    ids, _ = cb.fit_query_tensors(bert_tok, [words], 32, Q_MARKER, max_len=64)
    assert ids.shape == (1, 64) and ids[0, -1] == bert_tok.sep_token_id
    with pytest.raises(ConfigError):
        cb.fit_query_tensors(bert_tok, ["x"], 2, Q_MARKER)


def test_retriever_warns_only_beyond_the_hard_cap(tmp_path, bert_tok, caplog):
    fake_index(tmp_path)
    r = ColBERTRetriever.load(tmp_path, "idx")
    fake_searcher = type("S", (), {})()
    fake_searcher.checkpoint = type("C", (), {})()
    fake_searcher.checkpoint.query_tokenizer = type("T", (), {"tok": bert_tok})()
    with caplog.at_level("WARNING"):
        r._warn_if_truncated(fake_searcher, "a multi hop question " * 12)  # ~48 pieces
    assert not caplog.records
    with caplog.at_level("WARNING"):
        r._warn_if_truncated(fake_searcher, "word " * (cb.QUERY_HARD_MAX + 5))
    assert "reads only the first" in caplog.text


def test_search_settings_table_override_keeps_enough_candidates():
    table = ((10, {"ncells": 2, "centroid_score_threshold": 0.4, "ndocs": 128}),)
    assert _search_params(5, table) == {"ncells": 2, "centroid_score_threshold": 0.4,
                                           "ndocs": 128}
    assert _search_params(50, table)["ndocs"] >= 200  # beyond the table: the wide default
    wide = ((10**9, {"ncells": 1, "centroid_score_threshold": 0.5, "ndocs": 64}),)
    assert _search_params(40, wide)["ndocs"] == 160  # never fewer than 4 * k candidates


def test_colbert_metadata_survives_a_detached_head_checkout(tmp_path, monkeypatch):
    """colbert-ai stamps saved configs with the git branch of the working directory and
    crashed (TypeError) inside a detached-HEAD checkout; the patch drops the git fields."""
    import subprocess

    from ambiqa.retrieval.colbert.patches import import_colbert

    import_colbert()
    base_config = importlib.import_module("colbert.infra.config.base_config")
    import utility.utils.save_metadata as meta

    repo = tmp_path / "repo"
    repo.mkdir()
    env = {"GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "a",
           "GIT_COMMITTER_EMAIL": "a@b", "PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    for cmd in (["git", "init", "-q"], ["git", "commit", "-q", "--allow-empty", "-m", "x"],
                ["git", "checkout", "-q", "--detach"]):
        subprocess.run(cmd, cwd=repo, check=True, env=env)
    monkeypatch.chdir(repo)
    with pytest.raises(TypeError):  # what colbert-ai itself does there
        meta.get_metadata_only.__wrapped__()
    stamp = base_config.get_metadata_only()
    assert "git_branch" not in stamp and stamp["hostname"] and "cmd" in stamp
