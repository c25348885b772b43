"""Memory records and the operations of the memory log, with their validation.

A **namespace** is where memories live: a tenant, then a scope (``user``, ``agent`` or
``org``) and its owner, then an optional path of labels the application chooses (a
LangGraph namespace's labels, an ADK app name). Its :attr:`Namespace.key` is the Kafka key
of every operation on it, so one namespace's operations are folded in one order
everywhere.

An **operation** is one record of the memory topic: :class:`Propose` (a memory or a new
version of one), :class:`Supersede` (a memory that replaces others), :class:`Confirm` (a
principal accepts or rejects a version), :class:`Forget` (by id, or every memory derived
from a deleted session) and :class:`Touch` (a new expiry). Each carries an ``op_id`` (a
redelivered record is recognised by it), the namespace, the time it was written (epoch
ms; informational — the order is the topic's) and the actor that wrote it.

A memory version's **provenance** is the sessions and event seqs it was derived from
(:class:`Source`) and how (:class:`Extractor`: explicit, or a model with its prompt
version). Nothing here reads a session: a source is a claim the writer checked.

:func:`op_from_json` is the one way in from JSON (the topic's ``data``, a CLI file, an
adapter's dict): every problem is an :class:`~.errors.InvalidMemory` naming the JSON path
and what is wrong there. ``op.to_json()`` is its inverse (``op_from_json(op.to_json())``
is ``op``).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, NoReturn

from sessionstream.core.errors import InvalidData
from sessionstream.core.jsonvalue import (
    JsonValue,
    canonical_dumps,
    check_and_freeze,
    thaw,
)
from sessionstream.core.memory.errors import InvalidMemory

#: The version of the operations' JSON layout (the Avro record's ``format_version``).
MEMORY_FORMAT_VERSION = 1

_TENANT_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")  # as Settings checks a tenant
_KIND_RE = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
LABEL_MAX = 256
ID_MAX = 128
TEXT_MAX = 512  # reasons, actor ids, model names, prompt versions
SEQS_MAX = 4096  # seqs cited from one session by one version
SOURCES_MAX = 1024  # sessions cited by one version
TARGETS_MAX = 1024  # ids named by one forget / touch / supersede
PATHS_MAX = 64  # index paths of one version
_INT_MAX = 2**63 - 1

#: Kinds the product names; any other lower-case name is accepted too (the policy decides).
KNOWN_KINDS = ("preference", "fact", "instruction", "note")


def _fail(path: str, reason: str) -> NoReturn:
    raise InvalidMemory(path, reason)


def _text(value: Any, path: str, *, limit: int = TEXT_MAX, empty: bool = False) -> str:
    if type(value) is not str:
        _fail(path, f"expected a string, got {_type(value)}")
    if not value and not empty:
        _fail(path, "must not be empty")
    if len(value) > limit:
        _fail(path, f"longer than {limit} characters ({len(value)})")
    if "\x00" in value:
        _fail(path, "contains a NUL character")
    return value


def _opt_text(value: Any, path: str) -> str | None:
    return None if value is None else _text(value, path)


def _int(value: Any, path: str, *, low: int = 0) -> int:
    if type(value) is not int:
        _fail(path, f"expected an integer, got {_type(value)}")
    if not low <= value <= _INT_MAX:
        _fail(path, f"{value} is outside [{low}, 2**63-1]")
    return value


def _opt_int(value: Any, path: str) -> int | None:
    return None if value is None else _int(value, path)


def _bool(value: Any, path: str) -> bool:
    if type(value) is not bool:
        _fail(path, f"expected true or false, got {_type(value)}")
    return value


def _obj(value: Any, path: str, required: Sequence[str], optional: Sequence[str] = ()
         ) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        _fail(path, f"expected an object, got {_type(value)}")
    for name in value:
        if name not in required and name not in optional:
            allowed = ", ".join(sorted((*required, *optional)))
            _fail(f"{path}.{name}", f"unknown field (allowed: {allowed})")
    for name in required:
        if name not in value:
            _fail(f"{path}.{name}", "missing")
    return value


def _list(value: Any, path: str, limit: int) -> Sequence[Any]:
    if not isinstance(value, list | tuple):
        _fail(path, f"expected a list, got {_type(value)}")
    if len(value) > limit:
        _fail(path, f"more than {limit} items ({len(value)})")
    return value


def _enum(cls: Any, value: Any, path: str) -> Any:
    try:
        return cls(value)
    except ValueError:
        names = ", ".join(m.value for m in cls)
        _fail(path, f"{value!r} is not one of: {names}")


def _type(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _id(value: Any, path: str) -> str:
    text = _text(value, path, limit=ID_MAX)
    if any(c.isspace() or unicodedata.category(c).startswith("C") for c in text):
        _fail(path, f"{text!r}: an id has no spaces or control characters")
    return text


# ------------------------------------------------------------------------------ namespace


class Scope(StrEnum):
    """Whose memory a namespace holds (seed §4.3: user / organisation-level knowledge)."""

    USER = "user"
    AGENT = "agent"
    ORG = "org"


def _escape(label: str) -> str:
    return label.replace("~", "~0").replace("/", "~1")


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _label(value: Any, path: str) -> str:
    text = _text(value, path, limit=LABEL_MAX)
    if any(unicodedata.category(c) == "Cc" for c in text):
        _fail(path, f"{text!r} contains a control character")
    return text


@dataclass(frozen=True, slots=True)
class Namespace:
    """Tenant, scope and owner, then the application's own labels."""

    tenant: str
    scope: Scope
    owner: str
    path: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if type(self.tenant) is not str or not _TENANT_RE.match(self.tenant):
            _fail("namespace.tenant", f"{self.tenant!r} is not a tenant: 1-63 of a-z 0-9 _ -, "
                  "starting with a letter or digit")
        if not isinstance(self.scope, Scope):
            object.__setattr__(self, "scope", _enum(Scope, self.scope, "namespace.scope"))
        _label(self.owner, "namespace.owner")
        if not isinstance(self.path, tuple):
            _fail("namespace.path", f"expected a tuple of labels, got {_type(self.path)}")
        if len(self.path) > 16:
            _fail("namespace.path", f"more than 16 labels ({len(self.path)})")
        for i, label in enumerate(self.path):
            _label(label, f"namespace.path[{i}]")

    @property
    def key(self) -> str:
        """The namespace as one string (the topic's record key): labels joined by ``/``,
        each with ``~`` as ``~0`` and ``/`` as ``~1`` (RFC 6901), so any label is allowed."""
        return "/".join(_escape(t) for t in (self.tenant, self.scope.value, self.owner,
                                              *self.path))

    @property
    def labels(self) -> tuple[str, ...]:
        """Scope, owner and path: the namespace within its tenant."""
        return (self.scope.value, self.owner, *self.path)

    @classmethod
    def parse(cls, key: Any, where: str = "namespace") -> Namespace:
        """The namespace whose :attr:`key` is ``key``."""
        text = _text(key, where, limit=16 * (LABEL_MAX * 2 + 1) + 200)
        tokens = [_unescape(t) for t in text.split("/")]
        if len(tokens) < 3:
            _fail(where, f"{text!r} is not tenant/scope/owner[/label…]")
        try:
            return cls(tokens[0], _enum(Scope, tokens[1], f"{where} scope"), tokens[2],
                       tuple(tokens[3:]))
        except InvalidMemory as exc:
            _fail(where, f"{text!r}: {exc.path}: {exc.reason}")

    def within(self, prefix: Sequence[str]) -> bool:
        """Whether :attr:`labels` start with ``prefix`` (``*`` matches any one label)."""
        labels = self.labels
        return len(prefix) <= len(labels) and all(
            p == "*" or p == label for p, label in zip(prefix, labels, strict=False))

    def __str__(self) -> str:
        return self.key


