"""The strategies without a chat model: query steps, pure functions of the question and the
documents any retriever returned for it, and extractive answers quoting the passages' prose
sentences best matching the question, cited ``[n]``."""

from __future__ import annotations

import math
import re
import warnings
from collections import Counter
from collections.abc import Collection, Iterable, Sequence

import sentencex
from langchain_core.documents import Document

from rag_fusion_chain.context import passage_numbers
from rag_fusion_chain.retrievers.bm25 import tokenize
from rag_fusion_chain.validation import MAX_QUERIES, counted, question_of, validate_count

OFFLINE_LABEL = "[offline extractive answer]"
"""How every offline answer starts, so nobody mistakes it for a generated one."""
OFFLINE_NOTE = (
    "No chat model is configured: these are the sentences of the retrieved passages that best "
    "match the question's distinctive terms, quoted as they are, not a generated answer."
)
SINGLE_CLAUSE_NOTE = (
    "No comparison or second clause was recognised in the question, so it was not split into "
    "sub-questions; these are its passages' best sentences, quoted as they are."
)
SENTENCES = 3
"""Sentences quoted per answer (per question group), at most one per passage."""
RELATED_TERM_WEIGHT = 0.5
"""Weight of a searched query's term (the question's weigh 1) when choosing sentences."""
PASSAGE_DISCOUNT = 0.3
"""A sentence's score is divided by ``1 + PASSAGE_DISCOUNT * position`` of its passage."""
MIN_SENTENCE_WORDS = 3
"""Fewer words make a fragment ("Weng, Lilian.", "NeurIPS 2022."), not a sentence."""
MAX_REFERENCE_LENGTH = 400
"""A longer line is a paragraph, judged sentence by sentence, not a reference entry."""
_TITLE_WORDS = 12
"""An unpunctuated line this short before a capitalised one is a title or a list item."""
_WRAP_WIDTH = 110
"""Wrapped text (PDF, plain text) has shorter lines: a longer unpunctuated line is a block."""

_NEVER_FINAL = re.compile(
    r"\b(?:approx|cf|ch|dr|eq|eqs|fig|figs|mr|mrs|ms|no|nos|pp|prof|ref|refs|sec|vol|vs)\.$",
    re.IGNORECASE,
)
_GLUED_END = re.compile(r"[A-Za-z0-9_]\.\Z")
_CANNOT_START = re.compile(r"[a-z_)\]},;:]")
_SENTENCE_PUNCTUATION = (".", "!", "?", ":", ";", ",", "。", "！", "？", "；", "…", '"')
_SENTENCE_FINAL = re.compile(r"[.!?。！？；…][\"”’)\]]*(?:\s*\[\d+(?:[,–-]\s*\d+)*\])?$")
_NOT_PROSE_LINE = re.compile(
    r"#{1,6}\s|.*¶$|```|~~~|<[^>]*>\s*$|!\[|\[\^?\w*\]:|[-=*_~]{3,}\s*$|[\w.]+\("
)
"""Headings, rules, code fences, tags, images, footnote definitions, calls: never prose."""
_LIST_MARKER = re.compile(r"^(?:[-*+•]|\d{1,3}[.)])\s+")
CODE_TOKEN = re.compile(r"[_=\\{}<>|`]|\(\)|\w\(|::|->|^>>>|\[\d+(?:;\d+)*m|^\W+$")
"""A token of code, not prose: identifiers, operators, calls, terminal colour codes."""
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]")

