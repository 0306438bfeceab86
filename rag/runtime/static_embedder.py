"""A static embedding model distilled from all-MiniLM-L6-v2: the platform's local model when
the MiniLM extra is not installed (and the default of new knowledge bases), in pure Python.

A text's vector is the normalised weighted mean of its word pieces' rows in a table
(model2vec's idea): MiniLM ran once over each token of its WordPiece vocabulary, reduced by
PCA, weighted by token rank (scripts/distill_static_embeddings.py writes the table, and
says how). No numpy, no model runtime: the base install has neither. The table
(rag/runtime/data/static-minilm.bin, a few MB) is read once, on first use.

The tokenizer is BERT's (what MiniLM's tokenizer.json configures: BertNormalizer with
lower case and accents stripped, BertPreTokenizer, WordPiece with `##` continuations);
tests/rag/test_static_embedder.py checks it against the `tokenizers` library. Inputs are
cut at MAX_CHARS characters (tenant text), words longer than 100 characters are [UNK]
as in BERT, and unknown pieces are left out of the mean.

Costs (bench/routing.py prints them): reading the table takes 0.1-0.5 s and holds about
12 MB (43 MB at its peak, while unzipping); then about a millisecond or less for a short
request, a few ms for a 300-word-piece chunk.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import math
import sys
import threading
import unicodedata
from array import array
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from rag.runtime.embeddings import EmbeddingError

STATIC_MODEL = "static-minilm-l6-v2"
STATIC_DIMENSIONS = 256
DEFAULT_TABLE = Path(__file__).resolve().parent / "data" / "static-minilm.bin"
MAX_CHARS = 50_000  # a chunk (at most 2000 estimated tokens) is far below; a query too
MAX_WORD_CHARS = 100  # longer words are [UNK] (BERT's max_input_chars_per_word)
UNKNOWN = "[UNK]"
_MAGIC = b"agentplatform static embeddings 1\n"


# -- The tokenizer ---------------------------------------------------------------------


def _is_control(char: str) -> bool:
    # (Unassigned code points, Cn, stay: the tokenizers library keeps them too.)
    return char not in "\t\n\r" and unicodedata.category(char) in ("Cc", "Cf", "Co", "Cs")


def _is_punctuation(char: str) -> bool:
    code = ord(char)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True  # every ASCII non-alphanumeric sign, as BERT treats them
    return unicodedata.category(char).startswith("P")


def _is_cjk(code: int) -> bool:
    return (
        0x4E00 <= code <= 0x9FFF
        or 0x3400 <= code <= 0x4DBF
        or 0x20000 <= code <= 0x2A6DF
        or 0x2A700 <= code <= 0x2B73F
        or 0x2B740 <= code <= 0x2B81F
        or 0x2B820 <= code <= 0x2CEAF
        or 0xF900 <= code <= 0xFAFF
        or 0x2F800 <= code <= 0x2FA1F
    )


def normalized(text: str) -> str:
    """BertNormalizer: control characters dropped, white space made spaces, CJK ideographs
    set apart, accents stripped (NFD, combining marks dropped), lower case, in that order."""
    out: list[str] = []
    for char in text:
        if char in "\x00\ufffd" or _is_control(char):
            continue
        if char.isspace():
            out.append(" ")
        elif _is_cjk(ord(char)):
            out.append(f" {char} ")
        else:
            out.append(char)
    decomposed = unicodedata.normalize("NFD", "".join(out))
    stripped = "".join(c for c in decomposed if unicodedata.category(c) != "Mn")
    if "\u03a3" in stripped:  # capital sigma: lower case per character, no final-sigma rule
        return "".join(c.lower() for c in stripped)
    return stripped.lower()


def words(text: str) -> list[str]:
    """BertPreTokenizer over normalised text: split at white space, each punctuation sign
    a word of its own."""
    found: list[str] = []
    for part in text.split():
        start = 0
        for i, char in enumerate(part):
            if _is_punctuation(char):
                if i > start:
                    found.append(part[start:i])
                found.append(char)
                start = i + 1
        if start < len(part):
            found.append(part[start:])
    return found


class WordPiece:
    """Greedy longest-match-first over a vocabulary (`##` marks a continuation)."""

    def __init__(self, vocabulary: Sequence[str]) -> None:
        self.ids = {token: i for i, token in enumerate(vocabulary)}
        self.unknown = self.ids[UNKNOWN]
        # No piece is longer than the longest token: bounds the search per position.
        self.longest = max(len(t.removeprefix("##")) for t in vocabulary)
        self.pieces = lru_cache(maxsize=65_536)(self._pieces)

    def _pieces(self, word: str) -> tuple[int, ...]:
        if len(word) > MAX_WORD_CHARS:
            return (self.unknown,)
        found: list[int] = []
        start = 0
        while start < len(word):
            end = min(len(word), start + self.longest)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                token = self.ids.get(piece)
                if token is not None:
                    found.append(token)
                    break
                end -= 1
            else:
                return (self.unknown,)  # a part matches nothing: the whole word is unknown
            start = end
        return tuple(found)

    def encode(self, text: str) -> list[int]:
        """The token ids of `text` (no [CLS]/[SEP]), cut at MAX_CHARS characters first."""
        ids: list[int] = []
        for word in words(normalized(text[:MAX_CHARS])):
            ids.extend(self.pieces(word))
        return ids


# -- The table ---------------------------------------------------------------------------


def write_table(
    path: Path, vocabulary: Sequence[str], rows: Sequence[Sequence[float]], *, model: str = ""
) -> int:
    """Writes the table: each row as int8 with one float32 scale (its largest magnitude
    over 127), gzip'd, deterministic. Returns the file's size in bytes."""
    dims = len(rows[0])
    scales = array("f")
    values = array("b")
    for row in rows:
        top = max(abs(x) for x in row)
        scale = top / 127 if top else 1.0
        scales.append(scale)
        values.extend(max(-127, min(127, round(x / scale))) for x in row)
    if sys.byteorder == "big":
        scales.byteswap()
    header = {"model": model or STATIC_MODEL, "dims": dims, "tokens": len(vocabulary)}
    vocab_bytes = "\n".join(vocabulary).encode()
    header["vocabulary_bytes"] = len(vocab_bytes)
    payload = b"".join(
        [json.dumps(header).encode(), b"\n", vocab_bytes, scales.tobytes(), values.tobytes()]
    )
    data = _MAGIC + gzip.compress(payload, compresslevel=9, mtime=0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return len(data)


class StaticTable:
    """The read table: the tokenizer, and each token's row as int8 values and a scale."""

    def __init__(self, path: Path) -> None:
        data = path.read_bytes()
        if not data.startswith(_MAGIC):
            raise ValueError(f"{path} is not a static embedding table")
        payload = gzip.decompress(data[len(_MAGIC) :])
        line_end = payload.index(b"\n")
        header = json.loads(payload[:line_end])
        self.model: str = header["model"]
        self.dims: int = header["dims"]
        tokens: int = header["tokens"]
        offset = line_end + 1
        vocabulary = payload[offset : offset + header["vocabulary_bytes"]].decode().split("\n")
        offset += header["vocabulary_bytes"]
        self.scales = array("f", payload[offset : offset + 4 * tokens])
        if sys.byteorder == "big":
            self.scales.byteswap()
        offset += 4 * tokens
        self.values = array("b", payload[offset : offset + tokens * self.dims])
        if len(vocabulary) != tokens or len(self.values) != tokens * self.dims:
            raise ValueError(f"{path} is truncated")
        self.wordpiece = WordPiece(vocabulary)

    def vector(self, text: str) -> list[float]:
        """The unit vector of `text`: its known pieces' rows, averaged (each row carries its
        token's weight), then normalised; [UNK]'s row when no piece is known."""
        counts = Counter(self.wordpiece.encode(text))
        counts.pop(self.wordpiece.unknown, None)
        if not counts:
            counts[self.wordpiece.unknown] = 1
        dims, values, scales = self.dims, self.values, self.scales
        total = [0.0] * dims
        for token, count in counts.items():
            weight = count * scales[token]
            start = token * dims
            total = [
                t + weight * v for t, v in zip(total, values[start : start + dims], strict=True)
            ]
        norm = math.sqrt(sum(t * t for t in total)) or 1.0
        return [t / norm for t in total]


