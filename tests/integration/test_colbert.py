"""Real ColBERT (colbert-ai 0.2.22, CPU) over the shared corpus.

The session fixture ``colbert_retriever`` indexes the first 1,500 corpus passages plus the gold
passages of five NQ-oracle questions (~1 min on 2 cores the first time, then reused from
``$AMBIQA_CACHE/test-indexes``). The tiny-index tests build 30 passages into a temp dir.
"""

from __future__ import annotations

import json
import logging

import pytest

from ambiqa.retrieval.colbert import COLLECTION, LOG_FILE, MANIFEST, ColBERTRetriever
from ambiqa.tracing import track

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, corpus_passages):
    root = tmp_path_factory.mktemp("colbert")
    return ColBERTRetriever.build(corpus_passages[:30], index_root=root, name="tiny",
                                  progress=False)


def test_identity_checkpoint_gives_minilm_token_embeddings():
    """Query and document vectors are MiniLM's normalized token embeddings (identity linear)."""
    import torch
    from colbert.infra import ColBERTConfig
    from colbert.modeling.checkpoint import Checkpoint
    from transformers import AutoModel

    from ambiqa.retrieval.checkpoint import DIM, checkpoint_info, identity_checkpoint
    from ambiqa.retrieval.colbert import import_colbert
    from ambiqa.retrieval.encoder import minilm_path

    path = identity_checkpoint()
    assert checkpoint_info(path)["kind"] == "identity"
    assert not list(path.glob("*.bin")) and (path / "model.safetensors").is_file()
    import_colbert()
    ckpt = Checkpoint(str(path), colbert_config=ColBERTConfig(checkpoint=str(path)), verbose=0)
    assert ckpt.colbert_config.dim == DIM
    assert torch.equal(ckpt.linear.weight, torch.eye(DIM))
    minilm = AutoModel.from_pretrained(str(minilm_path())).eval()

    ids, mask = ckpt.query_tokenizer.tensorize(["who wrote the declaration of independence"])
    q = ckpt.query(ids, mask)
    with torch.no_grad():
        ref = torch.nn.functional.normalize(minilm(ids, attention_mask=mask)[0], dim=-1)
    assert q.shape == (1, 32, DIM)
    torch.testing.assert_close(q, ref, atol=1e-5, rtol=1e-4)

    docs = ["Thomas Jefferson | Jefferson drafted the Declaration in 1776.", "Short one."]
    ids, mask = ckpt.doc_tokenizer.tensorize(docs)
    d, d_mask = ckpt.doc(ids, mask, keep_dims="return_mask")
    with torch.no_grad():
        ref = torch.nn.functional.normalize(minilm(ids, attention_mask=mask)[0], dim=-1)
    keep = d_mask.squeeze(-1)  # colbert-ai zeroes padding and punctuation vectors
    assert keep.sum() > 10
    torch.testing.assert_close(d[keep], ref[keep], atol=1e-5, rtol=1e-4)


def test_tiny_build_layout_and_manifest(tiny, corpus_passages):
    d = tiny.index_dir
    assert {MANIFEST, COLLECTION, LOG_FILE, "metadata.json", "ivf.pid.pt"} <= {
        f.name for f in d.iterdir()}
    assert not list(d.parent.glob("tiny.tmp-*"))  # the build dir was renamed into place
    m = json.loads((d / MANIFEST).read_text())
    assert m["n_passages"] == 30 and m["checkpoint"]["kind"] == "identity"
    assert m["dim"] == 384 and m["nbits"] == 2 and m["colbert_ai_version"] == "0.2.22"
    rows = [json.loads(x) for x in (d / COLLECTION).read_text().splitlines()]
    assert [r["id"] for r in rows] == [p.id for p in corpus_passages[:30]]
    assert "Encoding" in (d / LOG_FILE).read_text()  # colbert-ai's chatter went to the log
    ColBERTRetriever.load(d.parent, "tiny", corpus=corpus_passages[:30])