# Signs of a reference-list entry: two of them (or one identifier) make a line a reference.
_IDENTIFIER = re.compile(
    r"arXiv:\s*\d{4}\.\d{4,5}|\bdoi:|doi\.org/|\b10\.\d{4,9}/\S|\bISBN\b", re.I
)
_URL = re.compile(r"https?://\S+|www\.\S+")
_REFERENCE_SIGNALS = (
    _URL,
    re.compile(r"^(?:[-*•]\s*)?\[\d+\]"),  # a leading [n]
    re.compile(  # leading author names
        r"^(?:[-*•]\s*)?(?:\[\d+\]\s*)?(?:\d+\.\s+)?"
        r"(?:[A-Z][\w'’-]+,\s+(?:[A-Z]\.\s?)+|(?:[A-Z]\.\s?)+[A-Z][\w'’-]+|[A-Z][\w'’-]+\s+et\s+al\."
        r"|[A-Z][\w'’-]+(?:,\s+(?:and\s+)?[A-Z][\w'’-]+){2,})"
    ),
    re.compile(  # a publication year
        r"\((?:[A-Z][a-z]{2,8}\.?\s+)?(?:19|20)\d{2}[a-z]?\)(?:[.,:]\s*\S|\s*[`\"“])"
        r"|,\s*(?:19|20)\d{2}[a-z]?[.,]"
    ),
    re.compile(r"[“\"`][^”\"`\s]+\s[^”\"`]*\s[^”\"`]*(?:[”\"`]|$)"),  # a quoted title
    re.compile(  # a venue or pages
        r"\b(?:Proc(?:eedings)?\b|Journal|Conference|Transactions|Vol\.|vol\.|pp\.|preprint|"
        r"NeurIPS|NIPS|ICML|ICLR|ACL|EMNLP|NAACL|CVPR|ICCV|AAAI|IJCAI|KDD|SIGIR)"
        r"|\d+\(\d+(?:[-–]\d+)?\)"
    ),
)
_WHOLLY_QUOTED = re.compile(r"`?[“\"`‘][^”\"`’]+[”\"`’][.,]?`?")


FEEDBACK_DOCUMENTS = 5
"""The first distinct documents taken as relevant (pass them best first)."""
TERMS_PER_QUERY = 3
"""Words a feedback query adds to the question, about."""
REWRITE_TERMS = 2
"""Document phrases a keyword rewrite adds to the question's own words, at most."""
_PHRASE_WORDS = 3

