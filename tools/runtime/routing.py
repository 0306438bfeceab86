"""Tool routing: the few tools, of many, worth offering the model for a request.

Three steps, each optional after the first:

1. lexical: BM25 over each tool's card (its name split into words, description, tags and
   the text of its examples); written here, a few hundred lines of pure Python;
2. semantic: cosine similarity between the request's embedding and each card's (the
   better of its whole card's and its description's), the vectors computed by an
   embedder the caller passes in (this module embeds nothing);
3. model selection: a small model picks from the fused shortlist (`select_with_model`,
   given a `Choose` callable: this module knows no model adapter).

Steps 1 and 2 are fused by a mix of their scores, each scaled to [0, 1] over its
candidates (`FUSION_MIX`, the default: the better on tests/data/tool_routing), or by
reciprocal rank (`FUSION_RRF`); bench/routing.py measures both.

Costs (bench/routing.py has the figures): building the lexical index of 1000 tools takes
tens of milliseconds; a search, about a millisecond of Python plus, with vectors, one
matrix product (1000 x 384 floats) and the request's embedding, which costs the most.
numpy is needed only for vectors (it comes with the local-embeddings extra); without
them the index is lexical.
"""

from __future__ import annotations

import hashlib
import math
import re
from array import array
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from tools.runtime.tool import Tool

FUSION_RRF, FUSION_MIX = "rrf", "mix"
RRF_K = 60  # the usual constant: rank 1 scores 1/61, rank 10 1/70
MIX_SEMANTIC_WEIGHT = 0.6  # FUSION_MIX: the share of the semantic score
CANDIDATES = 50  # how deep each side's ranking goes into the fusion
CENTRE_MIN_CARDS = 50  # fewer: their mean is mostly the cards themselves (SemanticIndex)

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_WORD = re.compile(r"[a-z0-9]+")
_STOPWORD_TEXT = (
    "a an and any are as at be by can could do does for from get give has have i i'm if in "
    "into is it its me my of on or our please so some that the their them then there these "
    "this to up us was we what when where which who will with would you your"
)
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())


def words(text: str) -> list[str]:
    """Lower-case terms of `text`: camelCase, snake_case and kebab-case split, stop words
    and single letters dropped (the "s" of "what's"), plural and -ing/-ed endings stripped
    (the same on both sides of a match)."""
    found = _WORD.findall(_CAMEL.sub(" ", text).lower())
    return [_stem(w) for w in found if len(w) > 1 and w not in _STOPWORDS]


def _stem(word: str) -> str:
    # Deliberately small (no Porter): enough that "invoices"/"invoice", "shipping"/"ship",
    # "archived"/"archive"/"archiving" meet (as "invoic", "ship", "archiv").
    if len(word) <= 3 or word.isdigit():
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("ied") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("sses", "shes", "ches", "xes")):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    elif word.endswith(("ing", "ed")) and len(word) > 5:
        word = word.removesuffix("ing").removesuffix("ed")
        if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "ls":
            word = word[:-1]  # shipp -> ship (but "call", "pass" stay)
    return word[:-1] if len(word) > 4 and word.endswith("e") else word


@dataclass(frozen=True)
class ToolCard:
    """What routing knows of a tool. `text` is what is matched and embedded; `digest`
    names it (an unchanged card keeps its embedding: the key of a vector cache)."""

    name: str
    description: str
    text: str

    @classmethod
    def of(cls, tool: Tool) -> ToolCard:
        return cls.from_parts(tool.name, tool.description, tool.tags, tool.examples)

    @classmethod
    def from_parts(
        cls, name: str, description: str, tags: Iterable[str] = (), examples: Iterable[Any] = ()
    ) -> ToolCard:
        spoken = " ".join(_CAMEL.sub(" ", name).replace("_", " ").replace("-", " ").split())
        parts = [spoken + ".", description.strip()]
        tags = sorted(tags)
        if tags:
            parts.append("Tags: " + ", ".join(tags) + ".")
        example_text = " ".join(_strings(list(examples)))
        if example_text:
            parts.append("Examples: " + example_text[:300])
        return cls(name=name, description=description, text=" ".join(parts))

    @property
    def digest(self) -> str:
        return _digest(self.text)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


