"""What every ``sessionstream`` command shares: the process's Settings and the exit codes.

A leaf module (the core and click only), so the edges' command modules (``producers.cli``,
``streams.cli``, ``dashboard.cli``, ``streams.diagnose``) can use it too.

- :func:`settings` returns the process's one :class:`Settings`, built from the
  environment on first use (offline commands never build it, so a bad variable cannot
  break them) and kept on the root click context; a :class:`SettingsError` exits 2.
- :func:`command_error` is the one map from an error to an exit status, used by every
  command (docs/cli.md, "Exit status"):

  ====  ==================================================================
  0     success
  1     a runtime failure (the message says what failed and what to do)
  2     usage or bad input: an option, a file, an id, a variable's shape
  3     a server is unreachable: Kafka, Redis (start them with ``sessionstream up``)
  ====  ==================================================================
"""

from __future__ import annotations

import sys
from enum import IntEnum
from typing import NoReturn

import click

from sessionstream.core.errors import (
    ForkError,
    InvariantViolation,
    LogFileError,
    SessionStreamError,
)
from sessionstream.core.settings import Settings, SettingsError


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1
    BAD_INPUT = 2
    UNREACHABLE = 3


#: Errors of the core that mean the input (a file, an option, a variable) is wrong.
BAD_INPUT_ERRORS: tuple[type[BaseException], ...] = (
    SettingsError, LogFileError, ForkError, InvariantViolation)


def _unreachable_errors() -> tuple[type[BaseException], ...]:
    """The edges' errors for a server that does not answer (imported when needed)."""
    import redis

    from sessionstream.producers.errors import BrokerUnavailable, RedisUnavailable
    from sessionstream.streams.errors import SinkError

    return (BrokerUnavailable, RedisUnavailable, SinkError, redis.ConnectionError,
            redis.TimeoutError)


def exit_code_of(exc: BaseException) -> ExitCode:
    """The exit status an error ends a command with."""
    if isinstance(exc, click.ClickException):
        return ExitCode(exc.exit_code) if exc.exit_code in set(ExitCode) else ExitCode.FAILED
    if isinstance(exc, BAD_INPUT_ERRORS):
        return ExitCode.BAD_INPUT
    if isinstance(exc, _unreachable_errors()):
        return ExitCode.UNREACHABLE
    return ExitCode.FAILED


class CommandError(click.ClickException):
    """A one-line ``Error: ...`` and the exit status :func:`exit_code_of` gives."""

    def __init__(self, message: str, code: ExitCode = ExitCode.FAILED) -> None:
        super().__init__(message)
        self.exit_code = int(code)


def command_error(exc: BaseException, message: str | None = None) -> CommandError:
    """``raise command_error(exc) from exc``: the error as the command's exit."""
    return CommandError(message or str(exc), exit_code_of(exc))


def die(message: str, code: int = ExitCode.FAILED) -> NoReturn:
    """Print ``message`` on stderr and exit with ``code`` (commands that print their own
    prefix, e.g. ``refused:``, instead of click's ``Error:``)."""
    click.echo(message, err=True)
    sys.exit(code)


def bad_input(message: str) -> CommandError:
    return CommandError(message, ExitCode.BAD_INPUT)


def unreachable(message: str) -> CommandError:
    return CommandError(message, ExitCode.UNREACHABLE)


class _Runtime:
    """Holds the process's settings on the root click context (built on first use)."""

    def __init__(self) -> None:
        self._settings: Settings | None = None

    def settings(self) -> Settings:
        if self._settings is None:
            try:
                self._settings = Settings.from_env()
            except SettingsError as exc:
                raise bad_input(str(exc)) from exc
        return self._settings


def settings() -> Settings:
    """The process's settings (one per ``sessionstream`` invocation)."""
    ctx = click.get_current_context()
    root = ctx.find_root()
    if not isinstance(root.obj, _Runtime):
        root.obj = _Runtime()
    return root.obj.settings()


class GuardedGroup(click.Group):
    """A click group whose commands' uncaught SessionStreamErrors exit with the mapped status."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except SessionStreamError as exc:
            raise command_error(exc) from exc


__all__ = ["CommandError", "ExitCode", "GuardedGroup", "bad_input", "command_error", "die",
           "exit_code_of", "settings", "unreachable"]