_WORD = re.compile(r"[^\W_]+")
_WRAPPING = "\"'“”‘’()[]{}<>.,;:!?…"
_QUESTION_WORD = (
    r"(?:what|how|why|when|where|which|who|whom|whose|is|are|was|were|do|does|did|can|could|"
    r"should|would|will|has|have)\b"
)
_CLAUSE_BREAK = re.compile(
    rf"\s*[;?？；]\s*|,?\s+\b(?:and|but|or)\s+(?={_QUESTION_WORD})", re.IGNORECASE
)
"""Where clauses meet: ``;``, ``?``, or "and"/"but"/"or" before a question word."""
_COMPARISON = re.compile(
    r"\b(?:the\s+)?(?:differences?|comparison)\s+between\s+(?P<first>.+?)\s+and\s+"
    r"(?P<second>.+?)\s*[?.]*$"
    r"|^(?:(?:how|why|which)\s+)?(?:(?:does|do|did|is|are)\s+)?(?P<left>.+?)\s+(?:versus|vs\.?|"
    r"compared?s?\s+(?:to|with)|better\s+than|worse\s+than)\s+(?P<right>.+?)\s*[?.]*$",
    re.IGNORECASE,
)


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text``, whitespace collapsed: sentencex per paragraph, a piece that starts
    lowercase or follows an abbreviation, an open parenthesis or a dotted name joined back."""
    pieces: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text):  # split at blank lines
        start = len(pieces)
        for piece in sentencex.segment("en", paragraph):
            if not piece.strip():
                continue
            if len(pieces) > start and (
                _CANNOT_START.match(piece.lstrip())
                or _NEVER_FINAL.search(pieces[-1].strip())
                or pieces[-1].count("(") > pieces[-1].count(")")
                or (_GLUED_END.search(pieces[-1]) and piece[:1].isalnum())
            ):
                pieces[-1] += piece
            else:
                pieces.append(piece)
    return [" ".join(piece.split()) for piece in pieces]


def is_reference_entry(line: str) -> bool:
    """A bibliography line: an arXiv id, DOI, ISBN or bare URL, or two signs of a reference."""
    stripped = line.strip(" -*•")
    if _IDENTIFIER.search(stripped) or _URL.fullmatch(stripped.strip("<>`_()[]. ")):
        return True
    return sum(bool(signal.search(stripped)) for signal in _REFERENCE_SIGNALS) >= 2


def is_quotable(sentence: str) -> bool:
    """A whole sentence of prose: not a reference, a sentence's start and end, enough words, not
    mostly capitalised words (names, titles) nor code."""
    words = sentence.split()
    if is_reference_entry(sentence) or _WHOLLY_QUOTED.fullmatch(sentence):
        return False
    if not _SENTENCE_FINAL.search(sentence) or _CANNOT_START.match(sentence):
        return False
    if _CJK.search(sentence):  # no spaces between words
        return True
    alphabetic = [word for word in words if word[:1].isalpha()]
    lowercase = sum(word[0].islower() for word in alphabetic)
    code = sum(bool(CODE_TOKEN.search(word)) for word in words)
    long_enough = len(words) >= MIN_SENTENCE_WORDS
    return long_enough and 4 * lowercase >= len(alphabetic) and 5 * code <= len(words)


def _is_skipped(line: str) -> bool:
    """Table rows, rules, tags, headings, lines of code or without a letter: not prose."""
    tokens = line.split()
    code = sum(bool(CODE_TOKEN.search(token)) for token in tokens)
    return (
        line.count("|") >= 2
        or bool(_NOT_PROSE_LINE.match(line))
        or 2 * code >= len(tokens) > 0
        or not any(character.isalpha() for character in line)
    )


def _is_title(line: str, following: str) -> bool:
    """A title or list item: unpunctuated, all capitalised words or short before a capitalised or
    numbered line."""
    if line.endswith(_SENTENCE_PUNCTUATION):
        return False
    words = line.split()
    short = len(words) <= _TITLE_WORDS and (following[:1].isupper() or following[:1].isdigit())
    return short or all(word[:1].isupper() or not word[:1].isalpha() for word in words)


def passage_sentences(text: str) -> list[str]:
    """The :func:`is_quotable` sentences of a passage, in order; headings, titles, list items,
    tables, code, tags and references end a paragraph and are left out."""
    lines = [line.strip() for line in text.strip().splitlines()]
    paragraphs: list[list[str]] = [[]]
    in_code = in_item = False
    for line, following in zip(lines, [*lines, ""][1:], strict=True):
        if _LIST_MARKER.match(line) and paragraphs[-1]:  # a list item starts a paragraph
            paragraphs.append([])
        in_item = bool(_LIST_MARKER.match(line)) or (in_item and bool(paragraphs[-1]))
        fence = line.startswith(("```", "~~~"))
        in_code = in_code != fence
        after_sentence = not paragraphs[-1] or bool(_SENTENCE_FINAL.search(paragraphs[-1][-1]))
        if len(line) <= MAX_REFERENCE_LENGTH and is_reference_entry(line):
            if in_item:  # the item's first lines belong to the same reference
                paragraphs[-1].clear()
            paragraphs.append([])
        elif (
            in_code or fence or _is_skipped(line) or (after_sentence and _is_title(line, following))
        ):
            paragraphs.append([])
        else:
            paragraphs[-1].append(_LIST_MARKER.sub("", line))
            unwrapped = len(line) > _WRAP_WIDTH and not line.endswith(_SENTENCE_PUNCTUATION)
            if line.endswith(":") or unwrapped:  # it introduces a list, or is a block
                paragraphs.append([])
    return [
        sentence
        for paragraph in paragraphs
        for sentence in split_sentences("\n".join(paragraph))
        if is_quotable(sentence)
    ]


def best_sentences(
    question: str, passages: Sequence[str], *, count: int = SENTENCES, related: Iterable[str] = ()
) -> list[tuple[int, str]]:
    """The ``count`` best (passage position, sentence) sharing a term with ``question``: BM25 over
    the sentences (``related`` terms weigh less), discounted by position, one per passage."""
    import bm25s

    question_terms = set(tokenize(question))
    weights = {term: RELATED_TERM_WEIGHT for text in related for term in tokenize(text)}
    weights.update(dict.fromkeys(question_terms, 1.0))
    units = [
        (position, sentence, sentence_terms)
        for position, passage in enumerate(passages)
        for sentence in passage_sentences(passage)
        if question_terms.intersection(sentence_terms := tokenize(sentence))
    ]
    if not units:
        return []
    bm25 = bm25s.BM25(k1=1.2, b=0.75, dtype="float64")  # Lucene's, the sentences the collection
    bm25.index([terms for _, _, terms in units], show_progress=False)
    scores = [0.0] * len(units)
    for weight in set(weights.values()):  # one BM25 query per weight: the question's, the related
        terms = [term for term, w in weights.items() if w == weight and term in bm25.vocab_dict]
        for unit, score in enumerate(bm25.get_scores(terms) if terms else ()):
            scores[unit] += weight * float(score)
    ranked = sorted(
        range(len(units)),
        key=lambda index: (-scores[index] / (1 + PASSAGE_DISCOUNT * units[index][0]), index),
    )
    chosen: dict[int, str] = {}  # passage position: its sentence
    for index in ranked:
        position, sentence, _ = units[index]
        quoted = {text.casefold() for text in chosen.values()}
        if len(chosen) < count and position not in chosen and sentence.casefold() not in quoted:
            chosen[position] = sentence
    return list(chosen.items())


def _body(document: Document) -> str:
    """The document's text without the title it starts with (BEIR passages repeat theirs)."""
    title = str(document.metadata.get("title") or "").strip()
    text = document.page_content.strip()
    return text[len(title) :] if title and text.casefold().startswith(title.casefold()) else text


