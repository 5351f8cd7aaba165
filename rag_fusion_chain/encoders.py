"""MiniLM through OpenVINO: the default embeddings' CPU backend, with PyTorch's vectors.

The local weights are converted once to OpenVINO IR in a bounded child process and cached under
:data:`DEFAULT_EXPORT_DIR`; encoding follows sentence-transformers (truncation, mean pooling).
"""

from __future__ import annotations

import hashlib
import json
import logging
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.utils.iter import batch_iterate

from rag_fusion_chain.validation import KIT_CACHE, validate_count

logger = logging.getLogger(__name__)

DEFAULT_EXPORT_DIR = KIT_CACHE / "openvino"
DEFAULT_EXPORT_TIMEOUT = 600.0
"""Seconds the one-time conversion may take (about 15-30 s on two busy cores)."""
MODEL_FILE = "openvino_model.xml"
EXPORT_RECORD = "export.json"  # written last into a finished export: what it was converted from
PRECISIONS = ("f32", "bf16")
DEFAULT_EMBEDDING_BATCH_SIZE = 64  # texts per forward pass of a local model (its batch_size)
_INPUTS = {"input_ids": "ids", "attention_mask": "attention_mask", "token_type_ids": "type_ids"}
"""The model's inputs and the tokenizer encoding's field of each."""


class ExportError(RuntimeError):
    """The conversion to OpenVINO failed, timed out or is unavailable (openvino not installed)."""


def native_precision(capabilities: Iterable[str] | None = None) -> str:
    """``"bf16"`` where the CPU computes it natively (AVX-512 BF16 or AMX), else ``"f32"``;
    ``capabilities`` defaults to this CPU's OpenVINO ``OPTIMIZATION_CAPABILITIES``."""
    if capabilities is None:
        capabilities = _openvino().Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    return "bf16" if "BF16" in capabilities else "f32"


def _openvino() -> Any:
    """``openvino``, imported as if ``openvino_telemetry`` were missing, so its converter neither
    reaches Google Analytics nor writes ``~/intel/``."""
    hide = "openvino" not in sys.modules and "openvino_telemetry" not in sys.modules
    if hide:
        sys.modules["openvino_telemetry"] = None  # type: ignore[assignment]
    try:
        import openvino
    except ImportError as error:
        raise ExportError(
            'the OpenVINO backend needs openvino: pip install "rag-fusion-chain[hf]"'
        ) from error
    finally:
        if hide:
            del sys.modules["openvino_telemetry"]
    return openvino


def ensure_export(
    model_dir: str | Path,
    cache_dir: str | Path = DEFAULT_EXPORT_DIR,
    *,
    timeout: float = DEFAULT_EXPORT_TIMEOUT,
) -> Path:
    """The converted model's directory (keyed by path, size and OpenVINO version), converted
    first if not cached: into a temporary directory renamed into place when complete."""
    source = Path(model_dir).resolve()
    weights = source / "model.safetensors"
    size = weights.stat().st_size if weights.is_file() else 0
    digest = hashlib.sha256(f"{source}|{size}|{_openvino().get_version()}".encode()).hexdigest()
    target = Path(cache_dir) / f"{source.parent.name}-{source.name}-{digest[:16]}"
    if (target / EXPORT_RECORD).is_file():
        return target
    if timeout <= 0:
        raise ValueError(f"timeout must be positive, got {timeout}")
    target.parent.mkdir(parents=True, exist_ok=True)
    logger.warning(
        "converting %s to OpenVINO once into %s (%.0f s at most)", model_dir, target, timeout
    )
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(
        dir=target.parent, prefix=f".{target.name}-", ignore_cleanup_errors=True
    ) as staging:
        command = [sys.executable, "-m", __name__, str(model_dir), staging]
        try:
            completed = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as error:
            raise ExportError(
                f"converting {model_dir} to OpenVINO took over {timeout:.0f} s"
            ) from error
        if completed.returncode != 0 or not Path(staging, MODEL_FILE).is_file():
            raise ExportError(
                f"converting {model_dir} to OpenVINO failed: {completed.stderr.strip()[-500:]}"
            )
        Path(staging, EXPORT_RECORD).write_text(json.dumps({"source": str(source)}))
        try:
            Path(staging).rename(target)
        except OSError:
            if not (target / EXPORT_RECORD).is_file():  # not another process finishing first
                raise
    logger.warning("converted %s in %.1f s", model_dir, time.perf_counter() - started)
    return target


