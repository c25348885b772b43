"""Compaction retention on the plainly worded corpus (run by hand, no servers).

    PYTHONPATH=. python bench/bench_compaction_retention.py [--size 24] [--json]

For each category of commitment planted in the corpus (``tests/fixtures/corpus.py``):
kept in the summary / shadowed by it; then token reduction of the whole surface and of
the shadowed run (the baseline is the same session's surface before the attempt).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

from tests.fixtures.corpus import CATEGORIES, corpus, measure


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=24)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    totals = {c: [0, 0] for c in CATEGORIES}
    outcomes: Counter[str] = Counter()
    sb = sa = rb = ra = 0
    lost: list[str] = []
    for case in corpus(args.size):
        r = measure(case)
        outcomes[r.outcome] += 1
        lost += [f"{r.name}: {x}" for x in r.lost]
        for c, (kept, total) in r.counts.items():
            totals[c][0] += kept
            totals[c][1] += total
        sb, sa, rb, ra = sb + r.surface_before, sa + r.surface_after, rb + r.run_before, \
            ra + r.run_after
    report = {"sessions": args.size, "outcomes": dict(outcomes),
              "retention": {c: {"kept": k, "shadowed": t} for c, (k, t) in totals.items()},
              "surface_tokens": {"before": sb, "after": sa, "reduction": round(1 - sa / sb, 3)},
              "run_tokens": {"before": rb, "after": ra, "reduction": round(1 - ra / rb, 3)},
              "lost": lost}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{args.size} sessions, outcomes {dict(outcomes)}")
    print("| category | kept / shadowed |\n|---|---|")
    for c, (k, t) in totals.items():
        print(f"| {c} | {k}/{t} |")
    print(f"surface tokens {sb} -> {sa} ({1 - sa / sb:.1%} smaller); "
          f"shadowed run {rb} -> {ra} ({1 - ra / rb:.1%} smaller)")
    for x in lost:
        print("LOST", x)


if __name__ == "__main__":
    main()
