"""The sample corpus shipped with the package: 300 SciFact abstracts (see ``NOTICE.md``) in BEIR
JSONL, which ``ingest.load([sample_corpus_path()])`` reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SAMPLE_QUESTION = "Is birth weight associated with the risk of breast cancer?"
"""The demo question: SciFact test claim 179, with four relevant abstracts."""


def data_path(name: str) -> Path:
    """The path of a file shipped in this directory."""
    return Path(__file__).parent / name


def sample_corpus_path() -> Path:
    """The sample corpus, BEIR JSONL (``_id``, ``title``, ``text``, ``metadata``)."""
    return data_path("scifact_sample.jsonl")


def sample_queries() -> list[dict[str, Any]]:
    """The SciFact test claims of the sample: ``_id``, ``text`` and ``relevant`` document ids."""
    with data_path("scifact_sample_queries.jsonl").open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]