# ------------------------------------------------------------------------------ provenance


@dataclass(frozen=True, slots=True, order=True)
class Source:
    """Events of one session a memory version was derived from (seqs sorted, unique)."""

    session_id: str
    seqs: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "seqs": list(self.seqs)}

    @classmethod
    def from_json(cls, obj: Any, path: str) -> Source:
        o = _obj(obj, path, ("session_id", "seqs"))
        sid = _id(o["session_id"], f"{path}.session_id")
        raw = _list(o["seqs"], f"{path}.seqs", SEQS_MAX)
        if not raw:
            _fail(f"{path}.seqs", "name at least one event seq of the session")
        seqs = tuple(sorted({_int(s, f"{path}.seqs[{i}]") for i, s in enumerate(raw)}))
        return cls(sid, seqs)


def merge_sources(*groups: Iterable[Source]) -> tuple[Source, ...]:
    """The union of source lists: one :class:`Source` per session, seqs united, sorted."""
    by_session: dict[str, set[int]] = {}
    for group in groups:
        for s in group:
            by_session.setdefault(s.session_id, set()).update(s.seqs)
    return tuple(Source(sid, tuple(sorted(seqs))) for sid, seqs in sorted(by_session.items()))


def sources_cover(have: Iterable[Source], new: Iterable[Source]) -> bool:
    """Whether every seq of ``new`` is already cited by ``have``."""
    cited = {(s.session_id, q) for s in have for q in s.seqs}
    return all((s.session_id, q) in cited for s in new for q in s.seqs)


