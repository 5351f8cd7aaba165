"""The offline answer: quote the sentences of the retrieved passages best supported by the
question's rarer terms (BM25 over the passages' sentences; the generated queries' terms at half
weight), headings, titles, tables and markup left out, each cited by its passage number, under a
label saying it is extractive (:data:`OFFLINE_LABEL`).

>>> extractive_answer("heat pumps", [Document("Heat pumps move heat.")], str.split)[1]
'- Heat pumps move heat. [1]'
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any

import sentencex
from langchain_core.documents import Document
from langchain_core.runnables import RunnableConfig, RunnableSerializable
from pydantic import ConfigDict

from rag_fusion_chain.query_parsing import dedupe_key
from rag_fusion_chain.retrievers.bm25 import tokenize
from rag_fusion_chain.validation import question_of, validate_count

OFFLINE_LABEL = "[offline extractive answer]"
"""How every offline answer starts, so nobody mistakes it for a generated one."""
OFFLINE_NOTE = (
    "No chat model is configured: these are the sentences of the retrieved passages that best "
    "match the question's distinctive terms, quoted as they are, not a generated answer."
)
Terms = Callable[[str], list[str]]
"""A tokenizer: text to index terms."""

_WORD = re.compile(r"[^\W_]+")
_BLANK_LINE = re.compile(r"\n\s*\n")
_NEVER_FINAL = re.compile(
    r"\b(?:approx|cf|ch|dr|eq|eqs|fig|figs|mr|mrs|ms|no|nos|pp|prof|ref|refs|sec|vol|vs)\.$",
    re.IGNORECASE,
)
"""Abbreviations sentencex may cut after that never end a sentence ("approx. 20", "Eq. (3)")."""
_GLUED_END = re.compile(r"[A-Za-z0-9_]\.\Z")
"""A stop with no space after it is inside a name ("sklearn.covariance.OAS"), not an end."""
_CANNOT_START = re.compile(r"[a-z_)\]},;:]")
"""A piece starting so continues the sentence before it (a cut inside "et al. [1])")."""
_SENTENCE_PUNCTUATION = (".", "!", "?", ":", ";", ",", "。", "！", "？", "；", "…", '"')
_HEADING_LINE = re.compile(r"#{1,6}\s|={3,}\s*$|-{3,}\s*$|.*¶$")
"""Markdown headings and rules, and Sphinx headings (their permalink sign ends them)."""
_MARKUP_LINE = re.compile(r"(?:```|~~~|<[^>]*>\s*$|!\[|\[\^?\w*\]:|[-=*_~]{3,}\s*$)")
_CODE_FENCES = ("```", "~~~")
_CALL_LINE = re.compile(r"[\w.]+\(")
_LIST_MARKER = re.compile(r"^(?:[-*+•]|\d{1,3}[.)])\s+")
_TITLE_WORDS = 12
"""A line of at most this many words, unpunctuated, opening a sentence before a capitalised or
numbered line: a title or a list item, not part of a sentence."""
_K1, _B = 1.2, 0.75
"""BM25's saturation and length normalisation, for scoring sentences."""
RELATED_TERM_WEIGHT = 0.5
"""Weight of a generated query's term (the question's weigh 1) when choosing sentences."""
PASSAGE_DISCOUNT = 0.3
"""A sentence's score is divided by ``1 + PASSAGE_DISCOUNT * position`` of its passage (from 0)."""


