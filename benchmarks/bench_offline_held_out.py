"""The offline answer and queries on held-out real text: scikit-learn's user guide (Debian).

The heuristics of :mod:`offline` were tuned on the SciFact sample; this
runs them on text nobody here wrote or tuned on: the 45 HTML pages of the scikit-learn 1.2.1
user guide that Debian's ``python-sklearn-doc`` installs (``apt-get install
python-sklearn-doc``), read at run time from ``--pages``, loaded and split by
:mod:`rag_fusion_chain.ingest` and indexed with :class:`BM25Retriever`. For each of the
:data:`QUESTIONS`, RAG-Fusion runs offline (the question plus ``--n`` pseudo-relevance-feedback
queries, top ``--k`` hits each, RRF to ``--top-n`` passages) and the extractive answer quotes
three sentences (:func:`offline.extractive_answer`). Each quote is judged with the page's own HTML, not with the kit's
rules:

* *reference line*: the quote lies inside a reference list (a Sphinx ``References`` topic, a
  footnote or a citation element of the page);
* *broken sentence*: the quote does not occur in the page text, or runs over two block
  elements (a heading into a paragraph, one table cell into the next), or does not end with a
  full stop, or ends with an abbreviation ("et al.", "e.g.", "Fig.", "No.", "vs.", ...), or has an
  unclosed parenthesis, or starts lowercase;
* *code word* (queries): a word the feedback added that the page shows only inside code.

The figures are deterministic (no timing): compare them with another commit run the same way.

    python benchmarks/bench_offline_held_out.py --show
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

from bs4 import BeautifulSoup

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_offline_answer import offline_rag_fusion  # noqa: E402

from rag_fusion_chain import ingest  # noqa: E402
from rag_fusion_chain.retrievers.bm25 import BM25Retriever  # noqa: E402

PAGES = Path("/usr/share/doc/python-sklearn-doc/html/modules")
QUESTIONS = [
    "How does the Ledoit-Wolf estimator shrink the covariance matrix?",
    "What is the Oracle Approximating Shrinkage estimator?",
    "How does the isolation forest isolate anomalies?",
    "How does the local outlier factor measure the density of a sample?",
    "What is the difference between PCA and kernel PCA?",
    "How does FastICA separate independent components?",
    "What is non-negative matrix factorization used for?",
    "How does latent Dirichlet allocation model topics?",
    "How does the lasso select features?",
    "What is the elastic net penalty?",
    "How does orthogonal matching pursuit work?",
    "What is Bayesian ridge regression?",
    "How are random forests built from decision trees?",
    "How does gradient boosting fit regression trees?",
    "What does the learning rate do in AdaBoost?",
    "How does DBSCAN find clusters of core samples?",
    "What is the silhouette coefficient?",
    "How does spectral clustering use the affinity matrix?",
    "What is mean shift clustering?",
    "How does the hashing trick map features to indices?",
    "What is tf-idf term weighting?",
    "How does t-SNE embed high-dimensional data?",
    "What is Isomap?",
    "How does locally linear embedding work?",
    "What kernel functions do support vector machines use?",
    "How are probabilities calibrated with isotonic regression?",
    "What is Platt scaling?",
    "How does a Gaussian process use a kernel for regression?",
    "What is the Johnson-Lindenstrauss lemma?",
    "How does naive Bayes handle text classification?",
    "What does stratified k-fold cross-validation preserve?",
    "How is the ROC AUC score computed?",
    # questions worded like the titles of works the reference lists cite
    "Who proposed bagging predictors?",
    "Which paper describes the advantages of careful seeding for k-means++?",
    "How do you estimate the support of a high-dimensional distribution?",
    "What is a global geometric framework for nonlinear dimensionality reduction?",
    "What is the optimality of naive Bayes?",
    "What is a well-conditioned estimator for large-dimensional covariance matrices?",
    "What is the random subspace method for constructing decision forests?",
    "How do stochastic algorithms find structure for approximate matrix decompositions?",
]
_QUOTE = re.compile(r"^- (.+) \[(\d+)\]$")
_ABBREVIATION_END = re.compile(
    r"\b(?:et al|e\.g|i\.e|Fig|Figs|No|Eq|Sec|vs|cf|approx|pp|Vol|Dr|Mr|Mrs|Prof)\.$"
)


def _normal(text: str) -> str:
    return " ".join(text.split())


_REFERENCES_DIRECTIVE = re.compile(r"^\.\. (?:topic|rubric):: References", re.MULTILINE)


def rst_parts(source: str) -> tuple[str, str, str, str]:
    """:func:`page_parts` of an RST source: the References topics' indented blocks and
    ``.. [name]`` citations are the reference list, ``::`` blocks the code, and a block is a
    paragraph between blank lines."""
    text = Path(source).read_text(encoding="utf-8")
    paragraphs = re.split(r"\n\s*\n", text)
    references, code, inside, literal, previous = [], [], False, False, ""
    for paragraph in paragraphs:
        indented = paragraph[:1].isspace()
        inside = bool(_REFERENCES_DIRECTIVE.match(paragraph)) or (inside and indented)
        literal = indented and (literal or previous.rstrip().endswith("::"))
        if inside or paragraph.lstrip().startswith(".. ["):
            references.append(_normal(paragraph))
        if literal:
            code.append(_normal(paragraph))
        previous = paragraph
    return (
        _normal(text),
        " | ".join(references),
        " ".join(code),
        "|".join(re.sub(r"\s+", "", paragraph) for paragraph in paragraphs),
    )


@cache
def page_parts(source: str) -> tuple[str, str, str, str]:
    """The page's whole text, its reference-list text and its code text, whitespace collapsed,
    and the text of each block element (paragraph, list item, cell...) without whitespace."""
    if source.endswith(".txt"):
        return rst_parts(source)
    soup = BeautifulSoup(Path(source).read_text(encoding="utf-8"), "html.parser")
    references = [
        topic
        for topic in soup.select("aside.topic, div.topic")
        if topic.select_one(".topic-title")
        and topic.select_one(".topic-title").get_text().startswith("References")
    ]
    references += soup.select(".footnote, .citation, dl.citation")
    code = soup.select("pre")
    blocks = soup.select("p, li, dd, dt, td, th, h1, h2, h3, h4, h5, h6, pre, caption")
    return (
        _normal(soup.get_text(" ")),
        " | ".join(_normal(part.get_text(" ")) for part in references),
        " ".join(_normal(part.get_text(" ")) for part in code),
        "|".join(re.sub(r"\s+", "", part.get_text()) for part in blocks),
    )


def judge(quote: str, source: str) -> list[str]:
    """Why ``quote`` is not a whole sentence of prose (empty when it is)."""
    text, references, _, blocks = page_parts(source)
    flat = re.sub(r"\s+", "", quote)
    problems = []
    if flat and flat in re.sub(r"\s+", "", references):
        problems.append("reference line")
    if flat not in re.sub(r"\s+", "", text):
        problems.append("not in page")
    elif flat not in blocks:
        problems.append("spans blocks")
    if not re.search(r"[.!?][\"”’)\]]*$", quote) or _ABBREVIATION_END.search(quote):
        problems.append("cut")
    if quote.count("(") > quote.count(")") or quote[:1].islower() or quote[:1] in "_)]},.;:":
        problems.append("cut")
    return problems


@cache
def _prose(source: str) -> str:
    """The page's text without its code blocks."""
    text, _, code, _ = page_parts(source)
    return text.replace(code, "")


