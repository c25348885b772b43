"""Long-term memory: search latency and recall@5 per namespace size, write and extraction
throughput (docs/adr/0030), each beside a baseline measured in the same run.

    PYTHONPATH=. python bench/bench_memory.py [--sizes 100,10000] [--writes 200] [--no-fleet]

- **Search**: a labelled corpus written here (40 memories, each with two paraphrased
  queries that share few words with it) hidden among generated distractors up to the
  namespace size. p50/p99 of a hybrid query on the reader's index (BM25 + numpy exact
  vectors, fused), against the core's pure-Python reference (the same BM25, the core's
  ``VectorIndex``) over the same state; recall@5 of hybrid, lexical and vector ranking
  with the default hashing embedder (it matches words and spellings, not meanings).
- **Writes**: ``MemoryClient.propose`` through the fleet backend (sealed, produced with
  acks=all and flushed, folded into the namespace row before it returns) against the raw
  append of the same records (produce + flush only), and the in-process backend.
- **LangGraph's store** on the fleet beside ``SqliteStore`` (what a LangGraph user picks
  otherwise), same operations, same run: put, get, filtered search, a batch of 100 puts,
  100 puts from 8 threads.
- **Extraction**: the offline pattern extractor over generated sessions (turns/s),
  proposing into the in-process backend, and into the fleet with ``--fleet-extract``.
"""

from __future__ import annotations

import argparse
import random
import time
import uuid
from pathlib import Path
from typing import Any

from bench.results import Result, record
from sessionstream.core.events import Draft
from sessionstream.core.memory import Actor, Role
from sessionstream.core.memory.extract import PatternModel
from sessionstream.core.memory.search import Embedder, VectorIndex, fuse
from sessionstream.integrations.memory import InMemoryBackend, MemoryClient, Searcher
from sessionstream.integrations.memory_embed import ModelUnavailable, embedder_for
from sessionstream.integrations.memory_extract import extract_session
from sessionstream.integrations.store import MemoryStore

#: (memory, two paraphrased queries): a user's memories and how a later turn asks.
CORPUS: list[tuple[str, str, str]] = [
    ("Prefers a window seat on long-haul flights", "where does she like to sit on a plane",
     "seat choice for flights"),
    ("Allergic to peanuts and tree nuts", "food allergies", "can he eat nuts"),
    ("Lives in Lyon, near the Croix-Rousse", "which city is home", "where does the user live"),
    ("Works as a radiologist at the university hospital", "what is her job",
     "occupation and employer"),
    ("Always answer in formal German", "language for replies", "how should answers be written"),
    ("Has two cats named Miso and Tofu", "pets at home", "names of the cats"),
    ("Vegetarian since 2015, eats fish sometimes", "diet restrictions", "does she eat meat"),
    ("Runs a marathon every spring", "sports and fitness habits", "does he do running races"),
    ("Prefers short bullet-point summaries", "format of summaries",
     "how long should answers be"),
    ("Birthday is on 14 March", "when is his birthday", "date of birth"),
    ("Takes the 8:12 train to work", "commute to the office", "which train in the morning"),
    ("Uses a standing desk and a split keyboard", "office setup", "keyboard preference"),
    ("Daughter Emma starts school in September", "children and school",
     "when does the kid start school"),
    ("Dislikes phone calls, prefers email", "how to contact him", "best way to reach her"),
    ("Plays the cello in a community orchestra", "musical instrument", "hobbies with music"),
    ("Favourite cuisine is Sichuan food", "what food does she enjoy most", "spicy dishes"),
    ("Needs wheelchair access at venues", "accessibility needs", "mobility requirements"),
    ("Speaks Portuguese and some Japanese", "languages spoken", "does he know Japanese"),
    ("Budget for hotels is 150 euros a night", "hotel price limit",
     "how much to spend on lodging"),
    ("Is learning Rust in the evenings", "programming language being studied",
     "what is he learning"),
    ("Drinks decaf after 2pm", "coffee habits", "caffeine in the afternoon"),
    ("Car is a blue 2018 Toyota Prius", "what vehicle does she drive", "car model"),
    ("Afraid of heights, avoids balconies", "phobias", "room on a high floor"),
    ("Meets the team every Tuesday at 10", "weekly meeting time", "team standup schedule"),
    ("Reads mostly science fiction novels", "favourite books", "what genre does he read"),
    ("Prefers aisle seats at the theatre", "theatre seating", "where to sit at a show"),
    ("Time zone is Pacific time", "which timezone", "local time of the user"),
    ("Favourite colour is dark green", "colour he likes", "preferred colour"),
    ("Has a gluten intolerance", "can she eat bread", "wheat and gluten"),
    ("Wants invoices sent to accounting@example.org", "where to send bills",
     "invoice email address"),
    ("Owns a vintage Leica camera", "photography gear", "which camera"),
    ("Studies part-time for an MBA", "education in progress", "business school"),
    ("Loyalty number with the airline is AF-99812", "frequent flyer number",
     "airline membership id"),
    ("Prefers Linux over macOS", "operating system preference", "which OS"),
    ("Climbs at the bouldering gym on weekends", "weekend activities", "climbing hobby"),
    ("Mother's name is Ingrid", "name of her mom", "parents"),
    ("Keeps kosher", "religious dietary rules", "meat and dairy"),
    ("Hates being called by a nickname", "how to address him", "nicknames"),
    ("Moving to Berlin in June", "relocation plans", "new city next summer"),
    ("Uses metric units", "miles or kilometres", "units of measure"),
]

