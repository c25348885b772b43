"""The framework backends beside the frameworks' own backends, one run (``make bench``).

    PYTHONPATH=. python bench/bench_frameworks.py [--quick] [--only sdk,adk,langgraph]
        [--rounds N] [--results FILE]

For each framework (bench/frameworks/): its workloads on the fleet store (real Kafka +
Redis started by ``sessionstream up``) and on the backends the framework ships (the
Agents SDK's ``SQLiteSession`` and ``RedisSession``; ADK's ``DatabaseSessionService``;
LangGraph's ``SqliteSaver``), measured in the same run; printed as p50 (min-max over
rounds) and as ratios ours / theirs against the targets of issue 33.
"""

from __future__ import annotations

import argparse
import importlib
import tempfile
import time
from pathlib import Path

from bench.frameworks import Ctx
from bench.results import record
from sessionstream.core.settings import Settings

FRAMEWORKS = ("sdk", "adk", "langgraph")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="sized down (minutes, not tens)")
    ap.add_argument("--only", help=f"comma-separated subset of {', '.join(FRAMEWORKS)}")
    ap.add_argument("--rounds", type=int, default=0, help="rounds per measure (default: "
                    "5, quick 3)")
    ap.add_argument("--results", help="append one JSON line per result to this file")
    args = ap.parse_args()
    names = args.only.split(",") if args.only else list(FRAMEWORKS)
    unknown = [n for n in names if n not in FRAMEWORKS]
    if unknown:
        ap.error(f"unknown framework(s) {', '.join(unknown)}: choose from "
                 f"{', '.join(FRAMEWORKS)}")
    with tempfile.TemporaryDirectory(prefix="ssbench-fw-") as tmp:
        ctx = Ctx(Settings.from_env(), args.quick, args.rounds or (3 if args.quick else 5),
                  Path(tmp))
        try:
            for name in names:
                try:
                    module = importlib.import_module(f"bench.frameworks.{name}")
                except ModuleNotFoundError as exc:
                    print(f"== {name}: not benchmarked ({exc})", flush=True)
                    continue
                print(f"== {name}", flush=True)
                t0 = time.monotonic()
                for result in module.run(ctx):
                    print(f"  {result.measure}: {result.value}  [{result.ratio:.2f} "
                          f"against {result.target}, baseline {result.baseline}]",
                          flush=True)
                    record(args.results, result)
                print(f"== {name}: {time.monotonic() - t0:.0f} s", flush=True)
        finally:
            ctx.cleanup()


if __name__ == "__main__":
    main()
