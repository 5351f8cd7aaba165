"""How much of the package one ready-chain call runs: distinct lines and functions executed.

For each strategy, with a chat model (a fake one) and offline, one build + invoke of the ready
chain over two stock LangChain retrievers (community ``BM25Retriever`` and an
``InMemoryVectorStore`` retriever), traced with ``sys.settrace`` on every thread; only lines in
``rag_fusion_chain/`` count. A warm-up call first, so imports are not counted. The baseline is
the plain composition ``queries.rag_fusion(llm) | retriever.map() | reciprocal_rank_fusion``.

    python benchmarks/bench_machinery.py            # prints the table (results/machinery.md)

Statements are counted too (each executed line mapped to the innermost statement holding it), so
that a call wrapped over several lines by the formatter counts once: machinery, not style.
"""

from __future__ import annotations

import ast
import sys
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.language_models import FakeListChatModel
from langchain_core.runnables import RunnableParallel
from langchain_core.vectorstores import InMemoryVectorStore

import rag_fusion_chain
from rag_fusion_chain import chains, fusion, queries, strategies

PACKAGE = str(Path(rag_fusion_chain.__file__).parent)
QUESTION = "How do heat pumps keep a house warm in winter?"
TEXTS = [
    "Heat pumps move heat from the outside air into the house.",
    "In cold weather a heat pump loses efficiency.",
    "Insulation keeps heat inside a house.",
    "Solar panels turn light into electricity.",
    "Ground source heat pumps use the stable temperature underground.",
    "Wind turbines spin to make electricity.",
]


def retrievers() -> list[Any]:
    from langchain_community.retrievers import BM25Retriever

    documents = [Document(text, metadata={"source": f"note-{i}"}) for i, text in enumerate(TEXTS)]
    bm25 = BM25Retriever.from_documents(documents, k=3)
    store = InMemoryVectorStore.from_documents(documents, DeterministicFakeEmbedding(size=16))
    return [bm25, store.as_retriever(search_kwargs={"k": 3})]


def model() -> FakeListChatModel:
    replies = ["heat pump winter\nheat pump efficiency cold\nhome heating", "An answer [1]."]
    return FakeListChatModel(responses=replies * 4)


def statement_count(lines: set[tuple[str, int]]) -> int:
    """How many distinct statements hold ``lines`` (the innermost statement holding each line)."""
    statements: set[tuple[str, int, int]] = set()
    for filename in {filename for filename, _ in lines}:
        tree = ast.parse(Path(filename).read_text())
        spans = [
            (node.lineno, node.end_lineno or node.lineno)
            for node in ast.walk(tree)
            if isinstance(node, ast.stmt)
        ]
        for line in (line for name, line in lines if name == filename):
            holding = [span for span in spans if span[0] <= line <= span[1]] or [(line, line)]
            statements.add(
                (filename, *min(holding, key=lambda span: span[1] - span[0]))
            )  # a decorator: its own
    return len(statements)


def traced(call: Callable[[], Any]) -> tuple[int, int, int, int]:
    """(distinct package lines, statements, functions, how many of those are comprehensions) run by
    ``call`` on any thread."""
    lines: set[tuple[str, int]] = set()
    functions: set[tuple[str, int, str]] = set()

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        filename = frame.f_code.co_filename
        if not filename.startswith(PACKAGE):
            return None
        functions.add((filename, frame.f_code.co_firstlineno, frame.f_code.co_name))
        lines.add((filename, frame.f_lineno))

        def local(frame: Any, event: str, arg: Any) -> Any:
            if event == "line":
                lines.add((filename, frame.f_lineno))
            return local

        return local

    threading.settrace(tracer)
    sys.settrace(tracer)
    try:
        call()
    finally:
        sys.settrace(None)
        threading.settrace(None)  # type: ignore[arg-type]
    comprehensions = [name for *_, name in functions if name.startswith("<") and name != "<lambda>"]
    return len(lines), statement_count(lines), len(functions), len(comprehensions)


def plain() -> Any:
    both = retrievers()
    search = RunnableParallel({f"r{i}": r.map() for i, r in enumerate(both)}) | (
        lambda out: [ranked for lists in out.values() for ranked in lists]
    )
    plain_chain = queries.rag_fusion(model(), 3) | search | fusion.reciprocal_rank_fusion
    return plain_chain.invoke(QUESTION)


def ready(strategy: str, with_model: bool) -> Callable[[], Any]:
    def call() -> Any:
        llm = model() if with_model else None
        return chains.chain_for(strategy, retrievers(), llm).invoke(QUESTION)

    return call


def main() -> None:
    warnings.simplefilter("ignore")
    rows = [("plain composition (rag-fusion queries, .map(), RRF)", plain)]
    for strategy in strategies.STRATEGIES:
        rows.append((f"{strategy}, with a model", ready(strategy, True)))
        rows.append((f"{strategy}, offline", ready(strategy, False)))
    print("| call | package lines run | statements | functions run | of which comprehensions |")
    print("|---|---|---|---|---|")
    for label, call in rows:
        call()  # warm-up: imports and caches are not counted
        lines, statements, functions, comprehensions = traced(call)
        print(f"| {label} | {lines} | {statements} | {functions} | {comprehensions} |", flush=True)


if __name__ == "__main__":
    main()