class Method(StrEnum):
    """How a memory was extracted."""

    EXPLICIT = "explicit"  # a harness, a tool or a person stated it
    MODEL = "model"  # an extractor asked a model (its name and prompt version are kept)


@dataclass(frozen=True, slots=True)
class Extractor:
    """Who extracted a memory version and how (the seed's "source" of a key field)."""

    method: Method
    name: str  # the harness, tool or extractor agent
    model: str | None = None
    prompt_version: str | None = None

    def __post_init__(self) -> None:
        if self.method is Method.MODEL and (self.model is None or self.prompt_version is None):
            _fail("extractor", "a model extractor names its model and prompt_version")

    def to_json(self) -> dict[str, Any]:
        return {"method": self.method.value, "name": self.name, "model": self.model,
                "prompt_version": self.prompt_version}

    @classmethod
    def from_json(cls, obj: Any, path: str) -> Extractor:
        o = _obj(obj, path, ("method", "name"), ("model", "prompt_version"))
        method = _enum(Method, o["method"], f"{path}.method")
        model = _opt_text(o.get("model"), f"{path}.model")
        prompt = _opt_text(o.get("prompt_version"), f"{path}.prompt_version")
        if method is Method.MODEL and (model is None or prompt is None):
            _fail(path, "a model extractor names its model and prompt_version")
        return cls(method, _text(o["name"], f"{path}.name"), model, prompt)


# ------------------------------------------------------------------------------ actors


class Role(StrEnum):
    """What kind of principal writes an operation (the policy decides per role)."""

    USER = "user"  # the person the memory is about, through a harness or the CLI
    AGENT = "agent"  # a harness or tool acting for a user
    EXTRACTOR = "extractor"  # the extractor agent (a model proposed it)
    OPERATOR = "operator"  # an administrator of the tenant


@dataclass(frozen=True, slots=True)
class Actor:
    """A principal and the user, agent and organisation it acts for (its bindings).

    Only ``role`` and ``id`` go into the log; the bindings are what the policy checks at
    write time (:func:`~sessionstream.core.memory.policy.decide`).
    """

    role: Role
    id: str
    tenant: str = "default"
    user: str | None = None
    agent: str | None = None
    org: str | None = None

    def owner_in(self, scope: Scope) -> str | None:
        return {Scope.USER: self.user, Scope.AGENT: self.agent, Scope.ORG: self.org}[scope]

    def to_json(self) -> dict[str, Any]:
        return {"role": self.role.value, "id": self.id}

    def __str__(self) -> str:
        return f"{self.role.value} {self.id!r}"


@dataclass(frozen=True, slots=True)
class ActorRef:
    """The actor as the log records it: role and id."""

    role: Role
    id: str

    def to_json(self) -> dict[str, Any]:
        return {"role": self.role.value, "id": self.id}

    @classmethod
    def from_json(cls, obj: Any, path: str) -> ActorRef:
        o = _obj(obj, path, ("role", "id"))
        return cls(_enum(Role, o["role"], f"{path}.role"), _text(o["id"], f"{path}.id"))


# ------------------------------------------------------------------------------ versions


class Confirmation(StrEnum):
    """A version's confirmation status (seed §4.12: source, version, confirmation)."""

    PENDING = "pending"  # proposed; waits for a principal (not served by default)
    ACCEPTED = "accepted"  # accepted by the policy; nobody confirmed it
    CONFIRMED = "confirmed"  # a principal confirmed it
    REJECTED = "rejected"  # a principal rejected it (kept, so it is not proposed again)


#: Which status a merge of two proposals of the same content keeps (the stronger one).
STRENGTH = {Confirmation.PENDING: 0, Confirmation.ACCEPTED: 1, Confirmation.CONFIRMED: 2}