class LexicalIndex:
    """Okapi BM25 over the cards' words; the name's words count twice (a tool's name is
    the densest statement of what it does)."""

    def __init__(self, cards: Sequence[ToolCard], *, k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.postings: dict[str, list[tuple[int, int]]] = defaultdict(list)
        self.lengths: list[int] = []
        for index, card in enumerate(cards):
            terms = words(card.text) + words(_CAMEL.sub(" ", card.name))
            self.lengths.append(len(terms))
            for term, count in Counter(terms).items():
                self.postings[term].append((index, count))
        count = max(1, len(cards))
        self.average = sum(self.lengths) / count if self.lengths else 1.0
        self.idf = {
            term: math.log(1 + (count - len(docs) + 0.5) / (len(docs) + 0.5))
            for term, docs in self.postings.items()
        }

    def scores(self, query: str) -> dict[int, float]:
        """Card index -> BM25 score, for cards sharing a term with `query`."""
        scores: dict[int, float] = defaultdict(float)
        k1, b, average, lengths = self.k1, self.b, self.average, self.lengths
        for term in set(words(query)):
            idf = self.idf.get(term)
            if idf is None:
                continue
            for index, tf in self.postings[term]:
                norm = k1 * (1 - b + b * lengths[index] / average)
                scores[index] += idf * tf * (k1 + 1) / (tf + norm)
        return scores


class SemanticIndex:
    """Cosine similarity against the cards' vectors (normalised here, float32), centred:
    with `CENTRE_MIN_CARDS` cards or more, the mean of the cards' unit vectors is taken
    from them and from each request's before the cosine. What every card shares ("a tool
    that does something in some system") says nothing about which one fits; without it
    the similarities spread (recall@10 0.832 -> 0.855 on tests/data/tool_routing, 0.811 ->
    0.840 on the half of its requests not used to choose this: bench/routing.py).

    Given `descriptions` too (each card's description embedded alone), a card scores the
    better of its two similarities: a short description drowned in the card's name, tags
    and examples still meets a request phrased like it (0.855 -> 0.881 with MiniLM, 0.766
    -> 0.779 with the static model; 0.844 -> 0.873 on the half of the requests not used
    to choose this)."""

    def __init__(
        self,
        vectors: Sequence[Sequence[float]],
        descriptions: Sequence[Sequence[float]] | None = None,
    ) -> None:
        import numpy as np  # the local-embeddings extra brings it; lexical routing needs none

        self._np = np
        self.views = [_Centred(np, vectors)]
        if descriptions is not None:
            self.views.append(_Centred(np, descriptions))
        self.centre = self.views[0].centre

    def scores(self, vector: Sequence[float]) -> Any:
        np = self._np
        query = np.asarray(vector, dtype=np.float32)
        query = query / (float(np.linalg.norm(query)) or 1.0)
        scores = [view.scores(query) for view in self.views]
        return scores[0] if len(scores) == 1 else np.maximum(*scores)


class _Centred:
    """One matrix of unit vectors, centred (SemanticIndex), and a unit query's cosines."""

    def __init__(self, np: Any, vectors: Sequence[Sequence[float]]) -> None:
        self._np = np
        matrix = _unit_rows(np, np.asarray(vectors, dtype=np.float32))
        centred = len(matrix) >= CENTRE_MIN_CARDS
        self.centre = matrix.mean(axis=0) if centred else np.zeros(matrix.shape[1], np.float32)
        self.matrix = _unit_rows(np, matrix - self.centre)

    def scores(self, unit_query: Any) -> Any:
        query = unit_query - self.centre
        return self.matrix @ (query / (float(self._np.linalg.norm(query)) or 1.0))


def _unit_rows(np: Any, matrix: Any) -> Any:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0, 1, norms)


