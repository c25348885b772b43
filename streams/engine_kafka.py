"""The kafka engine: a confluent-kafka consumer-group loop driving a batch cycle.

Run: ``sessionstream worker --engine kafka`` (or ``python -m streams.engine_kafka``).
Why it exists: faust's own per-event machinery caps a worker at ~1–2k events/s
(docs/adr/0003-faust-limits.md); this loop hands librdkafka's batches straight to the
processor. Same guarantees as the faust worker:

- at-least-once: offsets are committed only after the batch's Redis writes returned;
  a crash re-reads at most the uncommitted batches, which the per-session offsets and
  the partition progress in Redis make harmless;
- on assignment each partition starts after its Redis progress (not the committed
  offset, which may lag), caches of moved partitions are dropped, and sessions whose
  unit ``state_version`` was bumped are rebuilt in bounded steps between batches;
- a processor bug ends the process (status 70) before the batch is committed.

The fold setting (``Settings.fold``: auto | native | python) picks the folder the batch
cycle drives (``streams.processor.folder_for``): the Rust extension (the default when it
is installed) or the Python reference; both keep the guarantees above. The loop folds a
batch while the previous one's write is in flight (ADR 0014).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import sys
import time
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from sessionstream import native
from sessionstream.core.errors import SchemaUnavailable
from sessionstream.core.pipeline import Record
from sessionstream.core.settings import Env, Settings
from sessionstream.producers.kafka_clients import KafkaClients
from sessionstream.streams.cycle import BatchCycle, InFlight
from sessionstream.streams.errors import TopicMissing
from sessionstream.streams.fold import MessageBatch
from sessionstream.streams.fold_native import NativeUnavailable
from sessionstream.streams.ports import BatchReport
from sessionstream.streams.trace import StageTrace

if TYPE_CHECKING:
    from sessionstream.streams.lag import LagProbe
    from sessionstream.streams.metrics import WorkerMetrics
from sessionstream.streams.worker import (
    EXIT_BUG,
    EXIT_CONFIG,
    EXIT_UNAVAILABLE,
    WorkerConfig,
    build_processor,
    check_topics,
    process_retrying,
)

#: The extension reads a batch's messages in one pass (streams.fold); None without it.
_scan = native.ext.scan_messages if native.available() else None

log = logging.getLogger("sessionstream.streams.worker")

#: The consumer group's session timeout (ms): see KafkaEngine.
SESSION_TIMEOUT_MS = 6_000
#: The cyclic collector's first threshold in the worker (Python's default: 700): each
#: batch allocates thousands of short-lived objects, and the passes over the caches
#: were ~6% of the worker's CPU (perf, 100k events; the replay does the same).
GC_THRESHOLD = 20_000


class KafkaEngine:
    """One consumer of the worker's group; ``run()`` until ``stop()``."""

    def __init__(self, cfg: WorkerConfig, processor: BatchCycle) -> None:
        self.cfg = cfg
        #: The batch cycle (built for the fold setting: NativeUnavailable for
        #: fold=native without the extension, raised where it is built)
        self.processor = processor
        self._stop = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.metrics: WorkerMetrics | None = None  # set when a metrics port is configured
        self.lag_probe: LagProbe | None = None  # with metrics: the as_of_seq lag
        self._probing: asyncio.Task[None] | None = None
        self._positioned: set[int] = set()  # partitions whose offsets lag the consumer knows
        #: partitions assigned or revoked by the last consume's callbacks (see below)
        self._rebalanced: list[tuple[str, int]] = []
        self._began: dict[InFlight, float] = {}  # batches in flight: when they began
        self._flight: InFlight | None = None  # a batch whose write is in flight (overlap)
        self.assigned: set[int] = set()
        self.trace = StageTrace.open(cfg.settings.trace_stages)
        if self.trace is not None:
            processor.on_stage = self.trace.mark
        extra: dict[str, Any] = {
            "auto.offset.reset": "earliest",
            # How long a crashed member holds its partitions. librdkafka heartbeats from
            # its own thread, so a long batch never misses one: the broker's minimum
            # (group.min.session.timeout.ms, 6 s) is safe. Processing time is bounded by
            # max.poll.interval.ms instead.
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": 1_000,
            "fetch.wait.max.ms": 5,  # latency: don't let the broker sit on small fetches
            "queued.min.messages": max(10_000, cfg.batch_max * 4),
            # Once that queue is full librdkafka waits this long before its next fetch
            # (1 s by default): a worker that folds faster than one refill drained the
            # queue and then sat through the backoff, ~40% of a catch-up's wall time.
            "fetch.queue.backoff.ms": 5,
        }
        if cfg.instance_id:
            # Static membership: a restarted worker with the same name gets its own
            # partitions back at once (no rebalance, no waiting for the session timeout).
            extra["group.instance.id"] = cfg.instance_id
        clients = KafkaClients.from_settings(cfg.settings)
        self.consumer = Consumer(clients.consumer(cfg.group, extra))

    def ready(self) -> bool:
        """Readiness: the group gave this worker partitions (the assignment read its
        progress from Redis, so Redis answered too)."""
        return bool(self.assigned)

    def _count_partitions(self) -> None:
        if self.metrics is not None:
            self.metrics.partitions.set(len(self.assigned))

    def _observe_lag(self) -> None:
        """Per assigned partition: the high watermark last fetched minus the consumer's
        position (both local to the client, no broker round trip)."""
        assert self.metrics is not None
        parts = [TopicPartition(self.cfg.topic, p) for p in sorted(self.assigned)]
        lags: dict[int, int] = {}
        try:
            for tp in self.consumer.position(parts):
                if tp.offset < 0:
                    continue  # nothing fetched yet: the lag probe measures it (below)
                _, high = self.consumer.get_watermark_offsets(tp, cached=True)
                if high >= 0:
                    lags[tp.partition] = high - tp.offset
        except KafkaException as exc:
            log.debug("lag not measured: %s", exc)
        self._positioned = set(lags)
        self.metrics.observe_lag(lags, self.assigned)

    def _maybe_probe(self) -> None:
        """Start a measurement of the as_of_seq lag when one is due (in the background:
        a slow broker answer never delays a batch)."""
        probe = self.lag_probe
        if probe is None or not self.assigned or not probe.due():
            return
        if self._probing is not None and not self._probing.done():
            return
        self._probing = asyncio.create_task(self._probe_seq_lag(probe))

    async def _probe_seq_lag(self, probe: LagProbe) -> None:
        assert self.metrics is not None
        try:
            lags = await probe.measure(sorted(self.assigned))
        except Exception as exc:  # a metric must never stop the fold
            log.warning("as_of_seq lag not measured: %s: %s", type(exc).__name__, exc)
            return
        self.metrics.observe_seq_lag({lag.partition: lag.seq for lag in lags
                                      if lag.seq is not None}, self.assigned)
        # A partition the consumer has no position in yet (nothing fetched: e.g. empty):
        # its offsets lag from the stored progress instead.
        self.metrics.observe_lag({lag.partition: lag.offsets for lag in lags
                                  if lag.partition not in self._positioned}, self.assigned)

    def stop(self) -> None:
        self._stop.set()

    # -- rebalance callbacks: run on the consume() thread while the loop awaits it ----
    # A batch's write may be in flight meanwhile (the native fold's overlap): the
    # callbacks only queue the partitions; the loop drops their cached sessions once
    # that batch is finished, and the consumed batch's records of partitions no longer
    # assigned (the new owner reads them from the progress in Redis).
    def _on_assign(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        assert self._loop is not None
        nums = [tp.partition for tp in parts]
        self.assigned |= set(nums)
        self._count_partitions()
        self._rebalanced += [(self.cfg.topic, p) for p in nums]
        keys = [f"{tp.topic}:{tp.partition}" for tp in parts]
        fut = asyncio.run_coroutine_threadsafe(
            self.processor.sink.load_progress(self.cfg.group, keys), self._loop)
        progress = fut.result()
        for tp, key in zip(parts, keys, strict=True):
            if key in progress:  # already in Redis: don't re-read what the commit missed
                tp.offset = progress[key] + 1
        consumer.assign(parts)
        self.processor.schedule_converge(self.cfg.topic, nums)
        log.info("assigned partitions %s (from Redis progress: %s)", nums,
                 {k: v + 1 for k, v in progress.items()})

    def _on_revoke(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        self.assigned -= {tp.partition for tp in parts}
        self._count_partitions()
        self._rebalanced += [(tp.topic, tp.partition) for tp in parts]
        consumer.unassign()

    # -- the loop ----------------------------------------------------------------------
    async def run(self) -> None:
        """:meth:`start`, then :meth:`step` until :meth:`stop`; the last batch finished."""
        self.start()
        try:
            while not self._stop.is_set():
                await self.step()
            await self.finish()
        finally:
            await self.close()

    @property
    def started(self) -> bool:
        return self._loop is not None

    def start(self) -> None:
        """Join the group (the partitions come with the next consumes)."""
        self._loop = asyncio.get_running_loop()
        self.consumer.subscribe([self.cfg.topic], on_assign=self._on_assign,
                                on_revoke=self._on_revoke, on_lost=self._on_revoke)

    async def step(self, timeout: float | None = None) -> int:
        """One consume and what follows it: the batch folded and written (with the
        overlap: in flight, the previous one finished), a rebalance's partitions
        forgotten, a convergence step. The records consumed."""
        cfg = self.cfg
        msgs = await asyncio.to_thread(self.consumer.consume, cfg.batch_max,
                                       cfg.batch_within if timeout is None else timeout)
        records = self._records(msgs)
        if self._rebalanced:
            await self.finish()
            parts, self._rebalanced = self._rebalanced, []
            self.processor.forget(parts)
            records = self._assigned_only(records)
        if records:
            if self.trace is not None:
                self.trace.consumed(records)
            self._flight = await self._process(records, self._flight)
            if self.trace is not None:
                self.trace.done()
        elif self._flight is not None:  # nothing new: finish the one in flight
            await self.finish()
        if self.metrics is not None:
            self._observe_lag()
            self._maybe_probe()
        if self.processor.converging:
            await self.finish()
            try:
                await self.processor.converge_step(cfg.converge_sessions)
            except SchemaUnavailable as exc:  # those sessions refold on their next event
                log.warning("state_version convergence step postponed: %s", exc)
        return len(records)

    async def finish(self) -> None:
        """Finish the batch in flight (if any) and commit it."""
        flight, self._flight = self._flight, None
        await self._drain(flight)

    async def close(self) -> None:
        """Leave the group (after :meth:`finish`: nothing is in flight)."""
        if self._probing is not None:
            self._probing.cancel()
        if self.lag_probe is not None:
            await asyncio.to_thread(self.lag_probe.close)
        await asyncio.to_thread(self.consumer.close)

    def _records(self, msgs: list[Message]) -> Sequence[Record]:
        """The batch's records: with the extension, the messages themselves (a Record
        is built only for one Python reads: streams.fold); errors are logged or raised."""
        if _scan is not None:
            good, errors, high, first = _scan(msgs)
            for i in errors:
                err = msgs[i].error()
                if err is not None:  # the scan says so
                    self._consumer_error(err)
            kept = msgs if not errors else [msgs[i] for i in good]
            return MessageBatch(kept, high, first)
        out = []
        for m in msgs:
            err = m.error()
            if err is not None:
                self._consumer_error(err)
                continue
            ts = m.timestamp()
            out.append(Record(m.topic() or "", m.partition() or 0, m.offset() or 0, m.key(),
                              m.value(), ts[1] if ts[0] else None))
        return out

    @staticmethod
    def _consumer_error(err: KafkaError) -> None:
        if err.code() == KafkaError._PARTITION_EOF:
            return
        if err.code() in (KafkaError._FENCED, KafkaError.FENCED_INSTANCE_ID) or (
                err.fatal() and "fenced" in err.str().lower()):
            # Another live member took this worker's group.instance.id (streams.membership):
            # it folds these partitions now; exiting is the only safe thing left.
            log.critical("this worker was fenced: another member of the group uses its "
                         "consumer instance id (%s); give each replica its own %s",
                         err.str(), Env.WORKER_INSTANCE)
            os._exit(EXIT_CONFIG)
        if err.fatal():
            raise KafkaException(err)
        log.warning("consumer error: %s", err)

    def _assigned_only(self, records: Sequence[Record]) -> Sequence[Record]:
        """The records of partitions still assigned (after a rebalance in the consume)."""
        if isinstance(records, MessageBatch):
            if all(p in self.assigned for p in records.high):
                return records
            kept = [m for m in records.messages if m.partition() in self.assigned]
            assert _scan is not None
            _, _, high, first = _scan(kept)
            return MessageBatch(kept, high, first)
        return [r for r in records if r.partition in self.assigned]

    @property
    def overlaps(self) -> bool:
        """Whether a batch is folded while the previous one's write is in flight (not
        while stage times are traced, which follow one batch)."""
        return self.trace is None

    async def _process(self, records: Sequence[Record], flight: InFlight | None
                       ) -> InFlight | None:
        """Fold and write ``records`` (with the overlap: fold them, finish ``flight``,
        send their write and return them in flight); commit what is finished."""
        began = time.monotonic()
        retried = self.metrics.schema_retries.inc if self.metrics is not None else None
        try:
            if self.overlaps:
                try:
                    previous, current = await self.processor.pipelined(records, flight)
                except SchemaUnavailable:
                    # the registry is down: finish the one in flight, then retry this
                    # batch on its own as the sequential path does
                    if flight is not None:
                        await self._drain(flight)
                    report = await process_retrying(self.processor, records,
                                                    on_retry=retried)
                    self._done(records, report, began)
                    return None
                if flight is not None and previous is not None:
                    self._done(flight.records, previous, self._began.pop(flight, began))
                if isinstance(current, BatchReport):
                    self._done(records, current, began)
                    return None
                self._began[current] = began
                return current
            report = await process_retrying(self.processor, records, on_retry=retried)
        except SchemaUnavailable as exc:
            log.critical("the schema registry stayed unavailable (%s); exiting before the "
                         "batch is acknowledged, a restart re-reads it", exc)
            os._exit(EXIT_UNAVAILABLE)
        except Exception:
            log.critical("projection processor failed; exiting so the batch is re-read:\n%s",
                         traceback.format_exc())
            os._exit(EXIT_BUG)
        self._done(records, report, began)
        return None

    async def _drain(self, flight: InFlight | None) -> None:
        """Finish the batch in flight (if any) and commit it."""
        if flight is None:
            return
        try:
            report = await self.processor.complete(flight)
        except Exception:
            log.critical("projection processor failed; exiting so the batch is re-read:\n%s",
                         traceback.format_exc())
            os._exit(EXIT_BUG)
        self._done(flight.records, report, self._began.pop(flight, time.monotonic()))

    def _done(self, records: Sequence[Record], report: BatchReport, began: float) -> None:
        """A batch is written: commit its offsets, observe it."""
        high: dict[tuple[str, int], int] = {}
        if isinstance(records, MessageBatch):
            high = {(self.cfg.topic, p): o for p, o in records.high.items()}
        else:
            for r in records:
                k = (r.topic, r.partition)
                high[k] = max(high.get(k, -1), r.offset)
        try:  # a lost commit only means a harmless re-read (progress is in Redis)
            self.consumer.commit(offsets=[TopicPartition(t, p, o + 1)
                                          for (t, p), o in high.items()], asynchronous=True)
        except KafkaException as exc:
            log.warning("offset commit failed (harmless, progress is in Redis): %s", exc)
        if self.metrics is not None:
            self.metrics.observe_batch(time.monotonic() - began, report.records,
                                       report.skipped, len(report.dead_letters),
                                       len(report.quarantined), report.conflicts)
            self.metrics.observe_verdicts(report.verdicts)
        if report.dead_letters or report.quarantined:
            log.warning("batch: %d records, %d dead letters, %d sessions quarantined",
                        report.records, len(report.dead_letters), len(report.quarantined))


async def _main(cfg: WorkerConfig) -> None:
    try:
        proc = build_processor(cfg, fold=cfg.settings.fold)
    except NativeUnavailable as exc:
        log.critical("%s", exc)
        sys.exit(EXIT_CONFIG)
    engine = KafkaEngine(cfg, proc)
    log.info("fold: %s", proc.folder.name)
    # What start-up built (modules, the registry, clients) lives to the end: out of the
    # collector's passes; the batches' garbage is collected less often, in larger passes.
    gc.collect()
    gc.freeze()
    gc.set_threshold(max(gc.get_threshold()[0], GC_THRESHOLD), *gc.get_threshold()[1:])
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, engine.stop)
    runner = None
    port = cfg.settings.metrics_port
    if port is not None:
        from sessionstream.streams.lag import probe_from_settings
        from sessionstream.streams.metrics import WorkerMetrics, observe_sink, start_server

        engine.metrics = WorkerMetrics(cfg.settings.tenant)
        observe_sink(engine.metrics, proc.sink)
        engine.lag_probe = probe_from_settings(cfg.settings, proc.sink, proc.pipeline,
                                               cfg.topic, cfg.group)
        runner = await start_server(engine.metrics, port, engine.ready)
        log.info("metrics on :%d (/metrics, /healthz, /readyz)", port)
    try:
        await engine.run()
    finally:
        if runner is not None:
            await runner.cleanup()


def main(settings: Settings) -> None:
    """Run the kafka engine with the process's settings (built by the entry point)."""
    logging.basicConfig(level=settings.log_level.upper(),
                        format="[%(asctime)s] [%(process)d] [%(levelname)s] %(message)s")
    cfg = WorkerConfig.from_settings(settings)
    try:
        check_topics(cfg)
    except TopicMissing as exc:
        log.critical("%s", exc)
        sys.exit(EXIT_CONFIG)
    asyncio.run(_main(cfg))


if __name__ == "__main__":  # a process entry point: it builds the settings
    main(Settings.from_env())