@dataclass(frozen=True, slots=True, order=True)
class Ref:
    """One version of one memory: what a request shows and logs (``id@version``)."""

    id: str
    version: int

    def __str__(self) -> str:
        return f"{self.id}@{self.version}"

    @classmethod
    def parse(cls, text: Any, path: str = "ref") -> Ref:
        raw = _text(text, path, limit=ID_MAX + 24)
        mid, sep, ver = raw.rpartition("@")
        if not sep or not ver.isdigit() or int(ver) < 1:
            _fail(path, f"{raw!r} is not <memory id>@<version>")
        return cls(_id(mid, path), int(ver))


def _normal(value: JsonValue) -> JsonValue:
    if isinstance(value, str):
        return " ".join(unicodedata.normalize("NFC", value).split())
    if isinstance(value, Mapping):
        return {k: _normal(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normal(v) for v in value]
    return value


def content_digest(kind: str, content: JsonValue) -> str:
    """The identity of a memory's content: what duplicate proposals share.

    SHA-256 of the canonical JSON of ``[kind, content]`` with every string NFC-normalised
    and its whitespace collapsed, so two extractors that differ only in spacing collapse.
    It is derived from content, so it is kept only while the content is (sealed with it).
    """
    text = canonical_dumps([kind, _normal(content)])
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True, kw_only=True)
class Draft:
    """The content of a new memory version and where it came from."""

    kind: str
    content: JsonValue  # lossless JSON, frozen (sealed on the topic under the memory's key)
    sources: tuple[Source, ...]
    extractor: Extractor
    #: which fields are indexed for search: None the whole content, () not at all
    index: tuple[str, ...] | None = None
    expires_at: int | None = None  # epoch ms; None: no expiry

    def __post_init__(self) -> None:
        _kind(self.kind, "data.memory.kind")
        try:
            object.__setattr__(self, "content", check_and_freeze(self.content))
        except InvalidData as exc:
            _fail("data.memory.content" + exc.path.removeprefix("$"), exc.reason)
        if self.content is None or self.content in ("", {}, ()):
            _fail("data.memory.content", "a memory has content (not null or empty)")
        object.__setattr__(self, "sources", merge_sources(self.sources))
        if self.extractor.method is Method.MODEL and not self.sources:
            _fail("data.memory.sources", "a memory a model extracted cites the events it "
                  "came from (at least one source)")

    @property
    def digest(self) -> str:
        return content_digest(self.kind, self.content)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "content": thaw(self.content),
                "sources": [s.to_json() for s in self.sources],
                "extractor": self.extractor.to_json(),
                "index": None if self.index is None else list(self.index),
                "expires_at": self.expires_at}

    @classmethod
    def from_json(cls, obj: Any, path: str) -> Draft:
        o = _obj(obj, path, ("kind", "content", "sources", "extractor"),
                 ("index", "expires_at"))
        sources = tuple(Source.from_json(s, f"{path}.sources[{i}]")
                        for i, s in enumerate(_list(o["sources"], f"{path}.sources",
                                                    SOURCES_MAX)))
        index_raw = o.get("index")
        index = None if index_raw is None else tuple(
            _text(p, f"{path}.index[{i}]")
            for i, p in enumerate(_list(index_raw, f"{path}.index", PATHS_MAX)))
        try:
            content = check_and_freeze(o["content"])
        except InvalidData as exc:
            _fail(f"{path}.content" + exc.path.removeprefix("$"), exc.reason)
        return cls(kind=_kind(o["kind"], f"{path}.kind"), content=content, sources=sources,
                   extractor=Extractor.from_json(o["extractor"], f"{path}.extractor"),
                   index=index, expires_at=_opt_int(o.get("expires_at"), f"{path}.expires_at"))


def _kind(value: Any, path: str) -> str:
    text = _text(value, path, limit=64)
    if not _KIND_RE.match(text):
        _fail(path, f"{text!r} is not a kind: a-z 0-9 _ -, starting with a letter "
              f"(e.g. {', '.join(KNOWN_KINDS)})")
    return text


# ------------------------------------------------------------------------------ operations


class OpType(StrEnum):
    PROPOSE = "propose"
    SUPERSEDE = "supersede"
    CONFIRM = "confirm"
    FORGET = "forget"
    TOUCH = "touch"


