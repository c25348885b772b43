"""The gate's exposure check by data class (seed §4.10.3, last point; §4.6.1).

A summary becomes ``surface`` content (a replace ``user/message``). It must not widen
exposure: copy into it content that the shadowed history held only in a class the
surface may not carry — by default ``raw`` (streamed chunks, executed tool arguments,
turn-end details, spilled tool output; see :mod:`sessionstream.core.privacy`).

A text of a forbidden class that the span also holds as allowed content (the assistant
message that the chunks streamed, the tool-call arguments the assistant message
declared) is already on the surface: copying it widens nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

from sessionstream.core.compaction.facts import Facts
from sessionstream.core.compaction.gate import ExposureCheck, norm
from sessionstream.core.jsonvalue import FrozenList, JsonValue
from sessionstream.core.privacy import ALL_CLASSES, split
from sessionstream.core.sealed import DataClass
from sessionstream.core.session import Session

#: Classes a summary may copy by default: what is on the surface, and business state the
#: summary must name (goal, open tasks).
SUMMARY_CLASSES = frozenset({DataClass.SURFACE, DataClass.BUSINESS})


def _strings(value: JsonValue) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list | tuple | FrozenList):
        for v in value:
            yield from _strings(v)


def class_exposure(session: Session, allowed: Iterable[DataClass] = SUMMARY_CLASSES, *,
                   min_chars: int = 12) -> ExposureCheck:
    """An :class:`ExposureCheck` refusing a summary that copies a forbidden class's text.

    Texts shorter than ``min_chars`` (after whitespace normalisation) are not checked:
    short words are shared by every class.
    """
    permitted = frozenset(allowed)
    forbidden = tuple(c for c in ALL_CLASSES if c not in permitted)

    def check(text: str, facts: Facts) -> Sequence[str]:
        if not forbidden:
            return []
        flat = norm(text)
        events = [session.events[s] for s in sorted(facts.evidence.seqs)
                  if 0 <= s < len(session.events)]
        shown: list[str] = []  # the span's allowed content, where copies are harmless
        hidden: list[tuple[int, str, str, str]] = []  # (seq, type, path, text) forbidden
        for e in events:
            for part in split(e.type, e.data).parts:
                for path, value in zip(part.paths, part.values, strict=True):
                    for s in _strings(value):
                        if part.data_class in permitted:
                            shown.append(norm(s))
                        elif len(norm(s)) >= min_chars:
                            hidden.append((e.seq, e.type, path, norm(s)))
        allowed_text = "\n".join(shown)
        out = []
        for seq, etype, path, s in hidden:
            if s in flat and s not in allowed_text:
                cls = next(p.data_class for p in split(etype, session.events[seq].data).parts
                           if path in p.paths)
                out.append(f"{cls.value} content of seq {seq} ({etype} {path})")
        return out

    return check