_SUBJECTS = ["apples", "trains", "jazz", "chess", "tennis", "opera", "gardens", "maps",
             "stamps", "tea", "rivers", "bridges", "poetry", "films", "bikes", "boats",
             "clocks", "maths", "birds", "wine", "cheese", "mountains", "deserts", "coins"]
_VERBS = ["likes", "collects", "studies", "photographs", "writes about", "teaches",
          "visits", "reviews", "sketches", "restores"]
_WHEN = ["on Sundays", "in winter", "since 2011", "with friends", "at night", "every month",
         "during holidays", "after work", "as a child", "in Portugal"]


def distractors(n: int, rnd: random.Random) -> list[str]:
    out = []
    for i in range(n):
        out.append(f"{rnd.choice(_VERBS).capitalize()} {rnd.choice(_SUBJECTS)} "
                   f"{rnd.choice(_WHEN)} (note {i})")
    return out


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


class Reference:
    """The core's pure-Python search over the same state (the baseline)."""

    def __init__(self, searcher: Searcher, embedder: Embedder) -> None:
        self.bm25 = searcher.bm25
        self.embedder = embedder
        self.vectors = VectorIndex(embedder.dims)
        for memory_id, v in searcher.versions.items():
            self.vectors.add(memory_id, embedder.embed([str(v.content)]))

    def search(self, query: str, k: int) -> list[str]:
        hits = fuse([self.bm25.search(query, k),
                     self.vectors.search(self.embedder.embed([query])[0], k)], k)
        return [h.id for h in hits]


def bench_search(size: int, rounds: int, results: str | None, embedder_name: str) -> None:
    rnd = random.Random(size)
    embedder = embedder_for(embedder_name)
    mem = MemoryClient(InMemoryBackend("bench"), Actor(Role.OPERATOR, "bench",
                                                       tenant="bench"), embedder=embedder)
    ns = mem.namespace(None, owner="ada")
    targets = {}
    texts = [c[0] for c in CORPUS] + distractors(max(0, size - len(CORPUS)), rnd)
    rnd.shuffle(texts)
    t0 = time.perf_counter()
    for text in texts:
        v = mem.propose(text, kind="fact", namespace=ns)
        targets[text] = v.ref.id
    write_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    searcher = mem.searcher(ns)
    build_s = time.perf_counter() - t0
    queries = [(q, targets[m]) for m, q1, q2 in CORPUS for q in (q1, q2)]
    recall: dict[str, float] = {}
    for mode in ("hybrid", "lexical", "vector"):
        found = sum(1 for q, want in queries
                    if want in [v.ref.id for v, _ in searcher.search(q, 5, mode=mode)])
        recall[mode] = found / len(queries)
    ours: list[float] = []
    base: list[float] = []
    ref = Reference(searcher, embedder)
    agree = 0
    for _ in range(rounds):
        for q, _want in queries:
            t = time.perf_counter()
            got = [v.ref.id for v, _ in searcher.search(q, 5)]
            ours.append(time.perf_counter() - t)
            t = time.perf_counter()
            want = ref.search(q, 5)
            base.append(time.perf_counter() - t)
            agree += got == want
    p50, p99 = pct(ours, 0.5) * 1e3, pct(ours, 0.99) * 1e3
    b50, b99 = pct(base, 0.5) * 1e3, pct(base, 0.99) * 1e3
    print(f"namespace of {size:>6}, {embedder_name} embedder: "
          f"search p50 {p50:.3f} ms, p99 {p99:.3f} ms "
          f"(core pure-Python reference p50 {b50:.3f} ms, p99 {b99:.3f} ms: "
          f"{b50 / p50:.1f}x); same top 5 as the reference in {agree}/{len(ours)} queries; "
          f"recall@5 hybrid {recall['hybrid']:.2f}, lexical {recall['lexical']:.2f}, "
          f"vector {recall['vector']:.2f}; index built in {build_s * 1e3:.0f} ms; "
          f"{size} proposals in process {size / write_s:.0f}/s")
    record(results, Result("memory", f"search p50 at {size} memories ({embedder_name})",
                           "core pure Python",
                           f"{p50:.3f} ms", round(b50 / p50, 2), ">= 1x",
                           f"p99 {p99:.3f} ms, reference {b50:.3f}/{b99:.3f} ms"))
    record(results, Result("memory", f"recall@5 hybrid at {size} ({embedder_name})", "",
                           f"{recall['hybrid']:.2f}", recall["hybrid"], ">= 0.5",
                           f"lexical {recall['lexical']:.2f}, vector {recall['vector']:.2f}"))


