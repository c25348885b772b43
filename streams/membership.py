"""The worker's consumer instance id: static group membership by default (ADR 0020).

With dynamic membership a SIGKILLed worker's partitions wait for the group's session
timeout before anyone folds them again (5.9-6.3 s measured, faust 10-12 s). A member
that rejoins under the same ``group.instance.id`` gets its partitions back at once, so
every worker has a stable one unless told otherwise (``Settings.worker_instance``):

- ``auto`` (the default): ``<host name>-<slot>``. The host name is the pod name in a
  Kubernetes StatefulSet (stable across restarts and rescheduling), the container id
  under Compose (stable across the container's restarts), the machine's name locally.
  The slot tells apart workers of one group on one host: the lowest free one, held by an
  exclusive lock on a file under ``<state dir>/workers/`` for the process's life (the
  kernel drops the lock when the process dies, so a restarted worker takes its old slot
  and so its old id);
- ``dynamic``: no instance id (the group's session timeout applies after a crash);
- any other value: that id, used as given (unique per replica: a second live member
  with the same id fences the first).
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from sessionstream.core.settings import WORKER_INSTANCE_AUTO, WORKER_INSTANCE_DYNAMIC, Settings

log = logging.getLogger("sessionstream.streams.membership")

#: Workers of one group on one host, at most (slots tried before giving up).
MAX_SLOTS = 256
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
#: The slot locks this process holds: kept open for its life (closing drops the lock).
_held: dict[tuple[Path, str], tuple[IO[bytes], str]] = {}


@dataclass(frozen=True)
class Membership:
    """The consumer's ``group.instance.id`` (None: dynamic membership) and where it
    came from, for the start-up log line."""

    instance_id: str | None
    source: str


def claim(settings: Settings, group: str, *, hostname: str | None = None,
          lock_dir: Path | None = None) -> Membership:
    """This process's membership in ``group`` (see the module docstring)."""
    chosen = settings.worker_instance
    if chosen == WORKER_INSTANCE_DYNAMIC:
        return Membership(None, "dynamic membership (setting)")
    if chosen != WORKER_INSTANCE_AUTO:
        return Membership(chosen, "setting")
    host = _UNSAFE.sub("-", hostname or socket.gethostname())[:200] or "host"
    where = lock_dir or settings.state_dir / "workers"
    if (where, group) in _held:
        return Membership(_held[(where, group)][1], "host name and slot")
    try:
        slot, handle = _lowest_free_slot(where, _UNSAFE.sub("_", group))
    except OSError as exc:
        log.warning("no slot lock under %s (%s): dynamic group membership, a restart after "
                    "a crash waits for the session timeout; set a writable state dir or "
                    "the worker instance setting", where, exc.strerror or exc)
        return Membership(None, "dynamic membership (no slot lock)")
    instance = f"{host}-{slot}"
    _held[(where, group)] = (handle, instance)
    return Membership(instance, "host name and slot")


def _lowest_free_slot(where: Path, group: str) -> tuple[int, IO[bytes]]:
    where.mkdir(parents=True, exist_ok=True)
    for slot in range(MAX_SLOTS):
        handle = (where / f"{group}.{slot}.lock").open("ab")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        os.set_inheritable(handle.fileno(), False)  # a child must not keep the slot
        return slot, handle
    raise OSError(f"all {MAX_SLOTS} worker slots of group {group} are held on this host")


def release(settings: Settings, group: str, *, lock_dir: Path | None = None) -> None:
    """Give the slot back (tests; a process's exit does the same)."""
    held = _held.pop((lock_dir or settings.state_dir / "workers", group), None)
    if held is not None:
        held[0].close()