def inverse_document_frequency(document_frequency: int, document_count: int) -> float:
    """BM25's (Lucene's) idf: ``log(1 + (N - df + 0.5) / (df + 0.5))``, always positive.

    >>> round(inverse_document_frequency(1, 100), 3), round(inverse_document_frequency(99, 100), 3)
    (4.21, 0.015)
    """
    return math.log(1 + (document_count - document_frequency + 0.5) / (document_frequency + 0.5))


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text``, whitespace collapsed: sentencex's rule-based segmenter (which
    knows "et al.", "e.g.", "Fig. 3", "3.14", initials, "[1]" and CJK ends) per paragraph, a
    piece starting lowercase or with a closing bracket, or following a never-final abbreviation
    or an open parenthesis ("(Box 1) [2].") or inside a dotted name, joined back to the one
    before. A single line break (wrapped PDF text) ends nothing.

    >>> split_sentences("Title\\n\\nFirst one,\\nwrapped. CoT (Wei et al. [1]) works. 第三句。第四句")
    ['Title', 'First one, wrapped.', 'CoT (Wei et al. [1]) works.', '第三句。', '第四句']
    """
    pieces: list[str] = []
    for paragraph in _BLANK_LINE.split(text):
        joined = False
        for piece in sentencex.segment("en", paragraph):
            if not piece.strip():
                continue
            if joined and (
                _CANNOT_START.match(piece.lstrip())
                or _NEVER_FINAL.search(pieces[-1].strip())
                or pieces[-1].count("(") > pieces[-1].count(")")
                or (_GLUED_END.search(pieces[-1]) and piece[:1].isalnum())
            ):
                pieces[-1] += piece
            else:
                pieces.append(piece)
            joined = True
    return [" ".join(piece.split()) for piece in pieces]


_IDENTIFIER = re.compile(
    r"arXiv:\s*\d{4}\.\d{4,5}|\bdoi:|doi\.org/|\b10\.\d{4,9}/\S|\bISBN\b", re.I
)
_URL = re.compile(r"https?://\S+|www\.\S+")
_CITATION_MARKER = re.compile(r"^(?:[-*•]\s*)?\[\d+\]")
_LEADING_AUTHOR = re.compile(
    r"^(?:[-*•]\s*)?(?:\[\d+\]\s*)?(?:\d+\.\s+)?"
    r"(?:[A-Z][\w'’-]+,\s+(?:[A-Z]\.\s?)+|(?:[A-Z]\.\s?)+[A-Z][\w'’-]+|[A-Z][\w'’-]+\s+et\s+al\."
    r"|[A-Z][\w'’-]+(?:,\s+(?:and\s+)?[A-Z][\w'’-]+){2,})"
)
_PUBLICATION_YEAR = re.compile(
    r"\((?:[A-Z][a-z]{2,8}\.?\s+)?(?:19|20)\d{2}[a-z]?\)(?:[.,:]\s*\S|\s*[`\"“])"
    r"|,\s*(?:19|20)\d{2}[a-z]?[.,]"
)
_QUOTED_TITLE = re.compile(r"[“\"`][^”\"`\s]+\s[^”\"`]*\s[^”\"`]*(?:[”\"`]|$)")
_WHOLLY_QUOTED = re.compile(r"`?[“\"`‘][^”\"`’]+[”\"`’][.,]?`?")
"""A sentence that is only a quotation: a cited title standing alone."""
"""Three words or more in quotes: a title ("toll-access" in quotes is a term)."""
_VENUE = re.compile(
    r"\b(?:Proc(?:eedings)?\b|Journal|Conference|Transactions|Vol\.|vol\.|pp\.|preprint|"
    r"NeurIPS|NIPS|ICML|ICLR|ACL|EMNLP|NAACL|CVPR|ICCV|AAAI|IJCAI|KDD|SIGIR)|\d+\(\d+(?:[-–]\d+)?\)"
)
_REFERENCE_SIGNALS = (
    _URL,
    _CITATION_MARKER,
    _LEADING_AUTHOR,
    _PUBLICATION_YEAR,
    _QUOTED_TITLE,
    _VENUE,
)
_SENTENCE_FINAL = re.compile(r"[.!?。！？；…][\"”’)\]]*(?:\s*\[\d+(?:[,–-]\s*\d+)*\])?$")
CODE_TOKEN = re.compile(r"[_=\\{}<>|`]|\(\)|\w\(|::|->|^>>>|\[\d+(?:;\d+)*m|^\W+$")
"""A token of code, not prose: identifiers, operators, calls, terminal colour codes."""
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]")
MIN_SENTENCE_WORDS = 3
"""Fewer words than this make a fragment ("Weng, Lilian.", "NeurIPS 2022."), not a sentence."""
MAX_REFERENCE_LENGTH = 400
"""A longer line is a paragraph, judged sentence by sentence, not a reference entry."""


def is_reference_entry(line: str) -> bool:
    """A bibliography line: an arXiv id, DOI or ISBN, a bare URL, or two signs of a reference
    (a leading "[n]", leading author names, a publication year, a quoted title, a venue or
    pages, a URL) — "Wei et al. (2022) showed ..." has one and is prose.

    >>> is_reference_entry("Smith, A., & Lee, B. (2020). Deep nets. Journal of Things, 3(2).")
    True
    >>> is_reference_entry("In 2004, O. Ledoit and M. Wolf propose a formula [1].")
    False
    """
    stripped = line.strip(" -*•")
    if _IDENTIFIER.search(stripped) or _URL.fullmatch(stripped.strip("<>`_()[]. ")):
        return True
    return sum(bool(signal.search(stripped)) for signal in _REFERENCE_SIGNALS) >= 2


def is_quotable(sentence: str) -> bool:
    """A whole sentence of prose: not a reference entry, at least :data:`MIN_SENTENCE_WORDS`
    words, starting as a sentence starts (not lowercase, not a closing bracket) and ending with
    its full stop (a citation may follow); not mostly capitalised words (a name list, a title)
    nor code (identifiers, operators, calls, terminal colour codes).

    >>> [is_quotable(text) for text in ("Heat pumps move heat [2].", "and fed to a hasher.",
    ...  "Wei, J., Le, Q., and Zhou, D.", "Call x = f(y) now.", "Heat pumps move heat")]
    [True, False, False, False, False]
    """
    words = sentence.split()
    if is_reference_entry(sentence) or _WHOLLY_QUOTED.fullmatch(sentence):
        return False
    if not _SENTENCE_FINAL.search(sentence):
        return False
    if _CJK.search(sentence) and len(words) < MIN_SENTENCE_WORDS:  # no spaces between words
        return not _CANNOT_START.match(sentence)
    if len(words) < MIN_SENTENCE_WORDS or _CANNOT_START.match(sentence):
        return False
    alphabetic = [word for word in words if word[:1].isalpha()]
    lowercase = sum(word[0].islower() for word in alphabetic)
    code = sum(bool(CODE_TOKEN.search(word)) for word in words)
    return 4 * lowercase >= len(alphabetic) and 5 * code <= len(words)


def _is_markup(line: str) -> bool:
    """Table rows, rules, code fences, tags, images and lines of code (half their tokens code,
    or opening with a call such as ``covariance.OAS(*[, ...])``): text to skip, not sentences."""
    tokens = line.split()
    code = sum(bool(CODE_TOKEN.search(token)) for token in tokens)
    return (
        line.count("|") >= 2
        or bool(_MARKUP_LINE.match(line) or _CALL_LINE.match(line))
        or 2 * code >= len(tokens) > 0
    )


def _is_title(line: str, following: str) -> bool:
    """A short unpunctuated line followed by a capitalised or numbered one: a title."""
    return (
        len(line.split()) <= _TITLE_WORDS
        and not line.endswith(_SENTENCE_PUNCTUATION)
        and (following[:1].isupper() or following[:1].isdigit())
    )


def passage_sentences(text: str, title: str = "") -> list[str]:
    r"""The sentences of a passage worth quoting, in order.

    Headings (Markdown, or Sphinx's ending with "¶"), titles and unpunctuated list items
    (``title``, or a short unpunctuated line opening a sentence), table rows, rules, code
    (fenced, or lines of code), tags, reference-list entries (:func:`is_reference_entry`, lines
    up to :data:`MAX_REFERENCE_LENGTH`) and lines without a letter are left out and end the
    paragraph, as does a line ending with ":", so none runs into the sentence after it; list
    markers are dropped. Then :func:`split_sentences`, keeping the :func:`is_quotable` ones.

    >>> passage_sentences("# Bees\n\n| kg | 20 |\n|---|---|\nA hive makes 20 kg a year.\n- Wax too.")
    ['A hive makes 20 kg a year.']
    >>> passage_sentences("Honey Bees\nA hive makes honey.", title="Honey Bees")
    ['A hive makes honey.']
    """
    text = text.strip()
    if title and text.casefold().startswith(title.strip().casefold()):
        text = text[len(title.strip()) :]
    lines = [line.strip() for line in text.splitlines()]
    paragraphs: list[list[str]] = [[]]
    in_code = in_item = False
    for position, line in enumerate(lines):
        if _LIST_MARKER.match(line) and paragraphs[-1]:  # a list item starts a paragraph
            paragraphs.append([])
        in_item = bool(_LIST_MARKER.match(line)) or (in_item and bool(paragraphs[-1]))
        if line.startswith(_CODE_FENCES):
            in_code = not in_code
        following = lines[position + 1] if position + 1 < len(lines) else ""
        skipped = in_code or line.startswith(_CODE_FENCES) or _is_markup(line)
        after_sentence = not paragraphs[-1] or bool(_SENTENCE_FINAL.search(paragraphs[-1][-1]))
        opens_as_title = after_sentence and bool(following) and _is_title(line, following)
        if line.endswith(":") and not skipped:  # introduces a list or a block: ends here
            paragraphs[-1].append(_LIST_MARKER.sub("", line))
            paragraphs.append([])
        elif len(line) <= MAX_REFERENCE_LENGTH and is_reference_entry(line):
            if in_item:  # the item's first lines belong to the same reference
                paragraphs[-1].clear()
            paragraphs.append([])
        elif (
            skipped
            or opens_as_title
            or _HEADING_LINE.match(line)
            or not any(character.isalpha() for character in line)
        ):
            paragraphs.append([])
        else:
            paragraphs[-1].append(_LIST_MARKER.sub("", line))
    return [
        sentence
        for paragraph in paragraphs
        for sentence in split_sentences("\n".join(paragraph))
        if is_quotable(sentence)
    ]


def _sentence_scores(
    units: Sequence[tuple[int, str, list[str]]], query_weights: Mapping[str, float]
) -> list[float]:
    """BM25 of each sentence (its terms) against the weighted query terms, the sentences of
    the passages being the collection: rare terms count most, long sentences are damped."""
    frequency = Counter(term for _, _, terms in units for term in set(terms))
    average_length = sum(len(terms) for _, _, terms in units) / len(units) or 1.0
    scores = []
    for _, _, terms in units:
        counts = Counter(terms)
        damping = _K1 * (1 - _B + _B * len(terms) / average_length)
        scores.append(
            sum(
                weight
                * inverse_document_frequency(frequency[term], len(units))
                * counts[term]
                * (_K1 + 1)
                / (counts[term] + damping)
                for term, weight in query_weights.items()
                if term in counts
            )
        )
    return scores


def best_sentences(
    question_terms: set[str],
    passages: Sequence[str],
    terms_of: Terms,
    *,
    count: int,
    per_passage: int = 1,
    related_terms: Collection[str] = (),
) -> list[tuple[int, str]]:
    """The ``count`` best-supported sentences of ``passages``, best first, as (passage, text).

    Candidates are the :func:`passage_sentences` of every passage (numbered from 0 in the order
    given) that share a term with the question. Each is scored by BM25 against the question's
    terms (weight 1) and ``related_terms`` such as the generated queries' (weight
    :data:`RELATED_TERM_WEIGHT`), with document frequencies counted over all the candidate
    sentences, so a term every passage repeats counts little and a rare one much; the score
    is discounted by the passage's position (:data:`PASSAGE_DISCOUNT`), the fused order being
    evidence too. At most ``per_passage`` sentences come from one passage; a sentence equal to
    one already chosen is skipped; ties go to the earlier passage, then the earlier sentence.

    >>> terms = lambda text: text.casefold().replace(".", "").split()
    >>> best_sentences({"hive", "honey"}, ["Bees fly. A hive makes honey.", "Honey is sweet."],
    ...                terms, count=2)
    [(0, 'A hive makes honey.'), (1, 'Honey is sweet.')]
    """
    query_weights = {term: RELATED_TERM_WEIGHT for term in related_terms}
    query_weights.update({term: 1.0 for term in question_terms})
    units = [
        (passage_index, sentence, terms_of(sentence))
        for passage_index, passage in enumerate(passages)
        for sentence in passage_sentences(passage)
    ]
    units = [unit for unit in units if question_terms.intersection(unit[2])]
    if not units:
        return []
    scores = _sentence_scores(units, query_weights)
    ranked = sorted(
        range(len(units)),
        key=lambda position: (
            -scores[position] / (1 + PASSAGE_DISCOUNT * units[position][0]),
            position,
        ),
    )
    chosen: list[tuple[int, str]] = []
    taken: Counter[int] = Counter()
    quoted: set[str] = set()
    for position in ranked:
        passage_index, sentence, _ = units[position]
        if len(chosen) == count:
            break
        if taken[passage_index] < per_passage and dedupe_key(sentence) not in quoted:
            taken[passage_index] += 1
            quoted.add(dedupe_key(sentence))
            chosen.append((passage_index, sentence))
    return chosen


def _body(document: Document) -> str:
    """The document's text without the title it starts with (BEIR passages repeat theirs)."""
    title = str(document.metadata.get("title") or "").strip()
    text = document.page_content.lstrip()
    return text[len(title) :] if title and text.startswith(title) else text


