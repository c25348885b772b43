"""Sealed content on the envelope: the values of the ``sealed`` field (schema v2).

A value module with no imports of the core, so :mod:`sessionstream.core.events` (the
envelope carries the parts) and :mod:`sessionstream.core.privacy` (which makes and opens
them) can both use it. The meaning of each field is in ``privacy``'s docstring and in
docs/operations.md ("AEAD format").
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class DataClass(StrEnum):
    """A class of content with its own key and retention."""

    RAW = "raw"
    SURFACE = "surface"
    BUSINESS = "business"
    REASONING = "reasoning"  # a model's own reasoning (thinking blocks, reasoning items)
    #: long-term memory content (docs/adr/0030): one data key per memory operation that
    #: carries content, named ``mem/<namespace digest>/<op id>`` in the session slot of
    #: the key store; never one of a session's own classes (``privacy.ALL_CLASSES``)
    MEMORY = "memory"


class MalformedSealedPart(ValueError):
    """A ``sealed`` item that is not one (the codec turns it into CorruptRecord)."""


@dataclass(frozen=True, slots=True)
class SealedPart:
    """One class's content of one event, encrypted (one item of the wire's ``sealed``).

    ``key_session`` is the session whose data key sealed it and ``origin_event_id`` the
    event the associated data binds: both are the event's own, except for seed events a
    fork inherited, which keep their parent's (so deleting the parent reaches the child).
    ``paths`` are RFC 6901 JSON pointers into ``data`` where the values were taken out.
    """

    data_class: DataClass
    key_session: str
    origin_event_id: str
    paths: tuple[str, ...]
    nonce: bytes
    ciphertext: bytes

    def to_record(self) -> dict[str, Any]:
        """The Avro record (bytes stay bytes)."""
        return {"data_class": self.data_class.value, "key_session": self.key_session,
                "origin_event_id": self.origin_event_id, "paths": list(self.paths),
                "nonce": self.nonce, "ciphertext": self.ciphertext}

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> SealedPart:
        try:
            return cls(DataClass(rec["data_class"]), rec["key_session"],
                       rec["origin_event_id"], tuple(rec["paths"]), bytes(rec["nonce"]),
                       bytes(rec["ciphertext"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise MalformedSealedPart(f"malformed sealed part: {exc}") from None

    def to_json(self) -> dict[str, Any]:
        """The JSONL form: bytes as base64 text."""
        return {"data_class": self.data_class.value, "key_session": self.key_session,
                "origin_event_id": self.origin_event_id, "paths": list(self.paths),
                "nonce": base64.b64encode(self.nonce).decode(),
                "ciphertext": base64.b64encode(self.ciphertext).decode()}

    @classmethod
    def from_json(cls, obj: Any) -> SealedPart:
        try:
            if not isinstance(obj, Mapping) or not all(
                    isinstance(obj[k], str) for k in ("key_session", "origin_event_id")):
                raise TypeError("expected an object with string key_session/origin_event_id")
            paths = obj["paths"]
            if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
                raise TypeError("paths must be a list of strings")
            return cls(DataClass(obj["data_class"]), obj["key_session"],
                       obj["origin_event_id"], tuple(paths),
                       base64.b64decode(obj["nonce"], validate=True),
                       base64.b64decode(obj["ciphertext"], validate=True))
        except (KeyError, TypeError, ValueError, binascii.Error) as exc:
            raise MalformedSealedPart(f"malformed sealed part: {exc}") from None
