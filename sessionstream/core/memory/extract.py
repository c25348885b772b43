"""Extraction: what a turn says that is worth remembering (docs/adr/0030, "Extraction").

The extractor agent hands a :class:`MemoryModel` an :class:`ExtractRequest` (the ended
turns' user messages, each with its seq, and the namespace's current memories) and
proposes what comes back, citing the seqs. Two models live here, both offline and
deterministic:

- :class:`PatternModel` (the default): statements a user makes about themselves —
  "I prefer …", "I like / love / hate …", "always … / never …", "my … is …", "call me …",
  "I am allergic to …", "I live in …", "I work at / as …". A statement contradicting a
  current memory of the same subject ("my seat preference is aisle" after "… window")
  names that memory in ``supersedes``;
- :class:`ScriptedModel`: candidates given per session (tests, demos).

An OpenAI-compatible model client is the same port
(`sessionstream.integrations.memory_model_http.OpenAICompatibleExtractor`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from sessionstream.core.memory.search import tokenize


@dataclass(frozen=True, slots=True)
class Said:
    """One user message of an ended turn: its seq and text."""

    seq: int
    text: str


@dataclass(frozen=True, slots=True)
class Known:
    """A current memory the model may refine or contradict."""

    id: str
    kind: str
    text: str
    subject: str | None = None


@dataclass(frozen=True, slots=True)
class ExtractRequest:
    session_id: str
    said: tuple[Said, ...]
    known: tuple[Known, ...] = ()


@dataclass(frozen=True, slots=True)
class Candidate:
    """A memory to propose: kind, content, the seqs it comes from, what it replaces."""

    kind: str
    content: str
    seqs: tuple[int, ...]
    supersedes: tuple[str, ...] = ()
    subject: str | None = None


class MemoryModel(Protocol):
    """What the extractor asks: ``name`` and ``prompt_version`` go into provenance."""

    @property
    def name(self) -> str: ...

    @property
    def prompt_version(self) -> str: ...

    def extract(self, request: ExtractRequest) -> list[Candidate]: ...


_RULES: tuple[tuple[str, str, re.Pattern[str]], ...] = tuple(
    (kind, subject, re.compile(pattern, re.IGNORECASE)) for kind, subject, pattern in (
        ("preference", "prefer", r"\bI (?:would )?prefer (?P<x>[^.!?\n]+)"),
        ("preference", "like", r"\bI (?:really )?(?:like|love|enjoy) (?P<x>[^.!?\n]+)"),
        ("preference", "dislike", r"\bI (?:really )?(?:hate|dislike|can't stand) "
                                  r"(?P<x>[^.!?\n]+)"),
        ("instruction", "always", r"\b(?:please )?always (?P<x>[^.!?\n]+)"),
        ("instruction", "never", r"\b(?:please )?never (?P<x>[^.!?\n]+)"),
        ("fact", "allergy", r"\bI(?: am|'m) allergic to (?P<x>[^.!?\n]+)"),
        ("fact", "home", r"\bI live in (?P<x>[^.!?\n]+)"),
        ("fact", "work", r"\bI work (?:at|for|as) (?P<x>[^.!?\n]+)"),
        ("fact", "name", r"\bcall me (?P<x>[^.!?\n]+)"),
        ("fact", "my", r"\bmy (?P<s>[a-z][a-z ]{1,40}?) is (?P<x>[^.!?\n]+)"),
    ))

_PHRASE = {"prefer": "Prefers {x}", "like": "Likes {x}", "dislike": "Dislikes {x}",
           "always": "Always {x}", "never": "Never {x}", "allergy": "Allergic to {x}",
           "home": "Lives in {x}", "work": "Works {w} {x}", "name": "Wants to be called {x}",
           "my": "{S} is {x}"}


def _subject_of(text: str) -> str | None:
    for _, subject, pattern in _RULES:
        m = pattern.search(text)
        if m is not None:
            return _subject(subject, m)
    return None


#: Words that say nothing about what a preference is about.
_STOP = frozenset((
    "a", "an", "the", "my", "to", "of", "on", "in", "at", "for", "with", "and", "or", "but",
    "these", "days", "now", "this", "that", "those", "it", "them", "when", "long", "short",
    "very", "more", "less", "than", "really"))


def _subject(subject: str, m: re.Match[str]) -> str:
    if subject == "my":
        return "my:" + " ".join(tokenize(m.group("s")))
    return subject


def _topic(text: str) -> frozenset[str]:
    return frozenset(t for t in tokenize(text) if t not in _STOP and len(t) > 2)


def _family(subject: str) -> str:
    return "taste" if subject in ("prefer", "like", "dislike") else subject


@dataclass(frozen=True)
class PatternModel:
    """The default, offline extractor: first-person statements (see the module)."""

    name: str = "pattern"
    prompt_version: str = "pattern-1"

    def extract(self, request: ExtractRequest) -> list[Candidate]:
        out: list[Candidate] = []
        known = [(k.subject or _subject_of(_unphrase(k.text)) or "", k) for k in request.known]
        for said in request.said:
            for kind, subject, pattern in _RULES:
                for m in pattern.finditer(said.text):
                    x = re.split(r",? and I\b|,? but I\b", m.group("x"))[0]
                    x = x.strip().rstrip(",;:")
                    if not x:
                        continue
                    work = re.search(r"work (at|for|as)", m.group(0), re.IGNORECASE)
                    text = _PHRASE[subject].format(
                        x=x, S=m.group("s").strip().capitalize() if subject == "my" else "",
                        w=work.group(1).lower() if work is not None else "")
                    subj = _subject(subject, m)
                    out.append(Candidate(kind, text, (said.seq,),
                                         _contradicted(subj, text, known), subj))
        return out


def _contradicted(subject: str, text: str, known: list[tuple[str, Known]]
                  ) -> tuple[str, ...]:
    """The current memories this statement replaces: the same subject ("my home airport
    is …", "call me …"), or a taste about the same thing ("I prefer an aisle seat"
    after "Prefers a window seat"), said differently."""
    topic = _topic(text)
    out = []
    for subj, k in known:
        if k.text == text:
            continue
        same = subj == subject and (subject.startswith("my:")
                                    or subject in ("home", "work", "name"))
        taste = _family(subj) == _family(subject) == "taste" and topic & _topic(k.text)
        if same or taste:
            out.append(k.id)
    return tuple(sorted(out))


def _unphrase(text: str) -> str:
    """A stored phrasing back as a first-person statement (to find its subject)."""
    for key, phrase in _PHRASE.items():
        head = phrase.split("{")[0]
        if head and text.startswith(head):
            rest = text[len(head):]
            return {"prefer": "I prefer ", "like": "I like ", "dislike": "I hate ",
                    "always": "always ", "never": "never ", "allergy": "I am allergic to ",
                    "home": "I live in ", "name": "call me "}.get(key, "") + rest
    m = re.match(r"(?P<s>[A-Za-z][A-Za-z ]{1,40}?) is (?P<x>.+)", text)
    return f"my {m.group('s').lower()} is {m.group('x')}" if m else text


@dataclass
class ScriptedModel:
    """Candidates given per session id (tests and demos): deterministic, offline."""

    script: Mapping[str, Sequence[Candidate]] = field(default_factory=dict)
    name: str = "scripted"
    prompt_version: str = "script-1"

    def extract(self, request: ExtractRequest) -> list[Candidate]:
        return list(self.script.get(request.session_id, ()))


__all__ = ["Candidate", "ExtractRequest", "Known", "MemoryModel", "PatternModel", "Said",
           "ScriptedModel"]
