"""The sample corpus shipped with the package: 300 SciFact abstracts (see ``NOTICE.md``).

>>> documents = sample_documents()
>>> len(documents), documents[0].id == documents[0].metadata["doc_id"]
(300, True)
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from langchain_core.documents import Document

SAMPLE_CORPUS_FILE = "scifact_sample.jsonl"
SAMPLE_QUERIES_FILE = "scifact_sample_queries.jsonl"
SAMPLE_QUESTION = "Is birth weight associated with the risk of breast cancer?"
"""The demo question; SciFact test claim 179 asks the same, with four relevant abstracts."""


def data_path(name: str) -> Path:
    """The path of a file shipped in this directory."""
    return Path(str(resources.files(__name__).joinpath(name)))


def sample_corpus_path() -> Path:
    """The sample corpus, BEIR JSONL (``_id``, ``title``, ``text``, ``metadata``)."""
    return data_path(SAMPLE_CORPUS_FILE)


def sample_documents() -> list[Document]:
    """The sample abstracts as Documents: title and text joined, ``id`` the SciFact document id."""
    documents = []
    with sample_corpus_path().open(encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            documents.append(
                Document(
                    page_content=f"{record['title']}\n{record['text']}",
                    id=record["_id"],
                    metadata={
                        "doc_id": record["_id"],
                        "title": record["title"],
                        "source": f"scifact:{record['_id']}",
                    },
                )
            )
    return documents


def sample_queries() -> list[dict[str, Any]]:
    """The SciFact test claims of the sample: ``_id``, ``text`` and ``relevant`` document ids."""
    with data_path(SAMPLE_QUERIES_FILE).open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


__all__ = [
    "SAMPLE_QUESTION",
    "data_path",
    "sample_corpus_path",
    "sample_documents",
    "sample_queries",
]
