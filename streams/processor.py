"""The projection processor: the batch cycle over the session log's fold.

``Processor`` wires the reader pipeline (``sessionstream.core.pipeline``) to the batch
cycle (:mod:`~sessionstream.streams.cycle`): the folder the ``fold`` setting picks
(:func:`folder_for`, the one place that chooses), the row codec both folders write with,
and the convergence of bumped ``state_version`` s between batches. The worker (both
engines) and replay drive it; none of them knows which folder folds.

The ``fold`` setting (``Settings.fold``): ``auto`` (native when the extension is installed
and the pipeline uses the built-in units and codec, else Python), ``native`` (required:
an error names the install command when it is missing) or ``python`` (the reference;
the default of a ``Processor`` built without the setting, as tests and tools build it).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from sessionstream import native
from sessionstream.core.pipeline import ReaderPipeline
from sessionstream.core.settings import Env
from sessionstream.streams.convergence import Convergence
from sessionstream.streams.cycle import BatchCycle
from sessionstream.streams.fold import Folder
from sessionstream.streams.fold_native import NativeFolder, NativeUnavailable, why_not
from sessionstream.streams.fold_python import PythonFolder
from sessionstream.streams.ports import DeadLetters, LogReader, Sink
from sessionstream.streams.session_row import RowSealer, SessionRowCodec

log = logging.getLogger("sessionstream.streams.worker")

FOLDS = ("auto", "native", "python")
INSTALL_HINT = f"{native.INSTALL_HINT}, or set {Env.FOLD}=python"


def folder_for(fold: str, reference: PythonFolder) -> Folder:
    """The folder the ``fold`` setting selects over ``reference`` (the Python folder,
    which the native one keeps as its reference)."""
    if fold not in FOLDS:
        raise NativeUnavailable(f"{Env.FOLD}={fold!r}: use " + ", ".join(FOLDS))
    if fold == "python":
        return reference
    reason = why_not(reference.pipeline)
    if reason is None:
        return NativeFolder(reference)
    if fold == "native":
        raise NativeUnavailable(f"native fold unavailable: {reason}; {INSTALL_HINT}")
    native.warn_fallback(log, "this worker/replay", f"{reason}; {INSTALL_HINT}")
    return reference


class Processor(BatchCycle):
    """Folds batches of one tenant's events topic into a sink (see the module)."""

    def __init__(
        self,
        *,
        pipeline: ReaderPipeline,
        sink: Sink,
        group: str,
        log_reader: LogReader | None = None,
        dead_letters: DeadLetters | None = None,
        generation: int | None = None,
        rows: RowSealer | None = None,
        fold: str = "python",
    ) -> None:
        self.pipeline = pipeline
        #: Seals content-bearing views/states with the session's keys (governance.rows);
        #: ``codec.chunk`` is the rows' chunk size (ADR 0013).
        self.codec = SessionRowCodec(pipeline.registry.units, rows)
        self.reference = PythonFolder(pipeline, sink, self.codec, log_reader)
        super().__init__(folder_for(fold, self.reference), sink=sink, group=group,
                         dead_letters=dead_letters, generation=generation)
        self.convergence = Convergence()

    # -- converging state_version bumps without new traffic (streams.convergence) ----
    def schedule_converge(self, topic: str, partitions: Iterable[int]) -> None:
        """After an assignment: rebuild the bumped units of the sessions of ``partitions``,
        in bounded steps (:meth:`converge_step`) between batches."""
        self.convergence.schedule(topic, partitions)

    @property
    def converging(self) -> bool:
        return self.convergence.active

    async def converge_step(self, limit: int = 64, concurrency: int = 4) -> int:
        """One bounded convergence step; returns the number of sessions rebuilt. Sessions
        the folder keeps are left alone (their next batch rebuilds them)."""
        if not self.converging:
            return 0
        async with self.lock:
            gen = await self.generation()
            return await self.convergence.step(self.sink, gen, self.group, self.reference,
                                               self.folder.holds, limit, concurrency)


__all__ = ["FOLDS", "INSTALL_HINT", "Processor", "folder_for"]