def bench_fleet_writes(n: int, results: str | None, tmp: Path) -> None:
    from sessionstream.core.settings import Settings
    from sessionstream.governance.keys import FileKeyStore
    from sessionstream.integrations.memory import FleetBackend
    from sessionstream.producers.memory_log import encode_op
    from sessionstream.producers.topics import admin_client, ensure_topics, tenant_topics

    s = Settings.from_env()
    import dataclasses

    s = dataclasses.replace(s, tenant="benchmem", key_prefix=f"bench-{uuid.uuid4().hex[:8]}")
    ensure_topics(admin_client(s.kafka_bootstrap, s.kafka_security()), tenant_topics(s))
    store = FileKeyStore(tmp / "keys", cache_ttl_s=2)
    backend = FleetBackend(s, store, encryption=True)
    mem = MemoryClient(backend, Actor(Role.AGENT, "bench", tenant=s.tenant, user="ada"))
    mem.propose("warm-up", kind="note")
    t0 = time.perf_counter()
    for i in range(n):
        mem.propose(f"memory number {i} about {_SUBJECTS[i % len(_SUBJECTS)]}", kind="note",
                    sources=[(f"s{i % 17}", [i])])
    ours = n / (time.perf_counter() - t0)
    ns = mem.namespace()
    from sessionstream.core.memory import Draft as MDraft
    from sessionstream.core.memory import Extractor, Method, Propose, Source

    values = [encode_op(Propose(op_id=str(uuid.uuid4()), namespace=ns, time=1,
                                actor=mem._ref(), memory_id=str(uuid.uuid4()),
                                draft=MDraft(kind="note", content=f"raw {i}",
                                             sources=(Source("s", (i,)),),
                                             extractor=Extractor(Method.EXPLICIT, "b"))),
                        backend.sealer) for i in range(n)]
    t0 = time.perf_counter()
    for v in values:
        backend.log.append(ns, v)
    raw = n / (time.perf_counter() - t0)
    print(f"fleet writes: {ours:.0f} proposals/s (sealed, acked by all replicas, folded "
          f"into the row before returning) vs {raw:.0f}/s raw produce+flush of the same "
          f"records: {ours / raw:.2f}x")
    record(results, Result("memory", "fleet proposals/s", "raw produce+flush",
                           f"{ours:.0f}/s", round(ours / raw, 2), ">= 0.3x",
                           f"raw {raw:.0f}/s"))
    backend.close()


def _ms(fn: Any) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1e3


def _store_figures(st: Any, n: int) -> dict[str, float]:
    """p50 of put, get and a filtered search over ``n`` items; one batch of 100 puts;
    100 puts from 8 threads (ms)."""
    import statistics
    from concurrent.futures import ThreadPoolExecutor

    from langgraph.store.base import PutOp

    run = uuid.uuid4().hex[:6]
    ns = ("users", run, "prefs")
    texts = [f"{_SUBJECTS[i % len(_SUBJECTS)]} {i}" for i in range(n)]
    puts = [_ms(lambda i=i: st.put(ns, f"k{i}", {"text": texts[i]})) for i in range(n)]
    gets = [_ms(lambda i=i: st.get(ns, f"k{i}")) for i in range(n)]
    finds = [_ms(lambda i=i: st.search(ns, filter={"text": texts[i]})) for i in range(n)]
    batch = _ms(lambda: st.batch([PutOp(("users", run, "bulk"), f"b{i}", {"v": i})
                                  for i in range(100)]))
    with ThreadPoolExecutor(8) as pool:
        threads = _ms(lambda: list(pool.map(
            lambda i: st.put(("users", run, "par"), f"p{i}", {"v": i}), range(100))))
    return {"put": statistics.median(puts), "get": statistics.median(gets),
            "search": statistics.median(finds), "batch": batch, "threads": threads}


