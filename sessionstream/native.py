"""The one bridge to the compiled extension, ``sessionstream._native`` (the Rust crate in
``native/``, built into the wheel by ``pip install``): the only module that imports it.

``ext`` is the extension module, or None when it cannot be imported; ``WHY_NOT`` then says
why and how to fix it, once for every caller. What crosses the boundary is typed by the
stub beside it (``sessionstream/_native.pyi``: named result types, no positional
tuples), which the type checker reads for every use of ``ext``; the extension is built
from the same tree, so every member the stub names is there when ``ext`` is.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the named types of the boundary, for annotations (_native.pyi)
    from sessionstream._native import (  # noqa: F401  (names callers annotate with)
        Appender,
        Folder,
        FoldOut,
        ManyAppended,
    )

INSTALL_HINT = ("reinstall sessionstream where Rust's cargo is on PATH (`pip install "
                "--force-reinstall sessionstream`, or `make install` in a checkout)")

WHY_NOT: str | None
try:
    import sessionstream._native as ext  # typed by _native.pyi
except ImportError as exc:  # pragma: no cover - depends on the install
    # None at run time; typed as the extension, so every caller checks available()
    # (or ``ext is not None``) before it touches a member
    ext = None  # type: ignore[assignment]
    WHY_NOT = (f"the native extension sessionstream._native cannot be imported ({exc}); "
               f"{INSTALL_HINT}")
else:
    WHY_NOT = None
    # The extension draws event ids from a buffer of random bytes: a forked child must
    # not reuse its parent's (as events.uuid4_ids drops its pieces).
    os.register_at_fork(after_in_child=ext.Appender.after_fork)


def available() -> bool:
    """Whether the extension is importable."""
    return ext is not None


_warned: set[str] = set()


def warn_fallback(log: logging.Logger, what: str, reason: str | None) -> None:
    """Log once per process and ``what`` that it runs the Python reference, why, and how to
    fix it (a silent fallback costs ~7x on the worker)."""
    if what in _warned:
        return
    _warned.add(what)
    log.warning("%s runs the Python reference fold, not the native one: %s", what,
                reason or WHY_NOT or "the native path cannot serve this configuration")


__all__ = ["INSTALL_HINT", "WHY_NOT", "available", "ext", "warn_fallback"]
