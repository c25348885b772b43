"""The exceptions of the sessionstream core.

Every error the core raises derives from :class:`SessionStreamError`; adapters
(``producers``, ``streams``) keep their own modules and derive from it too, and
translate third-party errors at their boundary (``raise X(...) from exc``)::

    SessionStreamError
    ├── InvalidData               data is not lossless JSON (names the JSON path)
    ├── CatalogError
    │   ├── UnknownEventType      type not in the catalog and not ignorable
    │   └── SchemaViolation       data does not match the type's schema
    ├── InvariantViolation        Session.append refused the event (rule, type, seq)
    ├── ForkError                 fork point inside an open turn, or out of range
    ├── CompactionError
    │   ├── CompactionBusy        another compaction attempt is open in the session
    │   └── SummarizerError       the summarizer produced no summary (the attempt ends failed)
    ├── ProjectionError           a projection unit failed on an event (unit key, seq, cause)
    ├── RequestAssemblyError
    │   ├── ConflictingCompleteSections
    │   ├── DuplicateSection      the same section id registered twice in one scope
    │   ├── UnknownTool           a tool name nobody registered (a typo?)
    │   ├── HiddenTool            a known tool that is not visible in this scope
    │   ├── MissingPromptVariable a {name} in a section with no value supplied
    │   └── PendingToolCalls      a model request while a tool call is unanswered
    ├── CodecError
    │   ├── CorruptRecord         bytes that are not a sessionstream record
    │   ├── UnsupportedFormat     newer format_version than this build reads
    │   ├── UnknownRequiredEvent  unknown, non-ignorable event type on read
    │   └── SchemaUnavailable     the schema registry did not answer: temporary, retry
    ├── LogFileError              a JSONL line that cannot be imported (file:line)
    ├── AttachmentError           an attachment store could not write or read a blob
    └── SealedContentError        sealed (encrypted) content that cannot be used
        ├── MovedCiphertext       authentication failed: tampered, moved or wrong key
        ├── ContentKeyShredded    sealing with a data key that was destroyed
        └── LegalHold             deletion or retention refused: a legal hold applies
"""

from __future__ import annotations


class SessionStreamError(Exception):
    """Root of every error sessionstream raises."""


class InvalidData(SessionStreamError):
    """Event data that would not round-trip exactly through JSON."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"data at {path} is not lossless JSON: {reason}")


class CatalogError(SessionStreamError):
    """An event type or its data does not match the event catalog."""


class UnknownEventType(CatalogError):
    def __init__(self, event_type: str) -> None:
        self.event_type = event_type
        super().__init__(
            f"unknown event type {event_type!r}: register it in the catalog "
            "(domain types need a namespace such as 'todo/…' and an ignorable flag)"
        )


class SchemaViolation(CatalogError):
    def __init__(self, event_type: str, path: str, reason: str) -> None:
        self.event_type = event_type
        self.path = path
        self.reason = reason
        super().__init__(f"{event_type}: data at {path}: {reason}")


class InvariantViolation(SessionStreamError):
    """Session.append refused an event; the log is unchanged."""

    def __init__(self, rule: str, event_type: str, seq: int, detail: str) -> None:
        self.rule = rule
        self.event_type = event_type
        self.seq = seq
        self.detail = detail
        super().__init__(f"rule {rule!r} refused {event_type} at seq {seq}: {detail}")


class ForkError(SessionStreamError):
    """A fork point that is not a stable prefix."""


class CompactionError(SessionStreamError):
    """A compaction attempt could not be planned or committed."""


class CompactionBusy(CompactionError):
    """A compaction is already open: one attempt at a time (the compaction lock)."""

    def __init__(self, session_id: str, compaction_id: str, start_seq: int) -> None:
        self.compaction_id = compaction_id
        self.start_seq = start_seq
        super().__init__(
            f"session {session_id}: compaction {compaction_id} (seq {start_seq}) is still open"
        )


class SummarizerError(CompactionError):
    """The summarizer failed; the attempt is recorded as ``compaction/end`` failed."""


class ProjectionError(SessionStreamError):
    """A projection unit raised while folding an event; the other units are untouched."""

    def __init__(self, unit: str, seq: int, cause: BaseException) -> None:
        self.unit = unit
        self.seq = seq
        self.cause = cause
        super().__init__(
            f"projection {unit!r} failed on the event at seq {seq}: "
            f"{type(cause).__name__}: {cause}"
        )


class RequestAssemblyError(SessionStreamError):
    """A model request could not be assembled."""


class ConflictingCompleteSections(RequestAssemblyError):
    def __init__(self, scope: str | None, section_ids: list[str]) -> None:
        self.scope = scope
        self.section_ids = section_ids
        where = f"scope {scope!r}" if scope else "the global scope"
        super().__init__(
            f"{len(section_ids)} complete system-prompt sections are effective in {where}: "
            f"{section_ids}; a complete section must be the only one"
        )


class DuplicateSection(RequestAssemblyError):
    def __init__(self, section_id: str, scope: str | None) -> None:
        self.section_id = section_id
        self.scope = scope
        super().__init__(
            f"system-prompt section {section_id!r} is registered twice in "
            f"{'scope ' + repr(scope) if scope else 'the global scope'}"
        )


class UnknownTool(RequestAssemblyError):
    def __init__(self, name: str, suggestion: str | None) -> None:
        self.name = name
        self.suggestion = suggestion
        hint = f"; did you mean {suggestion!r}?" if suggestion else ""
        super().__init__(f"no tool provider knows a tool named {name!r}{hint}")


class HiddenTool(RequestAssemblyError):
    def __init__(self, name: str, provider: str, scope: str | None) -> None:
        self.name = name
        self.provider = provider
        self.scope = scope
        super().__init__(
            f"tool {name!r} (provider {provider!r}) exists but is not visible in "
            f"{'scope ' + repr(scope) if scope else 'the global scope'}"
        )


class MissingPromptVariable(RequestAssemblyError):
    def __init__(self, name: str, section_id: str) -> None:
        self.name = name
        self.section_id = section_id
        super().__init__(
            f"system-prompt section {section_id!r} uses {{{name}}} but no value was given"
        )


class PendingToolCalls(RequestAssemblyError):
    def __init__(self, calls: list[tuple[str, int]]) -> None:
        self.calls = calls
        listed = ", ".join(f"{cid} (seq {seq})" for cid, seq in calls)
        super().__init__(
            f"cannot assemble a model request: tool calls without a result on the surface: "
            f"{listed}"
        )


class CodecError(SessionStreamError):
    """Bytes or records that cannot be turned into events."""


class SchemaUnavailable(CodecError):
    """A record's writer schema could not be fetched (the schema registry is unreachable
    or failing): a temporary condition. Readers retry the record later; it is never
    dead-lettered as corrupt (an id the registry answers it does not know is)."""


class CorruptRecord(CodecError):
    """Bytes that are not a sessionstream record (bad framing, unknown schema, garbage)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"corrupt record: {reason}")


