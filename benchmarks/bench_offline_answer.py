"""How often the offline answer quotes a relevant document, on the bundled SciFact sample.

Set-up: the kit's sample corpus (300 SciFact abstracts, one passage each) in a BM25 index
(``BM25Retriever``), and its 100 SciFact test claims with their relevant abstracts (qrels). For
each claim, RAG-Fusion runs offline as the ready chain does: the claim's top ``--k`` hits are
the feedback for ``--n`` :func:`offline.feedback_queries`, each query (the claim first) takes
its top ``--k`` hits, reciprocal rank fusion keeps ``--top-n`` passages, and
:func:`offline.extractive_answer` quotes them with ``[n]``.

Measured (share of the claims):

* ``quotes relevant``: the answer quotes at least one sentence from a relevant abstract;
* ``first relevant``: its first quoted sentence comes from a relevant abstract;
* ``quotes from relevant``: the share of all quoted sentences that come from relevant abstracts;
* ``relevant retrieved``: a relevant abstract is among the fused passages (the ceiling);
* ``quotes / retrieved``: quotes relevant among the claims whose fused passages hold one.

The figures are deterministic (no timing): compare them with those of another commit run the
same way.

    python benchmarks/bench_offline_answer.py --examples 3
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.documents import Document

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rag_fusion_chain import ingest, offline  # noqa: E402
from rag_fusion_chain.data import sample_corpus_path, sample_queries  # noqa: E402
from rag_fusion_chain.fusion import reciprocal_rank_fusion  # noqa: E402
from rag_fusion_chain.retrievers.bm25 import BM25Retriever  # noqa: E402

_QUOTE = re.compile(r"^- (.+) \[(\d+)\]$")


def fused(retriever: BM25Retriever, queries: Sequence[str], k: int, top_n: int) -> list[Document]:
    """RRF over the top ``k`` BM25 hits of each query, ``top_n`` kept."""
    lists = [retriever.invoke(query, k=k) for query in queries]
    return reciprocal_rank_fusion.model_copy(update={"top_n": top_n}).invoke(lists)


def offline_rag_fusion(
    retriever: BM25Retriever, question: str, options: Any
) -> tuple[list[str], list[Document], list[str]]:
    """(queries, fused documents, answer lines) of RAG-Fusion without a model."""
    feedback = retriever.invoke(question, k=options.k)
    queries = [question, *offline.feedback_queries(question, feedback, options.n)]
    documents = fused(retriever, queries, options.k, options.top_n)
    return queries, documents, offline.extractive_answer(question, documents, queries).split("\n")


def cited_ids(lines: Sequence[str], documents: Sequence[Document]) -> list[str]:
    """The abstract id of every quoted sentence, in answer order (the quote is checked)."""
    ids = []
    for line in lines:
        match = _QUOTE.match(line)
        if match:
            document = documents[int(match[2]) - 1]
            assert " ".join(match[1].split()[:4]) in " ".join(document.page_content.split())
            ids.append(str(document.metadata["doc_id"]))
    return ids


def evaluate(
    retriever: BM25Retriever, claims: Sequence[dict[str, Any]], options: argparse.Namespace
) -> tuple[dict[str, float], list[tuple[str, list[str], list[str]]]]:
    """The shares, and (claim, queries, answer lines) per claim."""
    counts = {"quotes relevant": 0, "first relevant": 0, "relevant retrieved": 0}
    quoted, quoted_relevant = 0, 0
    examples = []
    for claim in claims:
        question, relevant = claim["text"], set(claim["relevant"])
        queries, documents, lines = offline_rag_fusion(retriever, question, options)
        cited = cited_ids(lines, documents)
        counts["quotes relevant"] += any(doc_id in relevant for doc_id in cited)
        counts["first relevant"] += bool(cited) and cited[0] in relevant
        quoted += len(cited)
        quoted_relevant += sum(doc_id in relevant for doc_id in cited)
        counts["relevant retrieved"] += any(
            str(document.metadata["doc_id"]) in relevant for document in documents
        )
        examples.append((question, queries, lines))
    shares = {name: count / len(claims) for name, count in counts.items()}
    shares["quotes from relevant"] = quoted_relevant / max(1, quoted)
    shares["quotes / retrieved"] = counts["quotes relevant"] / max(1, counts["relevant retrieved"])
    return shares, examples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=4, help="expanded queries per claim")
    parser.add_argument("--k", type=int, default=10, help="BM25 hits per query")
    parser.add_argument("--top-n", type=int, default=5, help="fused passages answered from")
    parser.add_argument("--examples", type=int, default=0, help="claims to show in full")
    options = parser.parse_args()

    retriever = BM25Retriever.from_documents(ingest.load([sample_corpus_path()]))
    claims = sample_queries()
    print(
        f"{len(claims)} SciFact claims, 300 abstracts, BM25, n={options.n}, k={options.k}, "
        f"top_n={options.top_n}, {offline.SENTENCES} sentences (1 per passage)"
    )
    header = ["quotes relevant", "first relevant", "quotes from relevant"]
    header += ["relevant retrieved", "quotes / retrieved"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    shares, examples = evaluate(retriever, claims, options)
    print("| " + " | ".join(f"{shares[name]:.0%}" for name in header) + " |")
    for question, queries, lines in examples[: options.examples]:
        print(f"\n{question}\n  queries: " + " | ".join(queries[1:]))
        print("\n".join("  " + line for line in lines[1:]))


if __name__ == "__main__":
    main()