def extractive_answer(
    question: str,
    documents: Sequence[Document],
    terms_of: Terms,
    *,
    sentences: int = 3,
    per_passage: int = 1,
    queries: Sequence[str] = (),
) -> list[str]:
    """The lines of an offline answer: the label and note, then quoted sentences with ``[i]``.

    The sentences are :func:`best_sentences` of the documents (without their ``title``
    metadata), weighted by the question's terms and, at half weight, by the other ``queries``'
    terms. ``[i]`` is the document's 1-based position in ``documents``, the numbering of
    :func:`context.format_context`, so citations point at the passages as the sources list them.

    >>> lines = extractive_answer("heat pumps", [Document("Heat pumps move heat.")], str.split)
    >>> lines[0].startswith(OFFLINE_LABEL), lines[1:]
    (True, ['- Heat pumps move heat. [1]'])
    """
    if not documents:
        return [f"{OFFLINE_LABEL} No passages were retrieved, so there is nothing to quote."]
    question_terms = set(terms_of(question))
    related = {term for query in queries for term in terms_of(query)} - question_terms
    picked = best_sentences(
        question_terms,
        [_body(document) for document in documents],
        terms_of,
        count=sentences,
        per_passage=per_passage,
        related_terms=related,
    )
    if not picked:
        return [
            f"{OFFLINE_LABEL} None of the {len(documents)} retrieved passages has a whole "
            "sentence that shares a term with the question."
        ]
    return [f"{OFFLINE_LABEL} {OFFLINE_NOTE}"] + [
        f"- {sentence} [{passage_index + 1}]" for passage_index, sentence in picked
    ]