def test_tiny_search_semantics(tiny, corpus_passages, caplog):
    target = corpus_passages[12]
    with track() as trace:
        hits = tiny.search(target.title + " " + target.text[:120], k=3)
    assert len(hits) == 3 and hits[0].id == target.id
    assert hits[0].text == target.text and hits[0].title == target.title
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert trace.retriever_calls == 1
    everything = tiny.search("football", k=1000)  # k beyond the corpus: every passage, ranked
    assert len(everything) == 30 and len({h.id for h in everything}) == 30
    assert [h.score for h in everything] == sorted((h.score for h in everything), reverse=True)
    top5 = tiny.search("football", k=5)  # PLAID candidates, scored like the exhaustive pass
    assert top5[0].id == everything[0].id
    exact = {h.id: h.score for h in everything}
    assert all(h.score == pytest.approx(exact[h.id], abs=1e-4) for h in top5)
    with caplog.at_level(logging.WARNING, logger="ambiqa.retrieval.colbert"):
        tiny.search("what " * 60 + "football", k=2)  # 61 word pieces: grows to fit, no cut
    assert not any("reads only" in r.message for r in caplog.records)
    from ambiqa.retrieval.colbert import QUERY_HARD_MAX

    with caplog.at_level(logging.WARNING, logger="ambiqa.retrieval.colbert"):
        tiny.search("what " * QUERY_HARD_MAX + "football", k=2)
    assert any(f"ColBERT reads only the first {QUERY_HARD_MAX - 3}" in r.message
               for r in caplog.records)
    assert tiny.get(target.id) == target


def test_rebuild_replaces_index_and_output_stays_quiet(tiny, corpus_passages, capfd):
    root = tiny.index_dir.parent
    other = corpus_passages[30:45]
    capfd.readouterr()
    rebuilt = ColBERTRetriever.build(other, index_root=root, name="tiny-2", progress=False)
    out, err = capfd.readouterr()
    assert "#>" not in out + err and "Encoding" not in out + err  # no colbert-ai chatter
    assert len(rebuilt) == 15
    again = ColBERTRetriever.build(other[:10], index_root=root, name="tiny-2", progress=False)
    assert len(again) == 10 and len(ColBERTRetriever.load(root, "tiny-2")) == 10
    assert not [p for p in root.iterdir() if ".tmp-" in p.name or ".old-" in p.name]


def test_nq_gold_passages_in_top5(colbert_retriever, colbert_gold_questions):
    found = 0
    for question, gold_id in colbert_gold_questions:
        hits = colbert_retriever.search(question, k=5)
        found += gold_id in [h.id for h in hits]
    assert found >= 4, f"gold passage in top 5 for only {found}/5 NQ questions"


def test_reload_from_disk_gives_identical_results(colbert_retriever, colbert_gold_questions):
    reloaded = ColBERTRetriever.load(colbert_retriever.index_dir.parent,
                                     colbert_retriever.index_name)
    assert reloaded.fingerprint == colbert_retriever.fingerprint
    for question, _ in colbert_gold_questions:
        a, b = colbert_retriever.search(question, 10), reloaded.search(question, 10)
        assert [(h.id, h.score) for h in a] == [(h.id, h.score) for h in b]


def test_batch_search_equals_single_searches(colbert_retriever, colbert_gold_questions):
    questions = [q for q, _ in colbert_gold_questions]
    batch = colbert_retriever.batch_search(questions, k=7)
    single = [colbert_retriever.search(q, 7) for q in questions]
    # queries are encoded in a padded batch: same ranking, scores equal to float precision
    assert [[h.id for h in hits] for hits in batch] == [[h.id for h in hits] for hits in single]
    for b_hits, s_hits in zip(batch, single, strict=True):
        assert [h.score for h in b_hits] == pytest.approx([h.score for h in s_hits], abs=1e-4)
    # different k values in any order give the same top results (no sticky search settings)
    big = colbert_retriever.search(questions[0], 50)
    assert [h.id for h in colbert_retriever.search(questions[0], 7)] == [h.id for h in single[0]]
    assert len(big) == 50


def test_two_process_build_matches_one_process(tiny, corpus_passages, tmp_path):
    """nranks=2 runs colbert-ai's own launcher (spawned ranks, gloo shim on CPU)."""
    two = ColBERTRetriever.build(corpus_passages[:30], index_root=tmp_path, name="two",
                                 nranks=2, progress=False)
    assert len(list(two.index_dir.glob("doclens.*.json"))) == 2  # one chunk per rank
    queries = [p.title for p in corpus_passages[:30:6]]
    assert [[h.id for h in hits] for hits in two.batch_search(queries, 3)] == [
        [h.id for h in hits] for hits in tiny.batch_search(queries, 3)]
