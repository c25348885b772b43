"""Search over one namespace's memories: lexical ranking, vectors, and their fusion.

Debian's Redis 7 has no search module, so search runs in the reader's process over the
namespace's current versions (docs/adr/0030, "Search"). Everything here is pure and
deterministic (ties are broken by id), and stdlib only:

- :func:`tokenize` — NFKC, case-folded word tokens; runs of CJK characters become
  overlapping character bigrams (the seed is Chinese; users write memories in it);
- :class:`Bm25Index` — Okapi BM25 (k1 1.2, b 0.75), incremental add / remove;
- :class:`HashingEmbedder` — a deterministic embedder needing no model and no download:
  word and character-trigram features hashed (BLAKE2b, so equal in every process) into a
  signed vector, L2-normalised. It finds shared words and spellings, not paraphrases: a
  model embedder (pluggable through :class:`Embedder`) does that;
- :class:`VectorIndex` — exact cosine similarity, several vectors per document (one per
  indexed field; a document scores its best), brute force;
- :func:`fuse` — reciprocal rank fusion of rankings (lexical and vector);
- :func:`index_texts` — the texts of a value at LangGraph-style paths (``$``, ``a.b``,
  ``a[0]``, ``a[-1]``, ``a[*].b``); :func:`matches` — LangGraph's filter operators.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sessionstream.core.jsonvalue import thaw

_WORD = re.compile(r"\w+", re.UNICODE)


def _cjk(ch: str) -> bool:
    code = ord(ch)
    return (0x3040 <= code <= 0x30FF or 0x3400 <= code <= 0x4DBF or 0x4E00 <= code <= 0x9FFF
            or 0xAC00 <= code <= 0xD7AF or 0xF900 <= code <= 0xFAFF
            or 0x20000 <= code <= 0x2FA1F)


def tokenize(text: str) -> list[str]:
    """Search tokens of ``text``: case-folded words; CJK runs as character bigrams."""
    out: list[str] = []
    for word in _WORD.findall(unicodedata.normalize("NFKC", text).casefold()):
        run: list[str] = []  # the current segment's characters
        cjk = False
        for ch in word:
            if _cjk(ch) != cjk and run:
                out += _bigrams(run) if cjk else ["".join(run)]
                run = []
            cjk = _cjk(ch)
            run.append(ch)
        if run:
            out += _bigrams(run) if cjk else ["".join(run)]
    return out


def _bigrams(run: list[str]) -> list[str]:
    if len(run) == 1:
        return [run[0]]
    return [run[i] + run[i + 1] for i in range(len(run) - 1)]


# ------------------------------------------------------------------------------ BM25


@dataclass(frozen=True, slots=True)
class Hit:
    id: str
    score: float


class Bm25Index:
    """Okapi BM25 over documents of one namespace (each document: one or more texts).

    Postings per term, so a query costs the documents that share a term with it, not
    the namespace's size.
    """

    def __init__(self, k1: float = 1.2, b: float = 0.75) -> None:
        self.k1 = k1
        self.b = b
        self._terms: dict[str, Counter[str]] = {}  # doc -> its term counts
        self._lengths: dict[str, int] = {}
        self._postings: dict[str, dict[str, int]] = {}  # term -> doc -> tf
        self._total = 0

    def __len__(self) -> int:
        return len(self._terms)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._terms

    def add(self, doc_id: str, texts: Iterable[str]) -> None:
        """Index (or re-index) ``doc_id`` with ``texts``."""
        self.remove(doc_id)
        counts: Counter[str] = Counter()
        for text in texts:
            counts.update(tokenize(text))
        self._terms[doc_id] = counts
        length = sum(counts.values())
        self._lengths[doc_id] = length
        self._total += length
        for term, tf in counts.items():
            self._postings.setdefault(term, {})[doc_id] = tf

    def remove(self, doc_id: str) -> None:
        counts = self._terms.pop(doc_id, None)
        if counts is None:
            return
        self._total -= self._lengths.pop(doc_id)
        for term in counts:
            posting = self._postings[term]
            del posting[doc_id]
            if not posting:
                del self._postings[term]

    def search(self, query: str, k: int = 10, among: Iterable[str] | None = None
               ) -> list[Hit]:
        """The ``k`` best documents for ``query`` (score > 0), best first."""
        terms = Counter(tokenize(query))
        n = len(self._terms)
        if not terms or not n:
            return []
        avg = self._total / n
        allowed = None if among is None else set(among)
        scores: dict[str, float] = {}
        for term, qtf in terms.items():
            posting = self._postings.get(term)
            if not posting:
                continue
            idf = math.log(1 + (n - len(posting) + 0.5) / (len(posting) + 0.5))
            for doc_id, tf in posting.items():
                if allowed is not None and doc_id not in allowed:
                    continue
                norm = self.k1 * (1 - self.b + self.b * self._lengths[doc_id] / avg) \
                    if avg else 0.0
                scores[doc_id] = scores.get(doc_id, 0.0) + \
                    idf * tf * (self.k1 + 1) / (tf + norm) * qtf
        hits = [Hit(d, s) for d, s in scores.items() if s > 0]
        hits.sort(key=lambda h: (-h.score, h.id))
        return hits[:k]


# ------------------------------------------------------------------------------ vectors


class Embedder(Protocol):
    """Turns texts into vectors of ``dims`` floats; ``name`` says which model (and is
    recorded beside every stored vector, so a changed embedder re-embeds)."""

    @property
    def name(self) -> str: ...

    @property
    def dims(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


def _h(feature: str) -> int:
    return int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(),
                          "little")


class HashingEmbedder:
    """Deterministic feature hashing of words and character trigrams (no model)."""

    def __init__(self, dims: int = 256, *, char_weight: float = 0.5) -> None:
        if dims < 8:
            raise ValueError(f"dims={dims}: use at least 8 dimensions")
        self._dims = dims
        self.char_weight = char_weight

    @property
    def name(self) -> str:
        return f"hashing-v1-{self._dims}"

    @property
    def dims(self) -> int:
        return self._dims

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._one(t) for t in texts]

    def _one(self, text: str) -> list[float]:
        vec = [0.0] * self._dims
        for token in tokenize(text):
            self._add(vec, "w:" + token, 1.0)
            padded = f"<{token}>"
            for i in range(len(padded) - 2):
                self._add(vec, "c:" + padded[i:i + 3], self.char_weight)
        return normalize(vec)

    def _add(self, vec: list[float], feature: str, weight: float) -> None:
        h = _h(feature)
        vec[h % self._dims] += weight if (h >> 63) & 1 else -weight


def normalize(vec: Sequence[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vec))
    return [x / norm for x in vec] if norm else [0.0] * len(vec)


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity (0.0 when either vector is zero)."""
    if len(a) != len(b):
        raise ValueError(f"vectors of {len(a)} and {len(b)} dimensions")
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