@dataclass(frozen=True, slots=True, kw_only=True)
class Op:
    """What every operation carries."""

    TYPE: ClassVar[OpType]

    op_id: str
    namespace: Namespace
    time: int  # epoch ms when written (informational: the order is the topic's)
    actor: ActorRef

    def data_json(self) -> dict[str, Any]:  # pragma: no cover - every subclass has one
        raise NotImplementedError

    def to_json(self) -> dict[str, Any]:
        """The operation as JSON: the topic's record fields, ``data`` as an object."""
        return {"format_version": MEMORY_FORMAT_VERSION, "op": self.TYPE.value,
                "op_id": self.op_id, "namespace": self.namespace.key, "time": self.time,
                "actor": self.actor.to_json(), "data": self.data_json()}


@dataclass(frozen=True, slots=True, kw_only=True)
class Propose(Op):
    """A memory, or a new version of ``memory_id`` when it exists (a LangGraph ``put``).

    ``status`` is what the writer's policy decided (``accepted`` or ``pending``) and
    ``policy`` names that policy's version, so the fold never re-decides and a replay
    under a changed policy rebuilds the same state. ``dedupe``: an unknown id whose
    content equals a current memory's collapses into it (proposals of an extractor or
    ADK); ``False`` for keyed stores, where two keys with equal values are two items.
    """

    TYPE: ClassVar[OpType] = OpType.PROPOSE
    memory_id: str
    draft: Draft
    status: Confirmation = Confirmation.ACCEPTED
    policy: str = ""
    dedupe: bool = True

    def __post_init__(self) -> None:
        _check_status(self.status)

    def data_json(self) -> dict[str, Any]:
        return {"memory_id": self.memory_id, "memory": self.draft.to_json(),
                "status": self.status.value, "policy": self.policy, "dedupe": self.dedupe}


@dataclass(frozen=True, slots=True, kw_only=True)
class Supersede(Op):
    """A memory (as :class:`Propose` places it) that replaces ``targets``: each target's
    current version is invalidated from then and names the new one as its successor."""

    TYPE: ClassVar[OpType] = OpType.SUPERSEDE
    memory_id: str
    targets: tuple[str, ...]
    draft: Draft
    status: Confirmation = Confirmation.ACCEPTED
    policy: str = ""

    def __post_init__(self) -> None:
        _check_status(self.status)
        if not self.targets:
            _fail("data.targets", "name at least one memory to supersede")
        if self.memory_id in self.targets:
            _fail("data.memory_id", "a memory does not supersede itself (propose a new "
                  "version of it instead)")

    def data_json(self) -> dict[str, Any]:
        return {"memory_id": self.memory_id, "targets": list(self.targets),
                "memory": self.draft.to_json(), "status": self.status.value,
                "policy": self.policy}


@dataclass(frozen=True, slots=True, kw_only=True)
class Confirm(Op):
    """A principal confirms (``accept``) or rejects a pending or accepted version."""

    TYPE: ClassVar[OpType] = OpType.CONFIRM
    ref: Ref
    accept: bool = True

    def data_json(self) -> dict[str, Any]:
        return {"memory_id": self.ref.id, "version": self.ref.version, "accept": self.accept}


@dataclass(frozen=True, slots=True, kw_only=True)
class Forget(Op):
    """Forget memories by id (every version's content), or — ``source_session`` — what
    was derived from a deleted session (:func:`~.lineage.forget_plan`). One of the two."""

    TYPE: ClassVar[OpType] = OpType.FORGET
    memory_ids: tuple[str, ...] = ()
    source_session: str | None = None
    reason: str = ""

    def __post_init__(self) -> None:
        if bool(self.memory_ids) == (self.source_session is not None):
            _fail("data", "a forget names memory_ids or a source_session, exactly one")

    def data_json(self) -> dict[str, Any]:
        return {"memory_ids": list(self.memory_ids), "source_session": self.source_session,
                "reason": self.reason}


@dataclass(frozen=True, slots=True, kw_only=True)
class Touch(Op):
    """New expiry for the current versions of ``memory_ids`` (a TTL refreshed on read)."""

    TYPE: ClassVar[OpType] = OpType.TOUCH
    memory_ids: tuple[str, ...]
    expires_at: int | None

    def data_json(self) -> dict[str, Any]:
        return {"memory_ids": list(self.memory_ids), "expires_at": self.expires_at}


AnyOp = Propose | Supersede | Confirm | Forget | Touch


