"""Where colbert-ai runs: on the GPUs torch sees, else on the CPU.

colbert-ai decides by itself whether to use CUDA: ``use_gpu = total_visible_gpus > 0``, where
``total_visible_gpus`` is ``torch.cuda.device_count()`` read when colbert-ai is imported. The
``gpus`` of its ``RunConfig`` must agree with that count: with ``gpus=0`` on a machine with a
GPU, colbert-ai still encodes and searches on CUDA while its launcher and ``device_`` find no
device to name. So ambiqa passes ``gpus`` = the visible devices (:func:`colbert_gpus`), which
is 0 on a CPU-only machine: the CPU settings DESIGN.md records are unchanged there
(``RunConfig(nranks=1, gpus=0, avoid_fork_if_possible=True, amp=False)``).

To keep colbert-ai on the CPU on a machine with a GPU, hide the devices before it is imported
(``CUDA_VISIBLE_DEVICES=``), which is what colbert-ai itself reads.

Mixed precision (``amp``) stays off on both: it changes scores in the last bits and ambiqa's
indexes record their search settings; a GPU is fast enough without it for the corpora here.

With a GPU, k-means runs on it too (:func:`gpu_kmeans`) when faiss has no GPU support (the
``faiss-cpu`` wheel ambiqa installs): colbert-ai would otherwise ask ``faiss.Kmeans`` for a
GPU that build does not have.
"""

from __future__ import annotations

from typing import Any

from ambiqa.errors import ConfigError


def visible_gpus() -> int:
    """CUDA devices torch sees (0 without CUDA, or with ``CUDA_VISIBLE_DEVICES=``)."""
    import torch

    try:
        return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
    except Exception:  # a CUDA build without a driver
        return 0


def colbert_gpus(nranks: int = 1) -> int:
    """``RunConfig.gpus`` for ``nranks`` processes: every visible GPU (0 on a CPU machine).

    colbert-ai gives rank ``r`` the GPU ``gpus[r % nranks]``, so more ranks than GPUs cannot
    be placed; that is refused here with the fix, not left to an IndexError in a child.
    """
    n = visible_gpus()
    if n and nranks > n:
        raise ConfigError(f"--nranks {nranks} exceeds the {n} GPU(s) torch sees",
                          hint=f"use --nranks {n} or fewer, or hide the GPUs "
                               "(CUDA_VISIBLE_DEVICES=) to index on the CPU")
    return n


def run_config_kwargs(nranks: int = 1, **extra: Any) -> dict[str, Any]:
    """The ``RunConfig`` settings ambiqa uses: the devices above, no fork where colbert-ai
    can avoid it, no mixed precision."""
    return {"nranks": nranks, "gpus": colbert_gpus(nranks), "avoid_fork_if_possible": True,
            "amp": False, **extra}


def gpu_kmeans(sample: Any, k: int, niter: int, seed: int = 123,
               chunk: int = 65_536) -> Any:
    """Lloyd's k-means (L2, as ``faiss.Kmeans``) of ``sample`` (n, dim) on the GPU.

    Starts from ``k`` distinct sample rows chosen with ``seed``; a centroid that loses all
    its points keeps its place. Returns the centroids as a CPU float32 tensor, as colbert-ai's
    ``compute_faiss_kmeans`` does.
    """
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    x = sample.float().to(device)
    n = x.shape[0]
    if n < k:
        raise ConfigError(f"k-means of {n} vectors into {k} centroids",
                          hint="index more passages or lower the centroid count")
    gen = torch.Generator().manual_seed(seed)
    centroids = x[torch.randperm(n, generator=gen)[:k].to(device)].clone()
    x_sq = (x * x).sum(dim=1)
    for _ in range(max(1, niter)):
        sums = torch.zeros_like(centroids)
        counts = torch.zeros(k, device=device, dtype=torch.float32)
        c_sq = (centroids * centroids).sum(dim=1)
        for start in range(0, n, chunk):
            xs = x[start:start + chunk]
            dist = x_sq[start:start + chunk, None] - 2 * xs @ centroids.T + c_sq[None, :]
            assign = dist.argmin(dim=1)
            sums.index_add_(0, assign, xs)
            counts.index_add_(0, assign, torch.ones_like(assign, dtype=torch.float32))
        keep = counts > 0
        centroids[keep] = sums[keep] / counts[keep, None]
    return centroids.cpu()


def compute_kmeans_on_gpu(dim: int, num_partitions: int, kmeans_niters: int,
                          shared_lists: Any, return_value_queue: Any = None) -> Any:
    """colbert-ai's ``compute_faiss_kmeans`` for a GPU machine whose faiss has no GPU."""
    centroids = gpu_kmeans(shared_lists[0][0], num_partitions, kmeans_niters)
    if return_value_queue is not None:
        return_value_queue.put(centroids)
    return centroids


def faiss_has_gpu() -> bool:
    try:
        import faiss
    except ImportError:
        return False
    return bool(getattr(faiss, "get_num_gpus", lambda: 0)())
