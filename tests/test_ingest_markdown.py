"""Markdown headings stay with their text (issue 20 item 4)."""

from __future__ import annotations

from langchain_core.documents import Document

from rag_fusion_chain.ingest import count_tokens, split_documents
from rag_fusion_chain.ingest.splitting import MIN_CHUNK_TOKENS

PARAGRAPH = (
    "Task decomposition breaks a complicated task into smaller and simpler steps. "
    "Chain of thought prompting instructs the model to think step by step, which "
    "uses more test-time computation and sheds light on how the model reasons. "
) * 8  # about 400 tokens: longer than a chunk, so the heading cannot share its paragraph whole
POST = (
    "# LLM Powered Autonomous Agents\n\n"
    "## Task Decomposition\n\n"
    f"{PARAGRAPH}\n\n"
    "## Self-Reflection\n\n"
    "Self-reflection lets an agent improve by refining past decisions and correcting mistakes.\n"
)


def _chunks() -> list[Document]:
    return split_documents([Document(POST, metadata={"source": "agents.md"})])


def test_no_chunk_is_a_heading_alone_or_a_tiny_fragment() -> None:
    chunks = _chunks()
    assert len(chunks) > 2
    for chunk in chunks:
        lines = [line for line in chunk.page_content.splitlines() if line.strip()]
        assert not all(line.startswith("#") for line in lines), chunk.page_content
        assert count_tokens(chunk.page_content) >= MIN_CHUNK_TOKENS


def test_a_heading_is_retrievable_with_its_section() -> None:
    chunks = _chunks()
    [first] = [chunk for chunk in chunks if "## Task Decomposition" in chunk.page_content]
    assert "Task decomposition breaks a complicated task" in first.page_content
    for chunk in chunks:
        if "Chain of thought" in chunk.page_content:
            assert chunk.metadata["section"] == "LLM Powered Autonomous Agents > Task Decomposition"
    [last] = [chunk for chunk in chunks if "Self-reflection lets" in chunk.page_content]
    assert "## Self-Reflection" in last.page_content
    assert last.metadata["section"] == "LLM Powered Autonomous Agents > Self-Reflection"


def test_joined_chunks_are_spans_of_the_document_at_their_offsets() -> None:
    for chunk in _chunks():
        start = chunk.metadata["start_index"]
        assert POST[start : start + len(chunk.page_content)] == chunk.page_content


def test_a_short_last_fragment_joins_the_previous_chunk() -> None:
    text = PARAGRAPH + "\n\nThe end."
    chunks = split_documents([Document(text, metadata={"source": "a.md"})])
    assert chunks[-1].page_content.endswith("The end.")
    assert chunks[-1].page_content != "The end."
    assert all(count_tokens(chunk.page_content) >= MIN_CHUNK_TOKENS for chunk in chunks)


def test_short_pieces_join_only_up_to_the_minimum() -> None:
    """``--chunk-size 20`` gave one 72-token chunk: each piece under the minimum joined the next,
    however many followed (under 16 tokens each, a whole document was one chunk)."""
    for size in (8, 20, 40):
        chunks = split_documents([Document(PARAGRAPH, id="p")], chunk_size=size, chunk_overlap=0)
        sizes = [count_tokens(chunk.page_content) for chunk in chunks]
        assert min(sizes) >= MIN_CHUNK_TOKENS and max(sizes) < size + 2 * MIN_CHUNK_TOKENS, sizes