def _check_status(status: Confirmation) -> None:
    if status not in (Confirmation.PENDING, Confirmation.ACCEPTED):
        _fail("data.status", f"{status.value!r}: a proposal is accepted or pending (confirm "
              "and reject are operations of their own)")


def _ids(value: Any, path: str, *, empty: bool = False) -> tuple[str, ...]:
    items = _list(value, path, TARGETS_MAX)
    if not items and not empty:
        _fail(path, "name at least one memory id")
    out = tuple(_id(v, f"{path}[{i}]") for i, v in enumerate(items))
    if len(set(out)) != len(out):
        _fail(path, "names a memory id twice")
    return out


def op_from_json(obj: Any, where: str = "$") -> AnyOp:
    """The operation in ``obj`` (the shape :meth:`Op.to_json` writes), validated whole."""
    o = _obj(obj, where, ("op", "op_id", "namespace", "time", "actor", "data"),
             ("format_version",))
    version = o.get("format_version", MEMORY_FORMAT_VERSION)
    if type(version) is not int or not 1 <= version <= MEMORY_FORMAT_VERSION:
        _fail(f"{where}.format_version", f"{version!r}: this build reads memory operations "
              f"of format 1 to {MEMORY_FORMAT_VERSION} (upgrade sessionstream)")
    kind = _enum(OpType, o["op"], f"{where}.op")
    head: dict[str, Any] = {
        "op_id": _id(o["op_id"], f"{where}.op_id"),
        "namespace": Namespace.parse(o["namespace"], f"{where}.namespace"),
        "time": _int(o["time"], f"{where}.time"),
        "actor": ActorRef.from_json(o["actor"], f"{where}.actor"),
    }
    d = f"{where}.data"
    data = o["data"]
    try:
        if kind is OpType.PROPOSE:
            p = _obj(data, d, ("memory_id", "memory"), ("status", "policy", "dedupe"))
            return Propose(**head, memory_id=_id(p["memory_id"], f"{d}.memory_id"),
                           draft=Draft.from_json(p["memory"], f"{d}.memory"),
                           status=_enum(Confirmation, p.get("status", "accepted"),
                                        f"{d}.status"),
                           policy=_text(p.get("policy", ""), f"{d}.policy", empty=True),
                           dedupe=_bool(p.get("dedupe", True), f"{d}.dedupe"))
        if kind is OpType.SUPERSEDE:
            p = _obj(data, d, ("memory_id", "targets", "memory"), ("status", "policy"))
            return Supersede(**head, memory_id=_id(p["memory_id"], f"{d}.memory_id"),
                             targets=_ids(p["targets"], f"{d}.targets"),
                             draft=Draft.from_json(p["memory"], f"{d}.memory"),
                             status=_enum(Confirmation, p.get("status", "accepted"),
                                          f"{d}.status"),
                             policy=_text(p.get("policy", ""), f"{d}.policy", empty=True))
        if kind is OpType.CONFIRM:
            p = _obj(data, d, ("memory_id", "version"), ("accept",))
            version_n = _int(p["version"], f"{d}.version", low=1)
            return Confirm(**head, ref=Ref(_id(p["memory_id"], f"{d}.memory_id"), version_n),
                           accept=_bool(p.get("accept", True), f"{d}.accept"))
        if kind is OpType.FORGET:
            p = _obj(data, d, (), ("memory_ids", "source_session", "reason"))
            source = p.get("source_session")
            return Forget(**head, memory_ids=_ids(p.get("memory_ids", []), f"{d}.memory_ids",
                                                  empty=True),
                          source_session=None if source is None else _id(
                              source, f"{d}.source_session"),
                          reason=_text(p.get("reason", ""), f"{d}.reason", empty=True))
        p = _obj(data, d, ("memory_ids", "expires_at"))
        return Touch(**head, memory_ids=_ids(p["memory_ids"], f"{d}.memory_ids"),
                     expires_at=_opt_int(p["expires_at"], f"{d}.expires_at"))
    except InvalidMemory as exc:
        if exc.path.startswith(where):
            raise
        # raised by a dataclass check, which names the field from "data" down
        raise InvalidMemory(f"{where}.{exc.path}", exc.reason) from None


@dataclass(frozen=True, slots=True)
class Forgetting:
    """Why and when a version's content was forgotten (kept: it is metadata)."""

    at: int
    op_id: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at, "op_id": self.op_id, "reason": self.reason}


