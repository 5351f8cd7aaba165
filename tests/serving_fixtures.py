"""Fixtures for the serving tests (test_templates, test_serving): the stub's embeddings, caches.

Register with ``pytest_plugins = ["tests.serving_fixtures"]``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rag_fusion_chain import serving
from tests.stub_openai import StubOpenAI

STUB_EMBEDDING = "openai:stub-embedding"
"""Embeddings from the stub server: the sample indexes in seconds, not MiniLM's minutes."""
SAMPLE_DOCUMENTS = 300
"""Abstracts in the sample corpus."""


@pytest.fixture
def serving_env(
    clean_model_env: pytest.MonkeyPatch, clean_openai_stub: StubOpenAI, tmp_path: Path
) -> Iterator[StubOpenAI]:
    """No key, the offline chat mode, the stub's embeddings, a fresh index cache."""
    clean_model_env.setenv("OPENAI_BASE_URL", clean_openai_stub.base_url)
    clean_model_env.setenv("RAG_FUSION_CHAT_MODEL", "offline")
    clean_model_env.setenv("RAG_FUSION_EMBEDDING", STUB_EMBEDDING)
    clean_model_env.setenv(serving.CACHE_DIR_ENV, str(tmp_path / "cache"))
    for name in (
        serving.VECTOR_STORE_ENV,
        serving.INDEX_ENV,
        serving.CHROMA_URL_ENV,
        serving.CHROMA_COLLECTION_ENV,
    ):
        clean_model_env.delenv(name, raising=False)
    serving.open_source.cache_clear()
    yield clean_openai_stub
    serving.open_source.cache_clear()


@pytest.fixture(scope="session")
def shared_index_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An index cache for tests that merely use the sample index: it is built once."""
    return tmp_path_factory.mktemp("indexes")


def embedded_texts(stub: StubOpenAI) -> int:
    """How many texts the stub has embedded: the corpus when it is indexed, then the queries."""
    return sum(stub.embedding_batch_sizes)
