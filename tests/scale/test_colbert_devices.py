"""colbert-ai's devices: the GPUs torch sees, else the CPU (unchanged), tested on a CPU machine
by making torch.cuda report devices; k-means on the GPU where faiss has none; doctor accepts
a CUDA build of torch."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import torch

from ambiqa.errors import ConfigError
from ambiqa.retrieval.colbert import devices
from ambiqa.retrieval.colbert.devices import colbert_gpus, gpu_kmeans, run_config_kwargs


@pytest.fixture()
def fake_gpus(monkeypatch):
    """``fake_gpus(n)``: torch.cuda reports ``n`` devices (0: no CUDA)."""

    def set_count(n: int) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)

    return set_count


def test_cpu_machine_keeps_the_cpu_settings(fake_gpus):
    fake_gpus(0)
    assert run_config_kwargs() == {"nranks": 1, "gpus": 0, "avoid_fork_if_possible": True,
                                   "amp": False}
    assert run_config_kwargs(nranks=4)["gpus"] == 0  # CPU ranks need no device each


def test_gpus_come_from_the_visible_devices(fake_gpus):
    fake_gpus(2)
    assert colbert_gpus() == 2 and run_config_kwargs(nranks=2)["gpus"] == 2
    with pytest.raises(ConfigError, match="--nranks 3 exceeds the 2 GPU"):
        run_config_kwargs(nranks=3)
    fake_gpus(1)
    assert run_config_kwargs()["gpus"] == 1


def test_a_cuda_build_without_a_driver_counts_as_cpu(monkeypatch):
    def broken() -> bool:
        raise RuntimeError("Found no NVIDIA driver")

    monkeypatch.setattr(torch.cuda, "is_available", broken)
    assert colbert_gpus() == 0


@pytest.mark.parametrize("gpus", [0, 2])
def test_the_indexer_gets_the_choice_and_gpu_kmeans_only_with_a_gpu(monkeypatch, fake_gpus,
                                                                    tmp_path, gpus):
    pytest.importorskip("colbert")
    import colbert.indexer
    import colbert.indexing.collection_indexer as ci
    import colbert.infra

    from ambiqa.retrieval.colbert import patches

    fake_gpus(gpus)
    monkeypatch.setattr(devices, "faiss_has_gpu", lambda: False)  # the faiss-cpu wheel
    seen: dict = {}
    original_kmeans = ci.compute_faiss_kmeans

    class FakeRun:
        @contextlib.contextmanager
        def context(self, config):
            seen["run_config"] = config
            yield

    class FakeIndexer:
        def __init__(self, **kw):
            pass

        def index(self, **kw):  # colbert-ai's k-means entry point while the build runs
            seen["kmeans"] = ci.compute_faiss_kmeans

    monkeypatch.setattr(colbert.infra, "RunConfig", lambda **kw: kw)
    monkeypatch.setattr(colbert.infra, "Run", FakeRun)
    monkeypatch.setattr(colbert.infra, "ColBERTConfig", lambda **kw: kw)
    monkeypatch.setattr(colbert.indexer, "Indexer", FakeIndexer)
    patches.run_indexer(Path("ckpt"), tmp_path / "idx", tmp_path / "c.tsv", nbits=2,
                        doc_maxlen=180, nranks=1)
    rc = seen["run_config"]
    assert (rc["gpus"], rc["nranks"], rc["amp"], rc["avoid_fork_if_possible"]) == (
        gpus, 1, False, True)
    if gpus:
        assert seen["kmeans"] is devices.compute_kmeans_on_gpu
    else:
        assert seen["kmeans"] is original_kmeans  # the CPU path is colbert-ai's own
    assert ci.compute_faiss_kmeans is original_kmeans  # restored after the build


def _inertia(x: torch.Tensor, c: torch.Tensor) -> float:
    return float(torch.cdist(x, c).min(dim=1).values.pow(2).mean())


def test_gpu_kmeans_clusters_as_well_as_faiss_and_is_deterministic():
    import faiss

    gen = torch.Generator().manual_seed(0)
    centres = 5 * torch.randn(20, 16, generator=gen)
    x = torch.cat([c + torch.randn(100, 16, generator=gen) for c in centres])
    got = gpu_kmeans(x, 20, niter=20)
    assert got.shape == (20, 16) and got.device.type == "cpu" and got.dtype == torch.float32
    assert torch.equal(got, gpu_kmeans(x, 20, niter=20))
    km = faiss.Kmeans(16, 20, niter=20, seed=123)
    km.train(x.numpy())
    ours, theirs = _inertia(x, got), _inertia(x, torch.from_numpy(km.centroids))
    start = _inertia(x, gpu_kmeans(x, 20, niter=0))  # niter 0 runs one step from the seeds
    assert ours <= 1.25 * theirs and ours < start
    with pytest.raises(ConfigError):
        gpu_kmeans(x[:3], 4, niter=1)


def test_doctor_accepts_a_cuda_torch(monkeypatch, fake_gpus):
    from ambiqa import doctor

    monkeypatch.setattr(torch.version, "cuda", "12.4")
    fake_gpus(1)
    assert "1 GPU(s) visible" in doctor._torch()
    fake_gpus(0)
    assert "ColBERT runs on the CPU" in doctor._torch()
    monkeypatch.setattr(torch.version, "cuda", None)
    assert doctor._torch() == torch.__version__