@dataclass(frozen=True, slots=True, kw_only=True)
class Version:
    """One version of a memory in the fold: its content (None once forgotten), its
    provenance, validity and confirmation."""

    ref: Ref
    kind: str
    content: JsonValue | None
    digest: str | None  # None once forgotten (it is derived from the content)
    index: tuple[str, ...] | None
    sources: tuple[Source, ...]
    extractor: Extractor
    status: Confirmation
    policy: str
    created_by: ActorRef
    op_id: str
    valid_from: int
    invalidated_at: int | None = None
    superseded_by: Ref | None = None
    supersedes: tuple[Ref, ...] = ()
    confirmed_by: ActorRef | None = None
    confirmed_at: int | None = None
    expires_at: int | None = None
    forgotten: Forgetting | None = None

    @property
    def live(self) -> bool:
        """Content still held and not replaced: a version a reader may be shown."""
        return (self.forgotten is None and self.superseded_by is None
                and self.status is not Confirmation.REJECTED)

    def visible(self, now: int | None = None, *, pending: bool = False) -> bool:
        """Whether search and list serve it: live, accepted or confirmed (or pending when
        asked), not expired at ``now`` (epoch ms; None: expiry not checked)."""
        if not self.live:
            return False
        if self.status is Confirmation.PENDING and not pending:
            return False
        return self.expires_at is None or now is None or now < self.expires_at

    def to_json(self) -> dict[str, Any]:
        return {
            "ref": str(self.ref), "kind": self.kind,
            "content": thaw(self.content), "digest": self.digest,
            "index": None if self.index is None else list(self.index),
            "sources": [s.to_json() for s in self.sources],
            "extractor": self.extractor.to_json(), "status": self.status.value,
            "policy": self.policy, "created_by": self.created_by.to_json(),
            "op_id": self.op_id, "valid_from": self.valid_from,
            "invalidated_at": self.invalidated_at,
            "superseded_by": None if self.superseded_by is None else str(self.superseded_by),
            "supersedes": [str(r) for r in self.supersedes],
            "confirmed_by": None if self.confirmed_by is None else self.confirmed_by.to_json(),
            "confirmed_at": self.confirmed_at, "expires_at": self.expires_at,
            "forgotten": None if self.forgotten is None else self.forgotten.to_json(),
        }

    @classmethod
    def from_json(cls, obj: Any, path: str) -> Version:
        o = _obj(obj, path, ("ref", "kind", "content", "digest", "index", "sources",
                             "extractor", "status", "policy", "created_by", "op_id",
                             "valid_from", "invalidated_at", "superseded_by", "supersedes",
                             "confirmed_by", "confirmed_at", "expires_at", "forgotten"))
        forgotten = o["forgotten"]
        return cls(
            ref=Ref.parse(o["ref"], f"{path}.ref"), kind=_kind(o["kind"], f"{path}.kind"),
            content=check_and_freeze(o["content"]), digest=o["digest"],
            index=None if o["index"] is None else tuple(o["index"]),
            sources=tuple(Source.from_json(s, f"{path}.sources[{i}]")
                          for i, s in enumerate(o["sources"])),
            extractor=Extractor.from_json(o["extractor"], f"{path}.extractor"),
            status=_enum(Confirmation, o["status"], f"{path}.status"),
            policy=o["policy"], created_by=ActorRef.from_json(o["created_by"],
                                                              f"{path}.created_by"),
            op_id=o["op_id"], valid_from=o["valid_from"],
            invalidated_at=o["invalidated_at"],
            superseded_by=None if o["superseded_by"] is None else Ref.parse(
                o["superseded_by"], f"{path}.superseded_by"),
            supersedes=tuple(Ref.parse(r, f"{path}.supersedes") for r in o["supersedes"]),
            confirmed_by=None if o["confirmed_by"] is None else ActorRef.from_json(
                o["confirmed_by"], f"{path}.confirmed_by"),
            confirmed_at=o["confirmed_at"], expires_at=o["expires_at"],
            forgotten=None if forgotten is None else Forgetting(
                forgotten["at"], forgotten["op_id"], forgotten["reason"]),
        )


@dataclass(frozen=True, slots=True)
class Memory:
    """A memory id and its versions, oldest first (the last is the current one)."""

    id: str
    versions: tuple[Version, ...] = field(default_factory=tuple)

    @property
    def current(self) -> Version:
        return self.versions[-1]

    @property
    def live(self) -> bool:
        return self.current.live

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "versions": [v.to_json() for v in self.versions]}