@dataclass(frozen=True)
class Hit:
    name: str
    score: float


class ToolIndex:
    """Lexical (and, given vectors in the cards' order, semantic) search over tool cards.
    Immutable once built: share one per set of tools (one per tenant configuration
    version, say) between runs and threads."""

    def __init__(
        self,
        cards: Sequence[ToolCard],
        vectors: Sequence[Sequence[float]] | None = None,
        descriptions: Sequence[Sequence[float]] | None = None,
    ) -> None:
        """`vectors`: each card's text embedded; `descriptions` (optional, with vectors):
        each card's description alone (`CardVectors` holds both)."""
        self.cards = list(cards)
        self.positions = {card.name: i for i, card in enumerate(self.cards)}
        self.lexical = LexicalIndex(self.cards)
        for given in (vectors, descriptions):
            if given is not None and len(given) != len(self.cards):
                raise ValueError(f"{len(given)} vectors for {len(self.cards)} tool cards")
        self.semantic = (
            SemanticIndex(vectors, descriptions) if vectors is not None and self.cards else None
        )

    def __len__(self) -> int:
        return len(self.cards)

    def card(self, name: str) -> ToolCard | None:
        position = self.positions.get(name)
        return None if position is None else self.cards[position]

    def search(
        self,
        query: str,
        *,
        k: int = 10,
        query_vector: Sequence[float] | None = None,
        among: Collection[str] | None = None,
        fusion: str = FUSION_MIX,
    ) -> list[Hit]:
        """The best `k` cards for `query`, best first; only those named in `among` when
        given. Semantic ranking joins in when the index has vectors and `query_vector` is
        given; otherwise the ranking is lexical alone."""
        allowed = (
            None if among is None else {self.positions[n] for n in among if n in self.positions}
        )
        lexical = self._ranked(self.lexical.scores(query).items(), allowed)
        if self.semantic is None or query_vector is None:
            return [Hit(self.cards[i].name, s) for i, s in lexical[:k]]
        similarities = self.semantic.scores(query_vector)
        semantic = self._top_semantic(similarities, allowed)
        if fusion == FUSION_RRF:
            fused: dict[int, float] = defaultdict(float)
            for ranking in (lexical, semantic):
                for rank, (index, _) in enumerate(ranking):
                    fused[index] += 1.0 / (RRF_K + rank + 1)
        elif fusion == FUSION_MIX:
            fused = _mixed(lexical, semantic)
        else:
            raise ValueError(f"unknown fusion {fusion!r}: {FUSION_RRF} or {FUSION_MIX}")
        best = sorted(fused.items(), key=lambda item: (-item[1], item[0]))[:k]
        return [Hit(self.cards[i].name, s) for i, s in best]

    def _ranked(self, scores: Iterable[tuple[int, float]], allowed: set[int] | None):
        kept = scores if allowed is None else ((i, s) for i, s in scores if i in allowed)
        return sorted(kept, key=lambda item: (-item[1], item[0]))[:CANDIDATES]

    def _top_semantic(self, similarities: Any, allowed: set[int] | None):
        np = self.semantic._np  # type: ignore[union-attr]
        if allowed is not None:
            mask = np.full(len(self.cards), -np.inf, dtype=np.float32)
            mask[list(allowed)] = 0.0
            similarities = similarities + mask
        depth = min(CANDIDATES, len(self.cards) if allowed is None else len(allowed))
        if depth <= 0:
            return []
        top = np.argpartition(-similarities, depth - 1)[:depth]
        top = top[np.argsort(-similarities[top], kind="stable")]
        return [(int(i), float(similarities[i])) for i in top]


