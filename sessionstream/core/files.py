"""Files that appear whole or not at all (standard library only).

A temporary file in the target's directory is written and fsynced, then renamed over
the target (``write_atomically``) or linked to it only if it is absent
(``create_if_absent``). ``private``: the file is 0600 and every directory created on
the way 0700 (data keys, legal holds): ``mkdir(parents=True, mode=…)`` would give the
mode to the last directory only.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def _staged(target: Path, data: bytes, private: bool) -> Iterator[str]:
    """The path of a synced temporary copy of ``data`` beside ``target``; removed after."""
    if private:
        make_private_dirs(target.parent)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
    try:
        if private:
            os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        yield tmp
    finally:
        Path(tmp).unlink(missing_ok=True)


def make_private_dirs(path: Path) -> None:
    """Create ``path`` and each missing parent as 0700 (an existing one is left as it is)."""
    missing = []
    here = Path(path)
    while not here.is_dir():
        missing.append(here)
        if here.parent == here:
            break
        here = here.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=0o700)
        except FileExistsError:
            continue
        os.chmod(directory, 0o700)  # exactly 0700, whatever the umask


def write_atomically(target: Path, data: bytes, *, private: bool = False) -> None:
    """Write ``data`` to ``target`` so readers see all of it or nothing."""
    with _staged(target, data, private) as tmp:
        os.replace(tmp, target)


def create_if_absent(target: Path, data: bytes, *, private: bool = False) -> bool:
    """Create ``target`` with ``data`` unless it exists; True if this call created it
    (an atomic create: a concurrent loser finds the winner's whole file)."""
    with _staged(target, data, private) as tmp:
        try:
            os.link(tmp, target)
        except FileExistsError:
            return False
        return True
