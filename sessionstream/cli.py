"""The ``sessionstream`` command: the composition root. Edge modules are imported lazily."""

from __future__ import annotations

import click

from sessionstream import cli_infra


@click.group()
@click.version_option(package_name="sessionstream")
def main() -> None:
    """sessionstream: the session store for fleets of AI agents."""


cli_infra.register(main)


if __name__ == "__main__":
    main()