class OpenVINOEmbeddings(Embeddings):
    """A mean-pooling sentence-transformers model (MiniLM) run by OpenVINO on the CPU;
    ``threads`` of one call (0: OpenVINO's choice)."""

    def __init__(
        self,
        model_dir: str | Path,
        export_dir: str | Path,
        *,
        model_identity: str,
        batch_size: int = DEFAULT_EMBEDDING_BATCH_SIZE,
        normalize: bool = True,
        precision: str = "f32",
        threads: int = 0,
    ) -> None:
        validate_count("batch_size", batch_size)
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
        if threads < 0:
            raise ValueError(f"threads must be 0 (OpenVINO's choice) or positive, got {threads}")
        from tokenizers import Tokenizer

        self.model_identity, self.batch_size, self.normalize = model_identity, batch_size, normalize
        self.tokenizer = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))
        config = Path(model_dir) / "sentence_bert_config.json"  # MiniLM: 256 tokens
        settings = json.loads(config.read_text("utf-8")) if config.is_file() else {}
        self.tokenizer.enable_truncation(int(settings.get("max_seq_length", 512)))
        self.tokenizer.no_padding()
        hints = {
            "INFERENCE_PRECISION_HINT": precision,
            "PERFORMANCE_HINT": "LATENCY",
            "INFERENCE_NUM_THREADS": threads,
        }
        model_file = str(Path(export_dir) / MODEL_FILE)
        self.model = _openvino().Core().compile_model(model_file, "CPU", hints)
        computed = self.model.get_property("INFERENCE_PRECISION_HINT")  # f32 if no native bf16
        self.embedding_precision: str = computed.get_type_name()
        self.threads = int(self.model.get_property("INFERENCE_NUM_THREADS"))
        self._inputs = {port.get_any_name() for port in self.model.inputs}
        # One call at a time: concurrent calls into OpenVINO and the tokenizer were seen to
        # deadlock, and one call already uses every core.
        self._request = self.model.create_infer_request()
        self._lock = threading.Lock()

    def embed_documents_array(self, texts: Sequence[str]) -> Any:
        """The vectors as one float32 numpy array, rows in input order (batched by length)."""
        import numpy as np

        with self._lock:
            encodings = self.tokenizer.encode_batch(list(texts))
            order = sorted(range(len(texts)), key=lambda position: len(encodings[position].ids))
            width = self.model.outputs[0].get_partial_shape()[2].get_length()
            vectors = np.zeros((len(texts), width), dtype=np.float32)
            for rows in batch_iterate(self.batch_size, order):
                batch = [encodings[row] for row in rows]
                longest = max(len(encoding.ids) for encoding in batch)
                for encoding in batch:
                    encoding.pad(longest)  # with [PAD] (id 0), attention mask 0
                inputs = {
                    name: np.asarray([getattr(each, field) for each in batch], dtype=np.int64)
                    for name, field in _INPUTS.items()
                }
                hidden = self._request.infer({name: inputs[name] for name in self._inputs})[0]
                mask = inputs["attention_mask"][:, :, None].astype(np.float32)
                vectors[rows] = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
        if self.normalize:
            vectors /= np.clip(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12, None)
        return vectors

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_documents_array(texts).tolist() if texts else []

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


if __name__ == "__main__":  # ensure_export's child: the PyTorch model traced, saved as IR (fp32)
    import torch
    from transformers import AutoModel, AutoTokenizer

    openvino = _openvino()
    model_dir, out_dir = sys.argv[1:3]
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    model = AutoModel.from_pretrained(model_dir, local_files_only=True).eval()
    example = dict(tokenizer(["a text", "a longer text"], padding=True, return_tensors="pt"))
    with torch.no_grad():
        converted = openvino.convert_model(model, example_input=example)
    openvino.save_model(converted, str(Path(out_dir) / MODEL_FILE), compress_to_fp16=False)
