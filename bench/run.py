"""The benchmark set in one session, then one table of ratios (``make bench``).

    PYTHONPATH=. python bench/run.py [--quick] [--only streams,producer,...] [--baseline DIR]

Runs each bench below as its own process (its lines are printed as they come), each
appending its result rows to one file, then prints ONE table: each measure, its baseline
from the same run, the figure the target is about (a ratio, or seconds / k events/s
where the target is absolute), the target and whether it was met. ``--quick``
(``make bench-quick``) sizes everything down to finish in under 5 minutes on a 2-core
box; its figures are marked quick (a short raw read measures start-up as much as
reading). After each bench it prints what else used the machine meanwhile (the share of
CPU time waiting on the disk or taken by the host, and Redis' background saves, which
write its whole dataset beside the benches) and marks a bench over 10 % disturbed.
``--baseline DIR`` (``make bench BASELINE=DIR``): a checkout of another commit, installed
(``git worktree add DIR <commit> && make -C DIR install``); the streams bench runs that
commit's worker and replays on the same topic, interleaved with this one's, and the
table shows both. Run by hand against the local servers, never by ``make test`` or CI:
the figures depend on the machine and its load, which the header prints.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.results import Result, load

HERE = Path(__file__).resolve().parent

#: name -> (the full run's arguments, the quick run's)
BENCHES: dict[str, tuple[list[str], list[str]]] = {
    "streams": ([], ["--quick", "--seconds", "5"]),
    "producer": (["--no-flush"], ["--events", "2000", "--sessions", "40", "--append", "native",
                                  "--rounds", "3", "--no-flush"]),
    "resume": ([], ["--session-events", "2000", "--others", "100000"]),
    "delta": (["--native-only"], ["--native-only", "--events", "20000", "--window", "30"]),
    "restart": ([], ["--engines", "kafka", "--rounds", "3"]),
    "scale": ([], ["--quick"]),
    "frameworks": ([], ["--quick"]),
    "memory": ([], ["--quick", "--sizes", "100,2000"]),
}


#: Above this share of CPU time waiting on the disk (or taken by the host) a bench's
#: figures are marked disturbed: its ratios are not quiet-box figures.
DISTURBED = 0.10


def cpu_ticks() -> tuple[int, int, int] | None:
    """(all, iowait, steal) ticks of every core so far (/proc/stat), None off Linux."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    return sum(fields), fields[4], fields[7]


def redis_forks() -> int | None:
    """How many times Redis forked so far (each an RDB snapshot or an AOF rewrite: a
    child that writes the whole dataset to disk beside the benches), None if unknown."""
    try:
        from sessionstream.core.settings import Settings
        from sessionstream.redisconn import from_settings

        client = from_settings(Settings.from_env(), socket_timeout=2)
        try:
            return int(client.info("stats")["total_forks"])
        finally:
            client.close()
    except Exception:  # no Redis, another profile: the line says unknown
        return None


class Disturbance:
    """What else used the machine while one bench ran: the share of CPU time spent
    waiting on the disk or taken by the host, and Redis' background saves."""

    def __init__(self) -> None:
        self._ticks, self._forks = cpu_ticks(), redis_forks()

    def end(self) -> tuple[str, bool]:
        """(a line to print, whether the figures are disturbed)."""
        ticks, forks = cpu_ticks(), redis_forks()
        parts, disturbed = [], False
        if ticks is not None and self._ticks is not None and ticks[0] > self._ticks[0]:
            total = ticks[0] - self._ticks[0]
            io, steal = ((ticks[i] - self._ticks[i]) / total for i in (1, 2))
            disturbed = io + steal > DISTURBED
            parts.append(f"disk wait {io:.0%} and host steal {steal:.0%} of CPU time")
        if forks is not None and self._forks is not None:
            parts.append(f"Redis background saves {forks - self._forks}")
        line = "; ".join(parts) or "machine state unknown"
        return line + (" (DISTURBED: not a quiet-box figure)" if disturbed else ""), disturbed


def table(rows: list[Result]) -> str:
    head = ("measure", "baseline (same run)", "value", "figure", "target", "met")
    body = [(r.measure, r.baseline, r.value, f"{r.ratio:,.2f}", r.target,
             ("yes" if r.met else "NO") + (f" ({r.note})" if r.note else "")) for r in rows]
    widths = [max(len(str(x[i])) for x in [head, *body]) for i in range(5)]
    lines = [" | ".join(str(c).ljust(w) for c, w in zip(row[:5], widths, strict=True))
             + " | " + row[5] for row in [head, *body]]
    lines.insert(1, "-+-".join("-" * w for w in widths) + "-+-----")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="the sized-down set (< 5 min)")
    ap.add_argument("--only", help=f"comma-separated subset of {', '.join(BENCHES)}")
    ap.add_argument("--baseline", help="a checkout of another commit, installed: the streams "
                                       "bench runs its worker and replays beside this one's")
    args = ap.parse_args()
    names = args.only.split(",") if args.only else list(BENCHES)
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        ap.error(f"unknown bench(es) {', '.join(unknown)}: choose from {', '.join(BENCHES)}")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=HERE.parent).stdout.strip() or "?"
    print(f"bench set ({'quick' if args.quick else 'full'}) at {commit}, "
          f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; {os.cpu_count()} cores, "
          f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(HERE.parent), os.environ.get("PYTHONPATH")]))}
    failed: list[str] = []
    disturbed: list[str] = []
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ssbench-") as tmp:
        results = Path(tmp) / "results.jsonl"
        for name in names:
            full, quick = BENCHES[name]
            argv = [sys.executable, str(HERE / f"bench_{name}.py"),
                    *(quick if args.quick else full), "--results", str(results),
                    *(["--baseline", args.baseline] if args.baseline and name == "streams"
                      else [])]
            print(f"\n== {name}: {' '.join(argv[2:])}", flush=True)
            t0 = time.monotonic()
            watch = Disturbance()
            rc = subprocess.run(argv, env=env, cwd=HERE.parent).returncode
            state, was = watch.end()
            if was:
                disturbed.append(name)
            print(f"== {name}: {'done' if rc == 0 else f'FAILED (exit {rc})'} in "
                  f"{time.monotonic() - t0:.0f} s; {state}", flush=True)
            if rc:
                failed.append(name)
        rows = load(results)
    print(f"\nresults ({'quick' if args.quick else 'full'} set, {commit}, "
          f"{time.monotonic() - t_start:.0f} s; load average now "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores):")
    print(table(rows))
    met = sum(r.met for r in rows)
    print(f"{met} of {len(rows)} targets met" + (f"; benches that failed: "
                                                  f"{', '.join(failed)}" if failed else ""))
    if disturbed:
        print(f"disturbed (over {DISTURBED:.0%} of CPU time waiting on the disk or the host): "
              f"{', '.join(disturbed)}: run again on a quiet machine before quoting them")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