class ExtractiveAnswer(RunnableSerializable[Mapping[str, Any], str]):
    """The offline ``answer`` step: quote the fused passages' sentences closest to the question.

    Input: the chains' state, a mapping with ``question`` and ``documents`` (the fused passages,
    numbered from 1 as :func:`context.format_context` numbers them) and, for step-back, the
    ``step_back_documents`` numbered on after them. Output: :func:`extractive_answer`'s lines,
    starting with :data:`OFFLINE_LABEL`; ``stream`` yields them line by line.
    Sentences are compared through ``terms_of`` (default: the BM25 tokenizer with stemming).

    >>> print(ExtractiveAnswer().invoke(  # doctest: +ELLIPSIS
    ...     {"question": "heat", "documents": [Document("Heat rises in air.")]}
    ... ))
    [offline extractive answer] No chat model ...
    - Heat rises in air. [1]
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str | None = "answer"
    sentences: int = 3
    """Sentences quoted at most."""
    per_passage: int = 1
    """Sentences quoted at most from one passage."""
    terms_of: Terms = tokenize

    def model_post_init(self, context: Any) -> None:
        validate_count("sentences", self.sentences)
        validate_count("per_passage", self.per_passage)

    def lines(self, state: Mapping[str, Any]) -> list[str]:
        """The answer's lines for one state (no callbacks)."""
        if not isinstance(state, Mapping) or "documents" not in state:
            raise TypeError(
                "ExtractiveAnswer input must be a mapping with 'question' and 'documents', "
                f"got {type(state).__name__}"
            )
        documents = [*state["documents"], *state.get("step_back_documents", [])]
        return extractive_answer(
            question_of(state),
            documents,
            self.terms_of,
            sentences=self.sentences,
            per_passage=self.per_passage,
            queries=state.get("queries", ()),
        )

    def _stream_lines(self, inputs: Iterator[Mapping[str, Any]]) -> Iterator[str]:
        for state in inputs:
            for number, line in enumerate(self.lines(state)):
                yield line if number == 0 else "\n" + line

    def stream(
        self, input: Mapping[str, Any], config: RunnableConfig | None = None, **kwargs: Any
    ) -> Iterator[str]:
        yield from self._transform_stream_with_config(iter([input]), self._stream_lines, config)

    def invoke(
        self, input: Mapping[str, Any], config: RunnableConfig | None = None, **kwargs: Any
    ) -> str:
        return "".join(self.stream(input, config))


__all__ = [
    "OFFLINE_LABEL",
    "OFFLINE_NOTE",
    "PASSAGE_DISCOUNT",
    "RELATED_TERM_WEIGHT",
    "CODE_TOKEN",
    "ExtractiveAnswer",
    "Terms",
    "best_sentences",
    "extractive_answer",
    "inverse_document_frequency",
    "is_quotable",
    "is_reference_entry",
    "passage_sentences",
    "split_sentences",
]
