"""Envelope codec speed vs a plain fastavro schemaless round trip of the same record.

Run by hand: ``python bench/bench_codec.py``. Prints events/s for both and the ratio
(envelope / plain; the target is >= 0.8). Both sides use the same parsed schema and
the same record; the envelope side also builds the record from an Event, frames it,
checks the fingerprint, parses and checks ``data`` and builds the Event back.

An Event renders its ``data`` text once and keeps it (so does a decoded one), so the
``envelope`` line re-encodes events whose text is known, as a relay or a second encode
would. ``envelope, first encode`` uses fresh copies each round: the producer's case,
where encode renders the text once.
"""

from __future__ import annotations

import io
import time

from fastavro import schemaless_reader, schemaless_writer

from sessionstream.core.codec import default_codec
from sessionstream.core.events import Writer, make_event

N = 20_000
ROUNDS = 5


def sample_events() -> list:
    """A mix shaped like a real session: small control events and larger payloads."""
    out = []
    for i in range(N):
        kind = i % 4
        if kind == 0:
            t, data = "step/start", {}
        elif kind == 1:
            t, data = "tool/call", {"call_id": f"c{i}", "name": "search",
                                    "arguments": {"query": "quarterly revenue", "limit": 20}}
        elif kind == 2:
            t, data = "tool/result", {"call_id": f"c{i}", "status": "ok",
                                      "content": "row " * 100, "operation_id": f"op-{i}"}
        else:
            t, data = "assistant/message", {"content": "done " * 30,
                                            "usage": {"input_tokens": 1200, "output_tokens": 80}}
        out.append(make_event(session_id="bench-session", seq=i,
                              event_id=f"00000000-0000-4000-8000-{i:012d}",
                              time=1_767_225_600_000 + i, type=t, data=data,
                              writer=Writer("node-1", 7), turn_id="t1", step_id="s1"))
    return out


def main() -> None:
    codec = default_codec()
    schema = codec.writer.parsed
    events = sample_events()
    records = []
    for e in events:  # the same record the codec writes, prepared once (not timed)
        j = e.to_json()
        j["data"] = e.data_json()
        records.append(j)

    def plain() -> None:
        for r in records:
            buf = io.BytesIO()
            schemaless_writer(buf, schema, r)
            buf.seek(0)
            schemaless_reader(buf, schema, None)

    from sessionstream.core.jsonvalue import canonical_dumps, loads_frozen

    datas = [e.data for e in events]

    def plain_with_json() -> None:
        # the plain round trip plus the JSON text handling `data` needs either way
        for r, d in zip(records, datas, strict=True):
            buf = io.BytesIO()
            r["data"] = canonical_dumps(d)
            schemaless_writer(buf, schema, r)
            buf.seek(0)
            loads_frozen(schemaless_reader(buf, schema, None)["data"])

    def envelope() -> None:
        enc, dec = codec.encode, codec.decode
        for e in events:
            dec(enc(e))

    fresh: list = []  # type: ignore[type-arg]

    def envelope_first_encode() -> None:
        enc, dec = codec.encode, codec.decode
        for e in fresh.pop():
            dec(enc(e))

    for e in events[:8]:
        assert codec.decode(codec.encode(e)) == e
    # copies without the cached text, made outside the timing: one list per call
    fresh.extend([e.replace(data=e.data) for e in events] for _ in range(ROUNDS + 1))
    fns = (("plain", plain), ("plain+json", plain_with_json), ("envelope", envelope),
           ("envelope, first encode", envelope_first_encode))
    for _, fn in fns:
        fn()  # warm up
    times: dict[str, list[float]] = {name: [] for name, _ in fns}
    for _ in range(ROUNDS):  # interleaved, so load from other processes hits all alike
        for name, fn in fns:
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    results = {name: min(ts) for name, ts in times.items()}
    for name, t in results.items():
        print(f"{name:22s} {N / t:12,.0f} round trips/s  ({t / N * 1e6:.2f} us each)")
    ratio = results["plain"] / results["envelope"]
    print(f"ratio envelope/plain throughput: {ratio:.2f}x (target >= 0.8x)")
    ratio_first = results["plain"] / results["envelope, first encode"]
    print(f"ratio envelope (first encode)/plain throughput: {ratio_first:.2f}x")
    ratio2 = results["plain+json"] / results["envelope"]
    print(f"ratio envelope/(plain + data JSON) throughput: {ratio2:.2f}x "
          "(the framing, checks and Event building alone)")


if __name__ == "__main__":
    main()