def _quotes(
    question: str,
    documents: Sequence[Document],
    numbers: dict[str, int],
    related: Collection[str] = (),
) -> list[str]:
    """Bullet lines of the best sentences of ``documents``, each cited by its number."""
    picked = best_sentences(question, [_body(document) for document in documents], related=related)
    return [f"- {text} [{numbers[documents[position].page_content]}]" for position, text in picked]


def _answer(
    question: str,
    documents: Sequence[Document],
    shown: Sequence[str] = (),
    related: Collection[str] = (),
) -> list[str]:
    """The label, the ``shown`` lines (what was searched), then the quotes or why there are none."""
    quotes = _quotes(question, documents, passage_numbers(documents), related)
    if quotes:
        head = OFFLINE_NOTE
    elif documents:
        head = f"No whole sentence of the {counted(len(documents), 'retrieved passage')} shares a term with the question."
    else:
        head = "No passages were retrieved, so there is nothing to quote."
    return [f"{OFFLINE_LABEL} {head}", *shown, *quotes]


def extractive_answer(
    question: str, documents: Sequence[Document], queries: Sequence[str] = ()
) -> str:
    """The offline answer over the fused ``documents``, cited ``[i]`` as :func:`format_context`
    numbers them; the ``queries`` searched weigh half as much as the question's terms."""
    return "\n".join(_answer(question, documents, related=queries))


def hyde_answer(question: str, passage: str, documents: Sequence[Document]) -> str:
    """The offline HyDE answer: the hypothetical passage that was searched, then the quotes."""
    return "\n".join(_answer(question, documents, [f"Hypothetical passage searched: {passage}"]))


def rewrite_answer(question: str, rewritten: str, documents: Sequence[Document]) -> str:
    """The offline rewrite answer: the rewritten query that was searched, then the quotes."""
    shown = [f"Rewritten query searched: {rewritten}"]
    return "\n".join(_answer(question, documents, shown, [rewritten]))


def step_back_answer(
    question: str,
    documents: Sequence[Document],
    broader: str,
    broader_documents: Sequence[Document],
) -> str:
    """The question's passages quoted, then the broader question's (numbered on from them)."""
    lines = _answer(question, documents)
    if not broader or broader.casefold() == question.casefold():
        return "\n".join(lines)
    numbers = passage_numbers([*documents, *broader_documents])
    quotes = _quotes(f"{broader} {question}", broader_documents, numbers)
    lines += [f"Broader question searched: {broader}"]
    return "\n".join([*lines, *(quotes or ["- (nothing to quote beyond the passages above)"])])


def decomposition_answer(question: str, answered: Sequence[tuple[str, Sequence[Document]]]) -> str:
    """Each sub-question's best sentences, then the question's, passages numbered in that order; a
    question that is its only sub-question is quoted once, under :data:`SINGLE_CLAUSE_NOTE`."""
    key = question.casefold().strip()
    splits = [(asked, found) for asked, found in answered if asked.casefold().strip() != key]
    own = [
        document for asked, hits in answered if asked.casefold().strip() == key for document in hits
    ]
    groups = [*splits, (question, own)]
    numbers = passage_numbers(document for _, found in groups for document in found)
    if not numbers:
        return _answer(question, [])[0]
    intro = (
        "Sub-questions answered in turn from their own passages." if splits else SINGLE_CLAUSE_NOTE
    )
    lines = [f"{OFFLINE_LABEL} {intro}"]
    for position, (asked, found) in enumerate(groups, 1):
        label = "Question" if position == len(groups) else f"Sub-question {position}"
        quotes = _quotes(asked, found, numbers)
        lines += [f"{label}: {asked}", *(quotes or ["- (no sentence shares its terms)"])]
    return "\n".join(lines)


