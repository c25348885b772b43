"""``python -m streams.cli_main``: the streams commands alone (tests, before CLI wiring)."""

from __future__ import annotations

import click

from sessionstream.cli.context import GuardedGroup
from streams.cli import register


@click.group(cls=GuardedGroup)
def main() -> None:
    """sessionstream read side: worker, views, sessions, replay."""


register(main)

if __name__ == "__main__":
    main()
