"""What the native fold keeps beside the extension, and how it forgets it.

:class:`FoldState` builds the extension's ``Folder`` for a processor's pipeline (its
catalog, the built-in units it folds, the Python units' types, the sealed-content opener,
the chunk shapes) and holds, per session, what the Python side keeps of it: the Python
units' states, the offset and chunks last written, the sessions folded since the last
flush, the sessions the Python processor owns. The jobs built on it are in
:mod:`~sessionstream.streams.native_flush` (the writes, background flush),
:mod:`~sessionstream.streams.native_handover` (Python units, hand-over to the Python
processor, loads), :mod:`~sessionstream.streams.native_seal` (sealing, digests, keys) and
:mod:`~sessionstream.streams.native_fold` (the batches: NativeFold).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any

from sessionstream.core import codec
from sessionstream.core.admission import WINDOW
from sessionstream.core.events import FORMAT_VERSION
from sessionstream.core.pipeline import ReaderPipeline, Record, Undecodable
from sessionstream.core.projections import Registry
from sessionstream.core.projections.business import BusinessUnit
from sessionstream.core.projections.compaction import CompactionUnit
from sessionstream.core.projections.domain import GoalUnit, PlanUnit, TodoUnit
from sessionstream.core.projections.index import IndexUnit
from sessionstream.core.projections.rejections import RejectionsUnit
from sessionstream.core.projections.surface import SurfaceUnit
from sessionstream.core.projections.tools import ToolsUnit
from sessionstream.core.projections.turns import TurnsUnit
from sessionstream.core.projections.usage import UsageUnit
from sessionstream.core.rows import Stored
from sessionstream.native import ext as _native  # absent: the Python fold
from sessionstream.streams.native_seal import RowSealer, opener_args
from sessionstream.streams.processor import BatchReport, Processor

#: The built-in unit classes the extension folds, by key.
NATIVE_UNITS: dict[str, type] = {
    "index": IndexUnit, "turns": TurnsUnit, "usage": UsageUnit, "plan": PlanUnit,
    "goal": GoalUnit, "rejections": RejectionsUnit, "tools": ToolsUnit, "todo": TodoUnit,
    "business": BusinessUnit, "compaction": CompactionUnit, "surface": SurfaceUnit,
}


class FoldState:
    """The extension's folder for ``processor`` and what is kept per session beside it
    (the caller checked that the extension can serve the pipeline)."""

    def __init__(self, processor: Processor) -> None:
        assert _native is not None
        self.proc = processor
        reg = processor.pipeline.registry
        self._py_units = tuple(u for u in reg.units if u.key not in NATIVE_UNITS)
        self._py_registry = Registry(self._py_units)
        py_types: set[str] = set()
        catalog = [t.name for t in processor.pipeline.catalog]
        for u in self._py_units:
            py_types |= set(catalog) if u.types is None else set(u.types)
        self._opener = processor.pipeline.opener
        if self._opener is not None:
            # The opener learns each session's lineage from its session/start (metadata):
            # it must see them, so a sealed event handed over later opens as in Python.
            py_types.add("session/start")
        self._all_keys = frozenset(u.key for u in reg.units)
        versions = {k: v for k, v in reg.versions().items() if k in NATIVE_UNITS}
        self.folder = _native.Folder(codec.schema_fingerprints(), FORMAT_VERSION, catalog,
                                     sorted(py_types), versions, WINDOW)
        opening = opener_args(self._opener)
        if opening is not None:
            self.folder.set_opener(*opening)
        self._py_states: dict[str, dict[str, Any]] = {}  # Python units' states per session
        self._py_changed: dict[str, set[str]] = {}
        self._written: dict[str, int] = {}  # as_of_offset last written, per session
        self._dirty: dict[str, None] = {}  # native sessions folded since the last flush
        self._python: set[str] = set()  # sessions the Python processor owns now
        self._gen: int | None = None  # the live path's generation (reset on a change)
        processor.cached_elsewhere = self.folder.has
        self._native_units = tuple(u for u in reg.units if u.key in NATIVE_UNITS)
        #: Seals the rows' content-bearing fields (and keeps their digests for replay).
        self.sealer = RowSealer(processor.codec.rows, (u.key for u in reg.units))
        #: sessions started without a row load (their first event was in the batch)
        self.fresh_starts = 0
        # Chunked units (ADR 0013), per session, as last written: the Python units'
        # states, every chunked unit's chunk counts. The extension hands the native
        # ones' heads and the items from the first chunk its batches changed.
        self._native_chunked = {u.key: u for u in reg.units
                                if u.key in NATIVE_UNITS and u.collections}
        self.folder.set_chunk_shapes({
            key: [(c.name, c.kind, c.view_key, c.state_key) for c in u.collections]
            for key, u in self._native_chunked.items()})
        self._py_base: dict[str, dict[str, Any]] = {}
        self._chunks: dict[str, dict[str, Stored]] = {}
        self._memo: dict[str, tuple[dict[str, Any], dict[str, Stored]]] = {}
        #: Per session, per sealed field written by this fold (with ``keep_digests``):
        #: (:func:`~sessionstream.streams.native_seal.sealed_ref` of the value stored, the
        #: digest of its clear text), so replay's compare opens only the live row (ADR 0015).
        self.digests = self.sealer.digests
        #: Called with the sessions each ``fold`` folded natively (replay reads their
        #: row keys ahead of the flush).
        self.on_folded: Callable[[list[str]], None] | None = None
        #: a background flush (``flush(background=True)``) and the sessions whose write
        #: in it did not apply (rewritten whole by their next write)
        self._flushing: asyncio.Future[BatchReport] | None = None
        self._rewrites: list[str] = []
        #: everything kept per session beside the extension (forgotten with it)
        self._per_session: tuple[dict[str, Any], ...] = (
            self._py_states, self._py_changed, self._written, self._dirty, self._py_base,
            self._chunks, self._memo, self.sealer.digests, self.sealer.pending)

    @property
    def keep_digests(self) -> bool:
        """Keep the sealed fields' digests of every write (replay sets it)."""
        return self.sealer.keep_digests

    @keep_digests.setter
    def keep_digests(self, keep: bool) -> None:
        self.sealer.keep_digests = keep

    def _to_python(self, sid: str) -> None:
        """The Python processor owns ``sid`` from now on; a natively folded session was
        written up to its last batch, so Python continues from its stored row."""
        self._drop(sid)
        self._python.add(sid)

    def _drop(self, sid: str) -> None:
        self.folder.drop_session(sid)
        self._forget_py(sid)

    def _forget_py(self, sid: str) -> None:
        for d in self._per_session:
            d.pop(sid, None)

    def forget(self, partitions: Iterable[tuple[str, int]] | None = None) -> None:
        """Drop cached sessions (all, or of these (topic, partition)s): a rebalance, or
        a new generation. The Python processor's cache goes too."""
        parts = None if partitions is None else list(partitions)
        self.proc.forget(parts)
        if parts is None:
            self.folder.forget()
            for d in self._per_session:
                d.clear()
            self._python.clear()
            return
        for sid in self.folder.forget_partitions({p for _, p in parts}):
            self._forget_py(sid)


def partition_of(tp: str, topic: str) -> int | None:
    """The partition of a ``topic:partition`` name when it is of ``topic``."""
    t, _, p = tp.rpartition(":")
    return int(p) if t == topic else None


def is_of(r: Record, sid: str, pipeline: ReaderPipeline) -> bool:
    """Whether record ``r`` decodes to an event of session ``sid``."""
    d = pipeline.decode(r)
    return not isinstance(d, Undecodable) and d.session_id == sid


__all__ = ["NATIVE_UNITS", "FoldState", "is_of", "partition_of"]
