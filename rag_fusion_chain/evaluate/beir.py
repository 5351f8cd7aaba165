"""Load datasets in the BEIR layout: ``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``;
corpus Documents carry the BEIR ``_id`` as ``id``, so the kit's document ids and the qrels agree."""

from __future__ import annotations

import csv
import warnings
from dataclasses import dataclass
from pathlib import Path

from langchain_core.documents import Document

from rag_fusion_chain.ingest.files import beir_documents
from rag_fusion_chain.retrievers.signing import open_regular_file
from rag_fusion_chain.validation import counted

Qrels = dict[str, dict[str, int]]
"""Relevance judgements: ``{query_id: {document_id: relevance}}``."""


@dataclass(frozen=True)
class BeirDataset:
    """A BEIR dataset restricted to one split: the corpus, the judged queries and their qrels."""

    name: str
    corpus: list[Document]
    queries: dict[str, str]
    """``{query_id: text}``, only queries that have judgements in the split, in qrels order."""
    qrels: Qrels
    split: str = "test"
    queries_limit: int | None = None
    """The ``queries_limit`` the queries were cut to, if any."""


def _require(directory: Path, relative: str) -> Path:
    path = directory / relative
    if not path.is_file():
        raise FileNotFoundError(
            f"dataset_dir: {directory} has no {relative}; expected the BEIR layout corpus.jsonl, queries.jsonl, qrels/<split>.tsv"
        )
    return path


def _documents(directory: Path, name: str) -> list[Document]:
    """The records of a BEIR ``.jsonl`` file (``_id``, ``title``, ``text``) as Documents."""
    with open_regular_file(_require(directory, name)) as lines:  # the file checked, by line
        return beir_documents(lines, f"{directory.resolve().name}/{name}")


def read_qrels(path: Path) -> Qrels:
    """Read a BEIR qrels TSV (``query-id corpus-id score``, header optional) in file order."""
    qrels: Qrels = {}
    with open_regular_file(path) as lines:  # the file checked, by line
        for number, line in enumerate(lines, start=1):
            try:  # not UTF-8, a field over csv's size limit, a short row, a score no finite number
                row = next(csv.reader([line.decode("utf-8")], delimiter="\t"), [])
                if row and row[0] != "query-id":
                    qrels.setdefault(row[0], {})[row[1]] = int(float(row[2]))
            except (csv.Error, IndexError, ValueError, OverflowError) as error:
                got = error if isinstance(error, csv.Error | UnicodeError) else repr(row)
                raise ValueError(
                    f"{path}:{number}: expected query-id, corpus-id, score; got {got}"
                ) from error
    return qrels


def load_beir(
    dataset_dir: str | Path, *, split: str = "test", queries_limit: int | None = None
) -> BeirDataset:
    """Load a BEIR-layout dataset: corpus Documents, the split's queries and its qrels;
    ``queries_limit`` keeps the first N judged queries (in qrels order) for quick runs."""
    directory = Path(dataset_dir)
    if not directory.is_dir():
        raise FileNotFoundError(f"dataset_dir: {directory} is not a directory")
    if queries_limit is not None and queries_limit <= 0:
        raise ValueError(f"queries_limit must be a positive integer or None, got {queries_limit}")
    qrels = read_qrels(_require(directory, f"qrels/{split}.tsv"))
    all_queries = {query.id: query.page_content for query in _documents(directory, "queries.jsonl")}
    if missing := [query_id for query_id in qrels if not all_queries.get(query_id, "").strip()]:
        raise ValueError(
            f"qrels/{split}.tsv judges {counted(len(missing), 'query', 'queries')} absent from queries.jsonl or without text there, e.g. {missing[:3]}"
        )
    query_ids = list(qrels)[:queries_limit] if queries_limit else list(qrels)
    corpus = _documents(directory, "corpus.jsonl")
    judged = {document for query_id in query_ids for document in qrels[query_id]}
    if absent := sorted(judged - {document.id for document in corpus}):  # ArguAna's qrels have one
        judged_absent = f"{counted(len(absent), 'judged document')} absent from corpus.jsonl"
        message = f"qrels/{split}.tsv: {judged_absent} (never retrieved), e.g. {absent[:3]}"
        warnings.warn(message, stacklevel=2)
    kept_queries = {query_id: all_queries[query_id] for query_id in query_ids}
    kept_qrels = {query_id: qrels[query_id] for query_id in query_ids}
    return BeirDataset(
        directory.resolve().name, corpus, kept_queries, kept_qrels, split, queries_limit
    )