class UnsupportedFormat(CodecError):
    """A record written in a newer envelope format than this build reads."""

    def __init__(self, session_id: str, seq: int, version: int, supported: int) -> None:
        self.session_id = session_id
        self.seq = seq
        self.version = version
        self.supported = supported
        super().__init__(
            f"session {session_id!r} seq {seq}: format_version {version} is newer than "
            f"{supported}, the newest this build reads; upgrade sessionstream to read this "
            "session (it is refused, not read half-way)"
        )


class UnknownRequiredEvent(CodecError):
    """An event type this build does not know and that is not marked ignorable."""

    def __init__(self, session_id: str, seq: int, event_type: str) -> None:
        self.session_id = session_id
        self.seq = seq
        self.event_type = event_type
        super().__init__(
            f"session {session_id!r} seq {seq}: unknown event type {event_type!r} is not "
            "ignorable, so the rest of the log cannot be interpreted; upgrade sessionstream "
            "or register the type's plugin"
        )


class LogFileError(SessionStreamError):
    """A line of a JSONL session file that cannot be imported."""

    def __init__(self, file: str, line: int, reason: str) -> None:
        self.file = file
        self.line = line
        self.reason = reason
        super().__init__(f"{file}:{line}: {reason}")


class AttachmentError(SessionStreamError):
    """An attachment store (plain or sealed) could not store or load a blob."""


class SealedContentError(SessionStreamError):
    """Sealed (encrypted) event content that cannot be sealed or opened as asked."""


class MovedCiphertext(SealedContentError):
    """A sealed part failed authentication: tampered, moved to another event, wrong key.

    Never shown as content and never replaced silently: the record is refused.
    """


class ContentKeyShredded(SealedContentError):
    """A data key was destroyed (deletion, retention): nothing new is sealed with it."""

    def __init__(self, tenant: str, session_id: str, data_class: str) -> None:
        self.tenant = tenant
        self.session_id = session_id
        self.data_class = data_class
        super().__init__(
            f"the {data_class} data key of session {session_id!r} (tenant {tenant!r}) was "
            "shredded: the session's content of that class was deleted; start a new session"
        )


class LegalHold(SealedContentError):
    """Deletion or retention refused: a legal hold applies to the session or its tenant."""

    def __init__(self, scope: str, reason: str) -> None:
        self.scope = scope
        self.reason = reason
        super().__init__(
            f"legal hold on {scope}: {reason or 'no reason recorded'}; nothing was deleted "
            "(release the hold with `sessionstream hold release` first, if you may)"
        )