class StaticEmbedder:
    """The static model as an embedder (rag.runtime.embeddings.Embedder): loads the table
    on first use (thread-safe), then embeds in the calling thread."""

    name = f"static:{STATIC_MODEL}"
    dimensions = STATIC_DIMENSIONS

    def __init__(self, path: Path = DEFAULT_TABLE) -> None:
        self.path = path
        self._table: StaticTable | None = None
        self._lock = threading.Lock()

    def load(self) -> StaticTable:
        if self._table is None:
            with self._lock:
                if self._table is None:
                    try:
                        table = StaticTable(self.path)
                    except (OSError, ValueError, EOFError) as exc:
                        raise EmbeddingError(
                            f"The static embedding table could not be read ({exc}): "
                            "reinstall the platform, or regenerate it with "
                            "scripts/distill_static_embeddings.py."
                        ) from exc
                    if (table.model, table.dims) != (STATIC_MODEL, STATIC_DIMENSIONS):
                        raise EmbeddingError(
                            f"The static embedding table holds {table.model} with "
                            f"{table.dims} dimensions; {STATIC_MODEL} with "
                            f"{STATIC_DIMENSIONS} was expected."
                        )
                    self._table = table
        return self._table

    def embed_one(self, text: str) -> list[float]:
        return self.load().vector(text)

    def embed_sync(self, texts: Sequence[str]) -> list[list[float]]:
        table = self.load()
        return [table.vector(text) for text in texts]

    def count_tokens(self, texts: Sequence[str]) -> int:
        """The word pieces the model reads of `texts` (`/v1/embeddings`' usage)."""
        wordpiece = self.load().wordpiece
        return sum(len(wordpiece.encode(text)) for text in texts)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if self._table is not None and len(texts) == 1 and len(texts[0]) < 2000:
            return self.embed_sync(texts)  # a request: less than a thread hop costs
        return await asyncio.to_thread(self.embed_sync, texts)