def code_words(query: str, question: str, sources: Sequence[str]) -> list[str]:
    """Added words that the pages show in code only, never in their prose."""
    added = re.findall(r"[^\W_]+", query.removeprefix(question))
    found = []
    for word in added:
        pattern = re.compile(rf"\b{re.escape(word)}\b", re.IGNORECASE)
        in_code = any(pattern.search(page_parts(source)[2]) for source in sources)
        in_prose = any(pattern.search(_prose(source)) for source in sources)
        if in_code and not in_prose:
            found.append(word)
    return found


def run(
    retriever: BM25Retriever, options: Any
) -> list[tuple[str, list[str], list[tuple[str, str, list[str]]]]]:
    """(question, queries, [(quote, source, problems)]) per question."""
    results = []
    for question in QUESTIONS:
        queries, documents, lines = offline_rag_fusion(retriever, question, options)
        quotes = []
        for line in lines[1:]:
            match = _QUOTE.match(line)
            if match:
                source = str(options.pages / documents[int(match[2]) - 1].metadata["source"])
                quotes.append((match[1], source, judge(match[1], source)))
        results.append((question, queries, quotes))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=Path, default=PAGES)
    parser.add_argument(
        "--format",
        choices=["html", "rst.txt"],
        default="html",
        help="the rendered pages, or their RST sources (--pages .../html/_sources/modules)",
    )
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--top-n", type=int, default=5)
    parser.add_argument("--show", action="store_true", help="print every answer and query")
    options = parser.parse_args()
    pages = sorted(str(page) for page in options.pages.glob(f"*.{options.format}"))
    if not pages:
        raise SystemExit(
            f"--pages: no HTML page in {options.pages} (apt-get install python-sklearn-doc)"
        )
    chunks = ingest.split_documents(ingest.load(pages))
    retriever = BM25Retriever.from_documents(chunks)
    print(
        f"{len(QUESTIONS)} questions, {len(pages)} {options.format} pages of the scikit-learn "
        "user guide, "
        f"{len(chunks)} chunks, BM25, n={options.n}, k={options.k}, top_n={options.top_n}"
    )
    print(
        "| quotes | reference line | broken sentence | answers with either | "
        "queries with a code-only word |"
    )
    print("|---|---|---|---|---|")
    results = run(retriever, options)
    quotes = [quote for _, _, answer in results for quote in answer]
    reference = sum("reference line" in problems for _, _, problems in quotes)
    broken = sum(bool(set(problems) - {"reference line"}) for _, _, problems in quotes)
    bad_answers = sum(any(problems for _, _, problems in answer) for _, _, answer in results)
    coded = sum(
        bool(code_words(query, question, pages))
        for question, queries, _ in results
        for query in queries[1:]
    )
    generated = sum(len(queries) - 1 for _, queries, _ in results)
    print(
        f"| {len(quotes)} | {reference} | {broken} | {bad_answers}/{len(results)} | "
        f"{coded}/{generated} |"
    )
    print("\n### Every flagged quote")
    for question, _, answer in results:
        for quote, source, problems in answer:
            if problems:
                print(
                    f"- {question} -> {', '.join(problems)}: `{quote[:160]}` ({Path(source).name})"
                )
    for question, queries, answer in results if options.show else []:
        print(
            f"\n{question}\n  queries: " + " | ".join(q.removeprefix(question) for q in queries[1:])
        )
        for quote, source, problems in answer:
            flag = " FLAG " + ", ".join(problems) if problems else ""
            print(f"  - {quote} ({Path(source).name}){flag}")


if __name__ == "__main__":
    main()
