"""Markdown headings and BEIR titles stay with their text (issue 20 item 4): none is a chunk alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from langchain_core.documents import Document

from rag_fusion_chain import ingest
from rag_fusion_chain.data import sample_corpus_path
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


@pytest.mark.timeout(120)  # a hang guard: about 1 s here; the old heading pattern took minutes
def test_a_heading_line_with_a_long_inner_run_of_spaces_is_read_in_linear_time() -> None:
    """``(.+?)[ \t#]*$`` retried the trailing run at every character of a heading line whose run
    of spaces or #s is not at its end: quadratic, about 100 s for 200,000 (a crafted file)."""
    spaced = "# Basalt" + " " * 400_000 + "columns\n\nLava cools and contracts into columns."
    chunks = split_documents([Document(spaced, metadata={"source": "spaced.md"})])
    assert chunks[-1].metadata["section"] == spaced.splitlines()[0].removeprefix("# ")
    closed = "# Basalt ##\n\n## ##\n\nLava cools and contracts into long six-sided columns."
    [chunk] = split_documents([Document(closed, metadata={"source": "closed.md"})])
    assert chunk.metadata["section"] == "Basalt"  # closing #s dropped; an empty heading: no title


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


LONG_HEADING = (
    "Mosaic PPM1D mutations are associated with predisposition to breast and ovarian cancer "
    "in a population based study of women"
)  # 22 tokens: over the 16 that used to join the text, too long to share the paragraph whole
LONG_TITLES = [
    LONG_HEADING,
    "Microstructural development of human newborn cerebral white matter assessed in vivo by "
    "diffusion tensor magnetic resonance imaging.",
]

INTRODUCTION = "Agents plan, remember and use tools; this post walks through each part in turn."


def _check_chunks(text: str, chunks: list[Document], chunk_size: int) -> None:
    """Each chunk is the span of ``text`` at its ``start_index``, within ``chunk_size`` tokens,
    and together they hold every word of ``text``."""
    for chunk in chunks:
        start = chunk.metadata["start_index"]
        assert text[start : start + len(chunk.page_content)] == chunk.page_content
        assert count_tokens(chunk.page_content) <= chunk_size, chunk.page_content
    assert set(text.split()) == {word for chunk in chunks for word in chunk.page_content.split()}


def _not_headings(chunk: Document, headings: list[str]) -> str:
    """What is left of the chunk's text without the given headings and Markdown heading marks."""
    text = chunk.page_content
    for heading in headings:
        text = text.replace(heading, "")
    return text.replace("#", "").strip()


@pytest.mark.parametrize("title", LONG_TITLES)
def test_a_long_beir_title_opens_the_first_chunk_of_its_abstract(
    tmp_path: Path, title: str
) -> None:
    """27 of the first 60 SciFact sample records gave a chunk that was their title alone."""
    assert count_tokens(title) >= MIN_CHUNK_TOKENS
    record = {"_id": "r1", "title": title, "text": PARAGRAPH.strip()}
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps(record) + "\n", encoding="utf-8")
    [document] = ingest.load([corpus])

    chunks = split_documents([document])

    assert len(chunks) > 1
    assert chunks[0].page_content.startswith(f"{title}\nTask decomposition breaks")
    assert all(_not_headings(chunk, [title]) for chunk in chunks)
    _check_chunks(document.page_content, chunks, 300)


@pytest.mark.parametrize("headings", [[LONG_HEADING], ["Agents", LONG_HEADING, "Planning"]])
def test_a_long_markdown_heading_opens_the_first_chunk_of_its_section(headings: list[str]) -> None:
    """A heading of 16 tokens or more before a section longer than a chunk was a chunk alone."""
    marks = "\n\n".join(f"{'#' * level} {heading}" for level, heading in enumerate(headings, 1))
    text = f"{INTRODUCTION}\n\n{marks}\n\n{PARAGRAPH}\n\n## Next\n\nThe end of the post."

    chunks = split_documents([Document(text, id="post.md")])

    [opening] = [chunk for chunk in chunks if LONG_HEADING in chunk.page_content]
    assert marks in opening.page_content
    assert opening.page_content.endswith(".")  # a whole sentence of the section
    assert "Task decomposition breaks" in opening.page_content
    assert INTRODUCTION not in opening.page_content
    assert opening.metadata["section"] == " > ".join(headings)
    assert all(_not_headings(chunk, headings) for chunk in chunks)
    _check_chunks(text, chunks, 300)


@pytest.mark.parametrize("chunk_size", [20, 40, 100])
def test_a_heading_longer_than_a_chunk_is_cut_and_its_last_part_opens_the_text(
    chunk_size: int,
) -> None:
    heading = " ".join([LONG_HEADING] * 3)  # 66 tokens
    text = f"# {heading}\n\n{PARAGRAPH}"

    chunks = split_documents(
        [Document(text, id="long.md")], chunk_size=chunk_size, chunk_overlap=chunk_size // 5
    )

    opening = next(chunk for chunk in chunks if "Task decomposition" in chunk.page_content)
    last_part, opening_text = opening.page_content.split("\n\n")
    assert f"# {heading}".endswith(last_part)  # the heading's last part opens the text
    assert opening_text.startswith("Task decomposition breaks")  # its words fill the chunk
    assert chunks[0].page_content.startswith("# Mosaic")
    _check_chunks(text, chunks, chunk_size + 2 * MIN_CHUNK_TOKENS)


def test_no_chunk_of_the_shipped_sample_is_a_title_alone() -> None:
    documents = ingest.load([sample_corpus_path()])

    chunks = split_documents(documents)

    titles = {document.id: document.metadata["title"] for document in documents}
    assert not [c.id for c in chunks if c.page_content.strip() == titles[c.metadata["doc_id"]]]
    assert max(count_tokens(chunk.page_content) for chunk in chunks) <= 300