def _checked(question: str, documents: Sequence[Document]) -> tuple[str, list[Document]]:
    """The stripped question and the distinct documents (by text), in order; bad input raises."""
    question = question_of(question)
    if (
        not isinstance(documents, Sequence)
        or isinstance(documents, str)
        or not all(isinstance(document, Document) for document in documents)
    ):
        raise TypeError("documents must be a sequence of langchain Document objects")
    distinct: dict[str, Document] = {}
    for document in documents:
        distinct.setdefault(document.page_content, document)
    return question, list(distinct.values())


def _document_frequency(documents: Sequence[Document]) -> Counter[str]:
    """How many of ``documents`` hold each term."""
    return Counter(term for document in documents for term in set(tokenize(document.page_content)))


def _keyword_phrases(texts: Sequence[str], weights: dict[str, float]) -> list[str]:
    """Phrases of up to :data:`_PHRASE_WORDS` adjacent weighted terms, best first (first seen
    first among equals), sharing no term; a phrase of several words must occur twice. Punctuation
    ends a phrase, and so does a token that is not one plain word (an identifier, a call, a number,
    a colour code); words show in lower case unless acronyms or gene-like names."""
    candidates: dict[str, tuple[float, str, list[str]]] = {}
    occurrences: Counter[str] = Counter()
    for text in texts:
        run: list[tuple[str, str]] = []  # the phrase's words as shown, with their terms
        for token in text.split():
            word = token.strip(_WRAPPING)
            plain = _WORD.fullmatch(word) and not word.isdigit() and not CODE_TOKEN.search(token)
            word_terms = tokenize(word) if plain else []
            term = word_terms[0] if len(word_terms) == 1 else None
            if term not in weights or token[:1] in _WRAPPING:
                run = []
            if term in weights:
                shown = word if any(character.isupper() for character in word[1:]) else word.lower()
                run.append((shown, term))
                for start in range(max(0, len(run) - _PHRASE_WORDS), len(run)):
                    window = run[start:]
                    terms = list(dict.fromkeys(term for _, term in window))
                    phrase = " ".join(shown for shown, _ in window)
                    key = phrase.casefold()
                    occurrences[key] += 1
                    if len(terms) == len(window) and key not in candidates:
                        candidates[key] = (sum(weights[term] for term in terms), phrase, terms)
            if token[-1:] in _WRAPPING:
                run = []
    chosen: list[str] = []
    used: set[str] = set()
    for _, phrase, terms in sorted(candidates.values(), key=lambda item: -item[0]):
        if (len(terms) == 1 or occurrences[phrase.casefold()] >= 2) and used.isdisjoint(terms):
            chosen.append(phrase)
            used.update(terms)
    return chosen


def _feedback_phrases(question: str, documents: Sequence[Document], count: int) -> list[str]:
    """Key phrases of the first :data:`FEEDBACK_DOCUMENTS` documents' prose, best first, made of
    their ``count`` strongest terms the question lacks: RM1 (Σ_d tf/|d|/(1 + rank)) times 1 +
    BM25's idf over all ``documents`` (a term all of them share counts less)."""
    texts = [
        " ".join(passage_sentences(document.page_content))
        for document in documents[:FEEDBACK_DOCUMENTS]
    ]
    question_terms = set(tokenize(question))
    weights: dict[str, float] = {}
    for rank, text in enumerate(texts):
        terms = [
            term
            for term in tokenize(text)
            if term not in question_terms
            and any(character.isalpha() for character in term)
            and (len(term) >= 3 or not term.isascii())
        ]
        for term, times in Counter(terms).items():
            weights[term] = weights.get(term, 0.0) + times / len(terms) / (1 + rank)
    frequency, total = _document_frequency(documents), len(documents)
    for term in weights:
        weights[term] *= 1 + math.log(1 + (total - frequency[term] + 0.5) / (frequency[term] + 0.5))
    strongest = sorted(weights, key=lambda term: (-weights[term], term))[:count]
    return _keyword_phrases(texts, {term: weights[term] for term in strongest})


