"""What every ``sessionstream`` command shares: the process's Settings and the exit codes.

A leaf module (the core and click only), so the edges' command modules (``producers.cli``,
``streams.cli``, ``dashboard.cli``, ``streams.diagnose``) can use it too.

- :func:`settings` returns the process's one :class:`Settings`, built from the
  environment on first use (offline commands never build it, so a bad variable cannot
  break them) and kept on the root click context; a :class:`SettingsError` exits 2.
- :func:`command_errors` is the one map from an error to a command's message and exit
  status, wrapped around every command's body (``with command_errors(): ...``; the
  GuardedGroup applies the same map to what escapes); :func:`exit_code_of` gives the
  status (docs/cli.md, "Exit status"):

  ====  ==================================================================
  0     success
  1     a runtime failure (the message says what failed and what to do), and
        a server that answered but refused: credentials missing or wrong
        (``NOAUTH``, ``WRONGPASS``), a permission the ACLs do not grant
  2     usage or bad input: an option, a file, an id, a variable's shape
  3     a server is unreachable: Kafka, Redis (start them with ``sessionstream up``)
  ====  ==================================================================
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from enum import IntEnum
from typing import IO, Any, NoReturn

import click

from sessionstream.core.errors import (
    ForkError,
    InvariantViolation,
    LegalHold,
    LogFileError,
    SessionStreamError,
)
from sessionstream.core.settings import Env, Settings, SettingsError


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1
    BAD_INPUT = 2
    UNREACHABLE = 3


#: Errors of the core that mean the input (a file, an option, a variable) is wrong.
BAD_INPUT_ERRORS: tuple[type[BaseException], ...] = (
    SettingsError, LogFileError, ForkError, InvariantViolation)


def _bad_input_errors() -> tuple[type[BaseException], ...]:
    """BAD_INPUT_ERRORS and the edges' errors that mean the same (imported when needed)."""
    from sessionstream.governance.audit import SessionUnknown  # an id not in the log

    return (*BAD_INPUT_ERRORS, SessionUnknown)


def _redis_unreachable() -> tuple[type[BaseException], ...]:
    """The Redis client's own errors for a server that does not answer (a cluster client
    that reached no node raises RedisClusterException, which is no RedisError)."""
    import redis

    return (redis.ConnectionError, redis.TimeoutError, redis.exceptions.RedisClusterException)


def _refusals() -> tuple[type[BaseException], ...]:
    """The Redis client's errors for a server that answered and refused the client
    (redis-py makes an authentication failure a ConnectionError: it is not one)."""
    import redis

    return (redis.AuthenticationError, redis.exceptions.AuthenticationWrongNumberOfArgsError,
            redis.exceptions.NoPermissionError)


def refused(exc: BaseException) -> BaseException | None:
    """The server's refusal behind ``exc`` (itself or a cause, e.g. a writer's
    ``RedisUnavailable`` raised from a ``WRONGPASS``), or None."""
    kinds = _refusals()
    seen = 0
    cur: BaseException | None = exc
    while cur is not None and seen < 8:
        if isinstance(cur, kinds):
            return cur
        cur = cur.__cause__ or cur.__context__
        seen += 1
    return None


def _redis_errors() -> tuple[type[BaseException], ...]:
    """Every error of the Redis client (after those above: a refusal, e.g. NOPERM)."""
    import redis

    return (redis.RedisError,)


def _unreachable_errors() -> tuple[type[BaseException], ...]:
    """The edges' errors for a server that does not answer (imported when needed)."""
    import redis

    from sessionstream.producers.errors import BrokerUnavailable, RedisUnavailable
    from sessionstream.streams.errors import SinkError

    return (BrokerUnavailable, RedisUnavailable, SinkError, redis.ConnectionError,
            redis.TimeoutError, redis.exceptions.RedisClusterException)


def exit_code_of(exc: BaseException) -> ExitCode:
    """The exit status an error ends a command with."""
    if isinstance(exc, click.ClickException):
        return ExitCode(exc.exit_code) if exc.exit_code in set(ExitCode) else ExitCode.FAILED
    if isinstance(exc, _bad_input_errors()):
        return ExitCode.BAD_INPUT
    if refused(exc) is not None:  # answered: reachable, and refused
        return ExitCode.FAILED
    if isinstance(exc, _unreachable_errors()):
        return ExitCode.UNREACHABLE
    return ExitCode.FAILED