def _mixed(lexical, semantic) -> dict[int, float]:
    """Each side's scores scaled to [0, 1] over its candidates, then weighted."""
    mixed: dict[int, float] = defaultdict(float)
    for ranking, weight in ((lexical, 1 - MIX_SEMANTIC_WEIGHT), (semantic, MIX_SEMANTIC_WEIGHT)):
        if not ranking:
            continue
        top, bottom = ranking[0][1], ranking[-1][1]
        for index, score in ranking:  # (candidates all alike: each counts fully)
            mixed[index] += weight * ((score - bottom) / (top - bottom) if top > bottom else 1.0)
    return mixed


# -- embeddings of the cards, computed once per card text --------------------------------
class TextEmbedder(Protocol):
    """What routing needs of an embedder (rag.runtime.embeddings' embedders are ones)."""

    name: str

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


class VectorCache(Protocol):
    """Where card vectors are kept between builds: Django's cache API is one."""

    def get_many(self, keys: Sequence[str]) -> dict[str, Any]: ...

    def set_many(self, data: dict[str, Any]) -> Any: ...


class MemoryVectorCache:
    """In this process: the pure runtime's (the platform keeps vectors in the shared cache;
    tests/tools/test_routing.py holds both to the same test)."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}

    def get_many(self, keys: Sequence[str]) -> dict[str, Any]:
        return {key: self.data[key] for key in keys if key in self.data}

    def set_many(self, data: dict[str, Any]) -> None:
        self.data.update(data)


class CardVectors(NamedTuple):
    """The vectors of each card's text and of its description alone (SemanticIndex)."""

    cards: list[list[float]]
    descriptions: list[list[float]]


async def card_vectors(
    cards: Sequence[ToolCard], embedder: TextEmbedder, cache: VectorCache
) -> CardVectors:
    """The cards' vectors, in order: from `cache` by (embedder, digest of the text), the
    rest embedded in one call and cached (as float32 bytes: 1.5 kB for 384 dimensions).
    Costs one cache read, and one write plus the embedding of new or changed texts only."""
    wanted = [card.text for card in cards] + [
        card.description.strip() or card.text for card in cards
    ]
    keys = [f"toolvec:{embedder.name}:{_digest(text)}" for text in wanted]
    found = {
        key: _unpacked(value) for key, value in cache.get_many(list(dict.fromkeys(keys))).items()
    }
    missing = {key: text for key, text in zip(keys, wanted, strict=True) if key not in found}
    if missing:
        fresh = await embedder.embed(list(missing.values()))
        packed = {key: array("f", v).tobytes() for key, v in zip(missing, fresh, strict=True)}
        cache.set_many(packed)
        found.update({key: _unpacked(value) for key, value in packed.items()})
    vectors = [found[key] for key in keys]
    return CardVectors(cards=vectors[: len(cards)], descriptions=vectors[len(cards) :])


def _unpacked(value: bytes) -> list[float]:
    vector = array("f")
    vector.frombytes(value)
    return vector.tolist()


# -- step 3: a small model picks from the shortlist ----------------------------------------
Choose = Callable[[str], Awaitable[str]]  # a prompt -> the model's text answer

SELECTION_PROMPT = """Pick the tools needed to serve the request below, from this list only.
Answer with their names, one per line, most useful first, and nothing else.

Request: {request}

Tools:
{tools}"""


async def select_with_model(
    request: str, shortlist: Sequence[ToolCard], choose: Choose, *, limit: int = 5
) -> list[str]:
    """The names the model picked (at most `limit`, in its order, only from the
    shortlist); when it names none of them, the shortlist's first `limit`, unchanged (a
    selection that fails never leaves the model without tools). Costs one model call."""
    listing = "\n".join(f"- {card.name}: {card.description.splitlines()[0]}" for card in shortlist)
    answer = await choose(SELECTION_PROMPT.format(request=request.strip(), tools=listing))
    known = {card.name for card in shortlist}
    picked: list[str] = []
    for token in re.findall(r"[A-Za-z0-9_-]+", answer):
        if token in known and token not in picked:
            picked.append(token)
    return picked[:limit] if picked else [card.name for card in shortlist[:limit]]
