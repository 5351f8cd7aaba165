"""How often the offline answer quotes a relevant document, before and after, on the bundled sample.

Set-up: the kit's sample corpus (300 SciFact abstracts, one passage each) in a BM25 index
(``BM25Retriever``), and its 100 SciFact test claims with their relevant abstracts (qrels). For
each claim, RAG-Fusion runs offline: pseudo-relevance-feedback queries (the claim first, then
``--n`` expanded queries), top ``--k`` BM25 hits per query, reciprocal rank fusion to
``--top-n`` passages, then the extractive answer quoting ``--sentences`` sentences with ``[n]``.

The *baseline* is ``rag_fusion_chain/offline.py`` as of ``--baseline-ref`` (read with
``git show`` and loaded as a module beside the current one), so both run on the same index in the
same process. Four combinations separate the two changes: baseline or current query generator,
times baseline or current answer.

Measured per combination (share of the claims):

* ``quotes relevant``: the answer quotes at least one sentence from a relevant abstract;
* ``first relevant``: its first quoted sentence comes from a relevant abstract;
* ``quotes from relevant``: the share of all quoted sentences that come from relevant abstracts;
* ``relevant retrieved``: a relevant abstract is among the fused passages (the ceiling);
* ``quotes / retrieved``: quotes relevant among the claims whose fused passages hold one.

    python benchmarks/bench_offline_answer.py                    # baseline: the commit below
    python benchmarks/bench_offline_answer.py --baseline-ref main --examples 3
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from langchain_core.documents import Document

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rag_fusion_chain import ingest, offline  # noqa: E402
from rag_fusion_chain.data import sample_corpus_path, sample_queries  # noqa: E402
from rag_fusion_chain.fusion import reciprocal_rank_fusion  # noqa: E402
from rag_fusion_chain.retrievers.bm25 import BM25Retriever  # noqa: E402

BASELINE_REF = "00c57cd"
"""main before the new extractive answer and query phrases."""
_QUOTE = re.compile(r"^- (.+) \[(\d+)\]$")


def git_module(ref: str, name: str, replacing: dict[str, ModuleType] | None = None) -> ModuleType:
    """``rag_fusion_chain/<name>.py`` at git ``ref``, loaded as module ``<name>_baseline``; the
    modules in ``replacing`` stand in for theirs while it is imported."""
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{ref}:rag_fusion_chain/{name}.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as handle:
        handle.write(source)
    spec = importlib.util.spec_from_file_location(f"{name}_baseline", handle.name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the annotations through it
    saved = {key: sys.modules[key] for key in replacing or {}}
    sys.modules.update(replacing or {})
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.update(saved)
        Path(handle.name).unlink()
    return module


def baseline_module(ref: str) -> ModuleType:
    """``rag_fusion_chain/offline.py`` at git ``ref``."""
    return git_module(ref, "offline")


def fused(retriever: BM25Retriever, queries: Sequence[str], k: int, top_n: int) -> list[Document]:
    """RRF over the top ``k`` BM25 hits of each query, ``top_n`` kept."""
    lists = [retriever.invoke(query, k=k) for query in queries]
    return reciprocal_rank_fusion.model_copy(update={"top_n": top_n}).invoke(lists)


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
    generator_module: ModuleType,
    answer_module: ModuleType,
    retriever: BM25Retriever,
    claims: Sequence[dict[str, Any]],
    options: argparse.Namespace,
) -> tuple[dict[str, float], list[tuple[str, list[str], list[str]]]]:
    """The four shares for one combination, and (claim, queries, answer lines) per claim."""
    generator = generator_module.PseudoRelevanceFeedback(
        retriever=retriever, n=options.n, include_original=True
    )
    answer = answer_module.ExtractiveAnswer(
        sentences=options.sentences, per_passage=options.per_passage
    )
    counts = {"quotes relevant": 0, "first relevant": 0, "relevant retrieved": 0}
    quoted, quoted_relevant = 0, 0
    examples = []
    for claim in claims:
        question, relevant = claim["text"], set(claim["relevant"])
        queries = generator.invoke(question)
        documents = fused(retriever, queries, options.k, options.top_n)
        lines = answer.lines({"question": question, "documents": documents, "queries": queries})
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
    parser.add_argument("--baseline-ref", default=BASELINE_REF)
    parser.add_argument("--n", type=int, default=4, help="expanded queries per claim")
    parser.add_argument("--k", type=int, default=10, help="BM25 hits per query")
    parser.add_argument("--top-n", type=int, default=5, help="fused passages answered from")
    parser.add_argument("--sentences", type=int, default=3, help="sentences quoted")
    parser.add_argument("--per-passage", type=int, default=1, help="sentences per passage")
    parser.add_argument("--examples", type=int, default=0, help="claims to show in full")
    options = parser.parse_args()

    retriever = BM25Retriever.from_documents(ingest.load([sample_corpus_path()]))
    claims = sample_queries()
    baseline = baseline_module(options.baseline_ref)
    modules = {"baseline": baseline, "current": offline}
    print(
        f"{len(claims)} SciFact claims, 300 abstracts, BM25, n={options.n}, k={options.k}, "
        f"top_n={options.top_n}, {options.sentences} sentences ({options.per_passage} per "
        f"passage); baseline "
        f"{options.baseline_ref}"
    )
    header = ["queries", "answer", "quotes relevant", "first relevant", "quotes from relevant"]
    header += ["relevant retrieved", "quotes / retrieved"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    shown: dict[tuple[str, str], list[tuple[str, list[str], list[str]]]] = {}
    for generator_name in modules:
        for answer_name in modules:
            shares, examples = evaluate(
                modules[generator_name], modules[answer_name], retriever, claims, options
            )
            shown[generator_name, answer_name] = examples
            cells = [f"{shares[name]:.0%}" for name in header[2:]]
            print(f"| {generator_name} | {answer_name} | " + " | ".join(cells) + " |")
    for position in range(options.examples):
        for name in ("baseline", "current"):
            question, queries, lines = shown[name, name][position]
            print(f"\n{name}: {question}")
            print("  queries: " + " | ".join(queries[1:]))
            print("\n".join("  " + line for line in lines[1:]))


if __name__ == "__main__":
    main()