def feedback_queries(question: str, documents: Sequence[Document], n: int) -> list[str]:
    """``n`` pseudo-relevance-feedback queries: the question, then about :data:`TERMS_PER_QUERY`
    words of its documents' key phrases (no phrase in two queries); else ``[question]``, warned."""
    validate_count("n", n, MAX_QUERIES)
    question, documents = _checked(question, documents)
    groups: list[list[str]] = []
    words = TERMS_PER_QUERY
    for phrase in _feedback_phrases(question, documents, 2 * n * TERMS_PER_QUERY):
        if words >= TERMS_PER_QUERY:
            if len(groups) == n:
                break
            groups.append([])
            words = 0
        groups[-1].append(phrase)
        words += len(phrase.split())
    if not groups:
        warnings.warn(
            "pseudo-relevance feedback found no expansion terms in the documents; "
            "using the question alone",
            stacklevel=2,
        )
        return [question]
    return [f"{question} {', '.join(group)}" for group in groups]


def _as_question(clause: str) -> str:
    """A clause as a question: capitalised, ending with "?"."""
    clause = clause.strip(" ,.")
    return f"{clause[:1].upper()}{clause[1:]}{'' if clause.endswith('?') else '?'}"


def sub_questions(question: str, documents: Sequence[Document], n: int) -> list[str]:
    """At most ``n`` parts of the question alone: a comparison's two sides ("What is A?"), else
    its clauses of two terms or more (:data:`_CLAUSE_BREAK`); one clause gives ``[question]``."""
    validate_count("n", n, MAX_QUERIES)
    question, _ = _checked(question, documents)
    comparison = _COMPARISON.search(question)
    if comparison:
        sides = [side for side in comparison.groups() if side]
        if len(sides) == 2 and all(tokenize(side) for side in sides):
            return [_as_question(f"What is {side}") for side in sides][:n]
    clauses = [part for part in _CLAUSE_BREAK.split(question) if part.strip(" ,.")]
    kept = [clause for clause in clauses if len(tokenize(clause)) >= 2]
    return [_as_question(clause) for clause in kept][:n] if len(kept) > 1 else [question]


def _content_words(question: str) -> list[str]:
    """The question's words that are index terms (no stopword), each term once, in order."""
    words: dict[str, str] = {}
    for word in _WORD.findall(question):
        terms = tokenize(word)
        if terms:
            words.setdefault(terms[0], word)
    return list(words.values())


def broader_question(question: str, documents: Sequence[Document]) -> str:
    """The step-back question: the half of its words most documents hold, then the documents'
    leading key phrases. With no documents: the question, with a warning."""
    question, documents = _checked(question, documents)
    if not documents:
        warnings.warn("no documents to step back from; using the question", stacklevel=2)
        return question
    frequency = _document_frequency(documents)
    words = _content_words(question)
    ranked = sorted(words, key=lambda word: -frequency[tokenize(word)[0]])
    kept = set(ranked[: max(1, round(len(words) / 2))])
    added = _feedback_phrases(question, documents, TERMS_PER_QUERY)
    return " ".join([word for word in words if word in kept] + added) or question


def hypothetical_passage(question: str, documents: Sequence[Document]) -> str:
    """HyDE without a model: the three documents' sentences closest to the question, as one
    passage to search. With none sharing a term: the question, with a warning."""
    question, documents = _checked(question, documents)
    picked = best_sentences(question, [document.page_content for document in documents])
    if not picked:
        warnings.warn(
            "no document sentence shares a term with the question; searching with the question",
            stacklevel=2,
        )
        return question
    return " ".join(sentence for _, sentence in picked)


def keyword_rewrite(question: str, documents: Sequence[Document]) -> str:
    """Rewrite-Retrieve-Read without a model: the question's content words the documents use (all
    if they use none), then at most :data:`REWRITE_TERMS` of their key phrases."""
    question, documents = _checked(question, documents)
    words = _content_words(question)
    if not words:
        return question
    # words the documents never use ("please", "actually") are conversation, not search terms
    vocabulary = {term for document in documents for term in tokenize(document.page_content)}
    used = [word for word in words if tokenize(word)[0] in vocabulary] or words
    return " ".join(used + _feedback_phrases(question, documents, TERMS_PER_QUERY)[:REWRITE_TERMS])