class CommandError(click.ClickException):
    """A one-line message on stderr (``Error: ...``, or another ``prefix``) and an exit
    status."""

    def __init__(self, message: str, code: ExitCode = ExitCode.FAILED, *,
                 prefix: str = "Error: ") -> None:
        super().__init__(message)
        self.exit_code = int(code)
        self.prefix = prefix

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"{self.prefix}{self.format_message()}", file=file, err=file is None)


def command_error(exc: BaseException, message: str | None = None) -> CommandError:
    """``raise command_error(exc) from exc``: the error as the command's exit (``message``
    instead of the error's own)."""
    if message is not None:
        return CommandError(message, exit_code_of(exc))
    if isinstance(exc, LogFileError):  # already "file:line: what", the place first
        return CommandError(str(exc), ExitCode.BAD_INPUT, prefix="")
    if isinstance(exc, LegalHold):  # a refusal, not a failure: the hold says why
        return CommandError(str(exc), exit_code_of(exc), prefix="refused: ")
    cause = refused(exc)
    if cause is not None and cause is not exc:  # "cannot reach" would mislead: it answered
        return CommandError(f"{exc} — {redis_refusal(cause)}", exit_code_of(exc))
    return CommandError(str(exc), exit_code_of(exc))


@contextmanager
def command_errors() -> Iterator[None]:
    """Around a command's body: our errors, and a Redis that does not answer (its address
    named when the command built its settings), end the command with one line on stderr
    and their exit status; no traceback. Anything else propagates."""
    try:
        yield
    except click.ClickException:
        raise
    except SessionStreamError as exc:
        raise command_error(exc) from exc
    except _refusals() as exc:  # before the unreachable ones: redis-py subclasses them
        raise CommandError(redis_refusal(exc, _redis_at())) from exc
    except _redis_unreachable() as exc:
        cause = refused(exc)  # a cluster client's "cannot be connected" after a refusal
        if cause is not None:
            raise CommandError(redis_refusal(cause, _redis_at())) from exc
        raise unreachable(f"cannot reach Redis{_redis_at()} ({exc}); start it with "
                          f"`sessionstream up` or set {Env.REDIS_URL}") from exc
    except _redis_errors() as exc:  # e.g. a script error
        raise CommandError(f"Redis{_redis_at()} refused the command: "
                           f"{type(exc).__name__}: {exc}") from exc


def redis_refusal(exc: BaseException, at: str = "") -> str:
    """The message for a Redis that refused the client (``at``: `` at <url>``)."""
    import redis

    if isinstance(exc, redis.AuthenticationError
                  | redis.exceptions.AuthenticationWrongNumberOfArgsError):
        return (f"Redis{at} refused the client's credentials ({type(exc).__name__}: {exc}); "
                f"connect as a user of your tenant: {Env.REDIS_URL}=redis://<user>:"
                "<password>@host:port/0 (`sessionstream acl env --role R` prints it)")
    return f"Redis{at} refused the command: {type(exc).__name__}: {exc}"


def _redis_at() -> str:
    """`` at <the Redis URL without its password>`` when the command built its settings."""
    from sessionstream.producers.errors import redacted_url

    built = _built_settings()
    return f" at {redacted_url(built.redis_url)}" if built is not None else ""


def die(message: str, code: int = ExitCode.FAILED) -> NoReturn:
    """Print ``message`` on stderr and exit with ``code``: a command's own message for a
    case it decides (e.g. ``error: no hold to release there``); errors raised go through
    :func:`command_errors`."""
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


def _built_settings() -> Settings | None:
    """The process's settings if a command built them already (never builds them)."""
    ctx = click.get_current_context(silent=True)
    runtime = ctx.find_root().obj if ctx is not None else None
    return runtime._settings if isinstance(runtime, _Runtime) else None


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


__all__ = ["CommandError", "ExitCode", "GuardedGroup", "bad_input", "command_error",
           "command_errors", "die", "exit_code_of", "redis_refusal", "refused", "settings",
           "unreachable"]
