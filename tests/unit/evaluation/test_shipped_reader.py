"""The D-F1 reader that ships with ambiqa (issue 42, item 1).

Installing builds the same weights (by sha256) that read every stored run; a tampered shard, a
different base encoder or two installers at once never yield a wrong or half-written reader;
and stored rows re-read by the installed reader get their stored D-F1 back.
"""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pytest

from ambiqa.errors import ModelError
from ambiqa.evaluation import shipped_reader as sr
from ambiqa.evaluation.extractive import MANIFEST_NAME, WEIGHTS_NAME, verify_checkpoint

ROOT = Path(__file__).resolve().parents[3]
#: stored rows of a real run, every D-F1 read by the shipped reader
STORED = ROOT / "benchmarks/results/evidence-rescored-v4/asqa/diva/results.jsonl"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    return sr.install_shipped_reader(tmp_path_factory.mktemp("readers"))


def test_install_reproduces_the_recorded_weights(installed) -> None:
    spec = sr.shipped_spec()
    manifest = verify_checkpoint(installed)
    assert manifest["weights"]["sha256"] == spec["weights_sha256"]
    assert manifest["name"] == "extractive:minilm-asqa-v4"
    assert manifest["calibration"]["null_threshold"] == pytest.approx(-0.6258, abs=1e-3)
    assert manifest["installed_from"].startswith("package data")
    # a second install finds it and does nothing
    stamp = (installed / MANIFEST_NAME).stat().st_mtime_ns
    assert sr.install_shipped_reader(installed.parent) == installed
    assert (installed / MANIFEST_NAME).stat().st_mtime_ns == stamp


def test_tampered_shard_or_base_is_refused(tmp_path, monkeypatch) -> None:
    shipped = sr.WEIGHTS_DIR
    fake = tmp_path / "weights"
    shutil.copytree(sr.WEIGHTS_DIR, fake)
    shard = next(fake.glob("*-01.safetensors"))
    data = bytearray(shard.read_bytes())
    data[-1] ^= 1
    shard.write_bytes(bytes(data))
    monkeypatch.setattr(sr, "WEIGHTS_DIR", fake)
    with pytest.raises(ModelError, match="shipped reader shard"):
        sr.install_shipped_reader(tmp_path / "readers")
    assert not (tmp_path / "readers" / sr.SHIPPED_NAME).exists()  # nothing half-built
    monkeypatch.setattr(sr, "WEIGHTS_DIR", shipped)
    spec = sr.shipped_spec()
    monkeypatch.setattr(sr, "shipped_spec", lambda: {**spec, "base_sha256": "0" * 64})
    with pytest.raises(ModelError, match="base encoder"):
        sr.install_shipped_reader(tmp_path / "readers")


def test_two_installers_at_once_leave_one_whole_reader(tmp_path) -> None:
    errors: list[BaseException] = []

    def go() -> None:
        try:
            sr.install_shipped_reader(tmp_path)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=go) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    verify_checkpoint(tmp_path / sr.SHIPPED_NAME)
    assert [p.name for p in tmp_path.iterdir()] == [sr.SHIPPED_NAME]  # no temp dirs left
    assert (tmp_path / sr.SHIPPED_NAME / WEIGHTS_NAME).is_file()


def test_stored_rows_get_their_stored_d_f1(installed, shared_data) -> None:
    """A fresh install scores a stored run's long answers to the D-F1 stored with them."""
    from ambiqa.data.specs import load_dataset
    from ambiqa.evaluation.extractive import ExtractiveReader
    from ambiqa.evaluation.metrics import disambig_f1

    rows = [json.loads(line) for line in STORED.read_text(encoding="utf-8").splitlines()]
    rows = [r for r in rows if not r.get("error") and "d-f1" in (r.get("metrics") or {})][:4]
    assert len(rows) == 4
    dev = {str(ex.id): ex for ex in load_dataset("asqa:dev")}
    reader = ExtractiveReader(installed, threads=2)
    for row in rows:
        got = disambig_f1(row["prediction"]["answer"], list(dev[str(row["id"])].qa_pairs), reader)
        assert got == pytest.approx(row["metrics"]["d-f1"], abs=1e-9), row["id"]
