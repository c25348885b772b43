"""The ``-o/--output`` option of the offline commands, checked before any work is done.

An output into a folder that does not exist is bad input (exit 2, nothing written):
the folder is not created, because a mistyped path would silently scatter files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click


def check_output(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    """Refuse an output path whose folder is missing or is not a folder."""
    if value is None:
        return None
    folder = value.parent
    if not folder.exists():
        raise click.BadParameter(
            f"folder {str(folder)!r} does not exist: create it first (mkdir -p {folder})",
            ctx=ctx, param=param)
    if not folder.is_dir():
        raise click.BadParameter(f"{str(folder)!r} is not a folder", ctx=ctx, param=param)
    return value


def output_option(help_text: str) -> Any:
    """``-o/--output FILE``: a file in an existing folder (see :func:`check_output`)."""
    return click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
                        callback=check_output, help=help_text)
