"""The one manifest type: writes, reads and validates itself (compile, tune, tune-eor, load)."""

from __future__ import annotations

import json

import pytest

from ambiqa.errors import ArtifactError
from ambiqa.optimizers.manifest import NO_RETRIEVER, OPTIONAL_KEYS, REQUIRED_KEYS, Manifest
from ambiqa.version import __version__


def _manifest(**kw) -> Manifest:
    base = dict(program="vanilla_rag", program_config={"k": 2}, lm="scripted/fake",
                retriever=dict(NO_RETRIEVER), metric="rouge-l", optimizer={"name": "labeled"})
    return Manifest(**{**base, **kw})


def test_a_written_manifest_has_every_key_in_the_historical_order_and_reads_back():
    m = _manifest(scores={"train": 0.5}, demos_per_predictor={"x": 2})
    doc = m.to_dict()
    assert list(doc)[:6] == ["program", "program_config", "ambiqa_version", "dspy_version",
                             "lm", "retriever"]
    assert set(doc) == set(REQUIRED_KEYS) | set(OPTIONAL_KEYS)
    assert doc["ambiqa_version"] == __version__ and doc["created"]
    again = Manifest.from_dict(json.loads(json.dumps(doc)))
    assert again == m


def test_reading_names_the_missing_or_mistyped_field():
    doc = _manifest().to_dict()
    del doc["metric"]
    with pytest.raises(ArtifactError, match="missing metric"):
        Manifest.from_dict(doc, "a.json")
    doc = _manifest().to_dict()
    doc["optimizer"] = "labeled"
    with pytest.raises(ArtifactError, match=r"a.json: manifest.optimizer must be an object"):
        Manifest.from_dict(doc, "a.json")
    with pytest.raises(ArtifactError, match="program_config sets retriever"):
        _manifest(program_config={"retriever": "x"}).to_dict()
    with pytest.raises(ArtifactError, match="retriever.index must be a string"):
        _manifest(retriever={"kind": "bm25", "index": 3}).validate()


def test_unknown_keys_are_kept_and_absent_optional_keys_read_as_null(caplog):
    doc = {k: v for k, v in _manifest().to_dict().items() if k in REQUIRED_KEYS}
    doc["from_the_future"] = 1
    m = Manifest.from_dict(doc)
    assert m.extra == {"from_the_future": 1} and m.scores is None and m.dspy_version is None
    assert m.to_dict()["from_the_future"] == 1
    assert "unknown manifest keys" in caplog.text
    assert _manifest().update({"compile_cost": {"lm_calls": 3}, "note": "x"}).extra == {
        "note": "x"}


def test_save_artifact_validates_through_the_manifest(tmp_path):
    from ambiqa.optimizers.artifact import read_artifact, save_artifact
    from ambiqa.programs.vanilla_rag import VanillaRAG

    path = save_artifact(tmp_path / "a.json", VanillaRAG(k=2), _manifest())
    assert read_artifact(path)["manifest"]["program_config"] == {"k": 2}
    with pytest.raises(ArtifactError, match="manifest.lm must be"):
        save_artifact(tmp_path / "b.json", VanillaRAG(k=2), {**_manifest().to_dict(), "lm": 3})
    assert not (tmp_path / "b.json").exists()