class VectorIndex:
    """Exact cosine search; each document may hold several vectors (it scores its best)."""

    def __init__(self, dims: int) -> None:
        self.dims = dims
        self._vectors: dict[str, list[list[float]]] = {}

    def __len__(self) -> int:
        return len(self._vectors)

    def add(self, doc_id: str, vectors: Iterable[Sequence[float]]) -> None:
        kept = []
        for v in vectors:
            if len(v) != self.dims:
                raise ValueError(f"{doc_id}: a vector of {len(v)} dimensions in an index of "
                                 f"{self.dims}")
            kept.append(normalize(v))
        if kept:
            self._vectors[doc_id] = kept
        else:
            self._vectors.pop(doc_id, None)

    def remove(self, doc_id: str) -> None:
        self._vectors.pop(doc_id, None)

    def search(self, query: Sequence[float], k: int = 10, among: Iterable[str] | None = None
               ) -> list[Hit]:
        q = normalize(query)
        ids = self._vectors.keys() if among is None else [
            i for i in among if i in self._vectors]
        hits = [Hit(i, max(sum(x * y for x, y in zip(q, v, strict=True))
                           for v in self._vectors[i])) for i in ids]
        hits.sort(key=lambda h: (-h.score, h.id))
        return hits[:k]


def fuse(rankings: Sequence[Sequence[Hit]], k: int = 10, *, constant: int = 60) -> list[Hit]:
    """Reciprocal rank fusion: each ranking adds ``1 / (constant + rank)`` per document."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, hit in enumerate(ranking, start=1):
            scores[hit.id] = scores.get(hit.id, 0.0) + 1.0 / (constant + rank)
    out = [Hit(i, s) for i, s in scores.items()]
    out.sort(key=lambda h: (-h.score, h.id))
    return out[:k]


# ------------------------------------------------------------------------------ fields


_PATH_TOKEN = re.compile(r"\[(-?\d+|\*)\]|([^.\[\]]+)")


def _path_tokens(path: str) -> list[str]:
    tokens: list[str] = []
    for part in path.split("."):
        if not part:
            raise ValueError(f"index path {path!r} has an empty field")
        pos = 0
        for m in _PATH_TOKEN.finditer(part):
            if m.start() != pos:
                raise ValueError(f"index path {path!r} is not field[.field|[n]|[*]]…")
            tokens.append(f"[{m.group(1)}]" if m.group(1) is not None else m.group(2))
            pos = m.end()
        if pos != len(part):
            raise ValueError(f"index path {path!r} is not field[.field|[n]|[*]]…")
    return tokens


def _dumps(value: Any) -> str:
    return json.dumps(thaw(value), sort_keys=True, ensure_ascii=False)


def index_texts(content: Any, paths: Sequence[str] | None) -> list[str]:
    """The texts to index of ``content``: at each path (LangGraph's syntax), or the whole
    value (``None`` or ``["$"]``) as JSON text (a string stays itself). ``()``: nothing."""
    if paths is None:
        paths = ("$",)
    out: list[str] = []
    for path in paths:
        if path == "$":
            out.append(content if isinstance(content, str) else _dumps(content))
            continue
        out += _at(content, _path_tokens(path), 0)
    return out


def _at(value: Any, tokens: list[str], pos: int) -> list[str]:
    if pos == len(tokens):
        if value is None:
            return []
        if isinstance(value, str):
            return [value]
        if isinstance(value, bool | int | float):
            return [str(value)]  # as LangGraph does ("True", "3", "2.5")
        return [_dumps(value)]
    token = tokens[pos]
    if token.startswith("["):
        if not isinstance(value, list | tuple):
            return []
        index = token[1:-1]
        if index == "*":
            return [t for item in value for t in _at(item, tokens, pos + 1)]
        i = int(index)
        if not -len(value) <= i < len(value):
            return []
        return _at(value[i], tokens, pos + 1)
    if not isinstance(value, Mapping) or token not in value:
        return []
    return _at(value[token], tokens, pos + 1)


_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


def matches(value: Any, flt: Mapping[str, Any] | None) -> bool:
    """Whether ``value`` (a mapping) passes ``flt`` (LangGraph's filter): each key's value
    equal, or compared by ``$eq $ne $gt $gte $lt $lte``; nested objects compare inside."""
    if not flt:
        return True
    if not isinstance(value, Mapping):
        return False
    return all(_compare(value.get(k), v) for k, v in flt.items())


def _compare(item: Any, wanted: Any) -> bool:
    if isinstance(wanted, Mapping):
        if any(k.startswith("$") for k in wanted):
            return all(_operator(item, op, arg) for op, arg in wanted.items())
        if not isinstance(item, Mapping):
            return False
        return all(_compare(item.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list | tuple):
        return (isinstance(item, list | tuple) and len(item) == len(wanted)
                and all(_compare(i, w) for i, w in zip(item, wanted, strict=True)))
    return bool(item == wanted)


def _operator(item: Any, op: str, arg: Any) -> bool:
    if op == "$eq":
        return bool(item == arg)
    if op == "$ne":
        return bool(item != arg)
    if op not in _OPERATORS:
        raise ValueError(f"unsupported filter operator {op!r} (use one of "
                         f"{', '.join(_OPERATORS)})")
    try:
        a, b = float(item), float(arg)
    except (TypeError, ValueError):
        return False
    return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]