def bench_langgraph_store(n: int, results: str | None, tmp: Path) -> None:
    """LangGraph's store on the fleet beside the one a LangGraph user picks otherwise,
    ``SqliteStore`` (its own package), the same operations in the same run."""
    import dataclasses
    import sqlite3

    from langgraph.store.sqlite import SqliteStore

    from sessionstream.core.settings import Settings
    from sessionstream.governance.keys import FileKeyStore
    from sessionstream.integrations.langgraph_store import SessionstreamStore
    from sessionstream.integrations.memory import FleetBackend
    from sessionstream.producers.topics import admin_client, ensure_topics, tenant_topics

    s = dataclasses.replace(Settings.from_env(), tenant="benchmem",
                            key_prefix=f"bench-{uuid.uuid4().hex[:8]}")
    ensure_topics(admin_client(s.kafka_bootstrap, s.kafka_security()), tenant_topics(s))
    backend = FleetBackend(s, FileKeyStore(tmp / "lg-keys", cache_ttl_s=2), encryption=True)
    conn = sqlite3.connect(tmp / "store.db", check_same_thread=False, isolation_level=None)
    lite = SqliteStore(conn)
    lite.setup()
    stores = {"SqliteStore": lite, "sessionstream": SessionstreamStore(backend)}

    figures = {name: _store_figures(st, n) for name, st in stores.items()}
    ours, base = figures["sessionstream"], figures["SqliteStore"]
    for what, label in (("put", "put p50"), ("get", "get p50"),
                        ("search", "search (filter) p50"), ("batch", "batch of 100 puts"),
                        ("threads", "100 puts from 8 threads")):
        ratio = ours[what] / base[what] if base[what] else float("inf")
        print(f"langgraph store {label}: {ours[what]:.2f} ms vs SqliteStore "
              f"{base[what]:.2f} ms: {ratio:.1f}x")
        record(results, Result("memory", f"langgraph store {label}", "SqliteStore",
                               f"{ours[what]:.2f} ms", round(ratio, 2), "",
                               f"SqliteStore {base[what]:.2f} ms; ours sealed, on Kafka + "
                               "Redis, read by every process at once"))
    backend.close()
    conn.close()


def bench_extraction(sessions: int, results: str | None) -> None:
    store = MemoryStore()
    rnd = random.Random(7)
    statements = ["I prefer {x} in the morning.", "My favourite {x} is the blue one.",
                  "Please always mention {x}.", "I live in {x}.", "I really like {x}.",
                  "Can you book a table for two?", "What's the weather like?"]
    for i in range(sessions):
        h = store.open(f"ex-{i}")
        drafts: list[Draft] = []
        for _t in range(4):
            text = rnd.choice(statements).format(x=rnd.choice(_SUBJECTS))
            drafts += [Draft("turn/start", {}), Draft("user/message", {"content": text}),
                       Draft("step/start", {}), Draft("assistant/message", {"content": "ok"}),
                       Draft("step/end", {}), Draft("turn/end", {"reason": "completed"})]
        h.append_many(drafts)
    logs = {sid: store.open(sid).events() for sid in (f"ex-{i}" for i in range(sessions))}
    mem = MemoryClient(InMemoryBackend("bench"), Actor(Role.EXTRACTOR, "x", tenant="bench",
                                                       user="ada"))
    t0 = time.perf_counter()
    placed = 0
    for sid, events in logs.items():
        placed += len(extract_session(mem, sid, events, PatternModel()))
    took = time.perf_counter() - t0
    turns = sessions * 4
    print(f"extraction: {turns / took:.0f} turns/s ({placed} memories proposed from "
          f"{turns} turns of {sessions} sessions, pattern model, in-process backend)")
    record(results, Result("memory", "extraction turns/s (in process)", "",
                           f"{turns / took:.0f}/s", round(turns / took, 1), ">= 100 /s",
                           f"{placed} proposed"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100,10000")
    ap.add_argument("--embedders", default="hashing,model",
                    help="Search with each (model: the memory-model extra; skipped with a "
                         "note when it is not installed).")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--store-ops", type=int, default=100,
                    help="Operations per LangGraph-store figure (beside SqliteStore).")
    ap.add_argument("--writes", type=int, default=200)
    ap.add_argument("--sessions", type=int, default=500)
    ap.add_argument("--no-fleet", action="store_true", help="Skip the Kafka + Redis part.")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--results")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.writes, args.sessions, args.store_ops = 2, 50, 100, 30
    for name in args.embedders.split(","):
        try:
            embedder_for(name)
        except ModelUnavailable as e:
            print(f"{name} embedder skipped: {e}")
            continue
        for size in (int(x) for x in args.sizes.split(",")):
            bench_search(size, args.rounds, args.results, name)
    bench_extraction(args.sessions, args.results)
    if not args.no_fleet:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            bench_fleet_writes(args.writes, args.results, Path(tmp))
            bench_langgraph_store(args.store_ops, args.results, Path(tmp))


if __name__ == "__main__":
    main()

