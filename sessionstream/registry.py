"""Schema Registry client (Confluent-compatible REST API) and the ``confluent`` wire.

The core's :class:`~sessionstream.core.codec.WireCodec` frames and detects; this edge
does the HTTP (stdlib ``urllib``): writers register the subject ``<topic>-value`` with
the envelope schema they write and set its compatibility to BACKWARD; readers look a
schema id up (cached per id by the codec). Works against Confluent Schema Registry and
Apicurio Registry's ``/apis/ccompat/v7`` (schemas/README.md, "Wire formats").
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sessionstream.core import codec
from sessionstream.core.errors import CorruptRecord, SchemaUnavailable, SessionStreamError
from sessionstream.core.settings import Env

if TYPE_CHECKING:
    from sessionstream.core.events import Event
    from sessionstream.core.settings import Settings

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
TIMEOUT_S = 10.0
#: A reader's id lookup runs inside a batch: fail fast, the engine backs off and retries.
READ_TIMEOUT_S = 3.0


class RegistryError(SessionStreamError, RuntimeError):
    """The schema registry is unreachable or refused a request; the message says which.

    ``status``: the HTTP status it answered (None: no answer)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class RegistryClient:
    """The few calls of the Confluent-compatible API sessionstream makes."""

    def __init__(self, url: str, timeout: float = TIMEOUT_S,
                 read_timeout: float = READ_TIMEOUT_S) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.read_timeout = read_timeout

    def _call(self, method: str, path: str, body: Any = None,
              timeout: float | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode("utf-8")
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": CONTENT_TYPE,
                                              "Accept": CONTENT_TYPE})
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:300].decode("utf-8", "replace")
            raise RegistryError(f"schema registry {self.url}: {method} {path} -> HTTP "
                                f"{exc.code}: {detail}", exc.code) from exc
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise RegistryError(
                f"schema registry {self.url} unreachable ({method} {path}: {exc}); check "
                f"{Env.SCHEMA_REGISTRY_URL} (`sessionstream registry up` starts a "
                "local one)") from exc

    def register(self, subject: str, schema: str) -> int:
        """Register ``schema`` (Avro JSON text) under ``subject``; its global id."""
        out = self._call("POST", f"/subjects/{subject}/versions",
                         {"schemaType": "AVRO", "schema": schema})
        return int(out["id"])

    def set_compatibility(self, subject: str, level: str = "BACKWARD") -> None:
        self._call("PUT", f"/config/{subject}", {"compatibility": level})

    def compatibility(self, subject: str) -> str:
        return str(self._call("GET", f"/config/{subject}")["compatibilityLevel"])

    def schema(self, schema_id: int) -> str:
        """The schema text of a global id (the readers' lookup port).

        CorruptRecord when the registry answers it has no such id (404); any other
        failure (unreachable, timeout, 5xx, a refused credential) is SchemaUnavailable:
        temporary, the reader retries the record instead of dead-lettering it.
        """
        try:
            return str(self._call("GET", f"/schemas/ids/{schema_id}",
                                  timeout=self.read_timeout)["schema"])
        except RegistryError as exc:
            if exc.status == 404:
                raise CorruptRecord(
                    f"schema id {schema_id} is unknown to the schema registry {self.url}: "
                    "a record framed against another registry, or not a sessionstream "
                    "record") from exc
            raise SchemaUnavailable(f"schema id {schema_id}: {exc}") from exc
        except (KeyError, TypeError) as exc:
            raise SchemaUnavailable(f"schema id {schema_id}: the schema registry {self.url} "
                                    f"answered without a schema ({exc})") from exc


def subject(topic: str) -> str:
    """The subject of the topic's record values (Confluent's TopicNameStrategy)."""
    return f"{topic}-value"


def writer_schema_text() -> str:
    """The envelope schema writers write (the newest shipped ``.avsc``), as JSON text."""
    return codec.schema_files()[-1].read_text(encoding="utf-8")


def wire_codec(wire: str, registry_url: str | None, topic: str | None,
               *, writing: bool) -> codec.WireCodec:
    """The codec for ``wire``: readers always detect both framings; writers on
    ``confluent`` register ``<topic>-value`` (compatibility BACKWARD) and frame with its id."""
    client = RegistryClient(registry_url) if registry_url else None
    write_id = None
    if writing and wire == "confluent":
        if client is None or topic is None:
            raise RegistryError(f"{Env.WIRE}=confluent needs {Env.SCHEMA_REGISTRY_URL} "
                                "and an events topic")
        subj = subject(topic)
        write_id = client.register(subj, writer_schema_text())
        client.set_compatibility(subj, "BACKWARD")
    return codec.WireCodec(codec.default_codec(), client.schema if client else None, write_id)


def reader_decode(settings: Settings) -> Callable[[bytes], Event]:
    """The record decoder of a reader with ``settings``: either framing when a registry
    is configured (or the wire is ``confluent``), else single-object only."""
    if settings.wire == "confluent" or settings.schema_registry_url:
        return wire_codec(settings.wire, settings.schema_registry_url, None,
                          writing=False).decode
    return codec.decode
