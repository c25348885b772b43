"""One error → exit-status map for every command (docs/cli.md, "Exit status")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pytest
import redis
from click.testing import CliRunner

from sessionstream.cli.context import (
    ExitCode,
    GuardedGroup,
    command_error,
    command_errors,
    exit_code_of,
    settings,
)
from sessionstream.cli.main import main
from sessionstream.core.errors import (
    InvariantViolation,
    LegalHold,
    LogFileError,
    SessionStreamError,
    SummarizerError,
)
from sessionstream.core.settings import Settings, SettingsError
from sessionstream.governance.audit import SessionUnknown
from sessionstream.producers.errors import BrokerUnavailable, RedisUnavailable
from sessionstream.streams.errors import SinkError

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "lab_two_step.jsonl"
#: Nothing listens on port 1 of the loopback: a connection is refused at once.
DEAD_REDIS = "redis://127.0.0.1:1/0"


@pytest.mark.parametrize(("exc", "code"), [
    (SettingsError("SESSIONSTREAM_TENANT='X' is not a valid tenant"), ExitCode.BAD_INPUT),
    (LogFileError("f.jsonl", 3, "not JSON"), ExitCode.BAD_INPUT),
    (InvariantViolation("seq-contiguous", "todo/add", 4, "expected 3"), ExitCode.BAD_INPUT),
    (click.UsageError("no such option"), ExitCode.BAD_INPUT),
    (BrokerUnavailable("metadata"), ExitCode.UNREACHABLE),
    (RedisUnavailable("lease acquire"), ExitCode.UNREACHABLE),
    (SinkError("Redis session writes failed 8 times"), ExitCode.UNREACHABLE),
    (SummarizerError("no summary"), ExitCode.FAILED),
    (SessionStreamError("anything else of ours"), ExitCode.FAILED),
    # a server that answered and refused is no unreachable server
    (redis.AuthenticationError("NOAUTH HELLO must be called ..."), ExitCode.FAILED),
    (redis.exceptions.NoPermissionError("NOPERM"), ExitCode.FAILED),
    (redis.ConnectionError("Error 111 connecting"), ExitCode.UNREACHABLE),
])
def test_each_kind_of_error_has_its_exit_status(exc: BaseException, code: ExitCode) -> None:
    assert exit_code_of(exc) is code


def test_an_error_raised_from_a_refusal_exits_1_and_says_it_was_refused() -> None:
    try:
        try:
            raise redis.AuthenticationError("WRONGPASS invalid username-password pair")
        except redis.RedisError as exc:
            raise RedisUnavailable("lease acquire", "redis://u:secret@h:1/0") from exc
    except RedisUnavailable as outer:
        assert exit_code_of(outer) is ExitCode.FAILED
        message = command_error(outer).format_message()
    assert "refused the client's credentials" in message and "secret" not in message


def test_a_bad_variable_is_bad_input_for_a_server_command_and_harmless_offline() -> None:
    runner = CliRunner()
    env = {"SESSIONSTREAM_TENANT": "Not A Tenant"}
    served = runner.invoke(main, ["sessions"], env=env)
    assert served.exit_code == ExitCode.BAD_INPUT
    assert "SESSIONSTREAM_TENANT" in served.output
    offline = runner.invoke(main, ["log", "validate", str(FIXTURE)], env=env)
    assert offline.exit_code == ExitCode.OK, offline.output


@pytest.mark.parametrize("args", [["sessions"], ["views", "s1"]])
def test_an_unreachable_redis_exits_3_with_the_address(args: list[str]) -> None:
    result = CliRunner().invoke(main, args, env={"SESSIONSTREAM_REDIS_URL": DEAD_REDIS})
    assert result.exit_code == ExitCode.UNREACHABLE, result.output
    assert "127.0.0.1:1" in result.output
    assert "Traceback" not in result.output


def test_the_settings_are_built_once_per_invocation(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = Settings.from_env.__func__  # type: ignore[attr-defined]

    def counting(cls: type[Settings], env: object = None) -> Settings:
        calls.append(1)
        return real(cls, env)  # type: ignore[no-any-return]

    monkeypatch.setattr(Settings, "from_env", classmethod(counting))

    @click.group(cls=GuardedGroup)
    def root() -> None:
        pass

    @root.command()
    def twice() -> None:
        assert settings() is settings()

    runner = CliRunner()
    assert runner.invoke(root, ["twice"]).exit_code == 0
    assert len(calls) == 1
    assert runner.invoke(root, ["twice"]).exit_code == 0  # a new invocation: built anew
    assert len(calls) == 2


def test_an_uncaught_error_of_ours_ends_with_its_mapped_status() -> None:
    @click.group(cls=GuardedGroup)
    def root() -> None:
        pass

    @root.command()
    def down() -> None:
        raise BrokerUnavailable("metadata")

    result = CliRunner().invoke(root, ["down"])
    assert result.exit_code == ExitCode.UNREACHABLE
    assert "metadata" in result.output and "Traceback" not in result.output


def _failing(exc: BaseException, env: dict[str, str] | None = None) -> Any:
    """A command whose body raises ``exc`` inside the one error map, run by click."""
    @click.group(cls=GuardedGroup)
    def root() -> None:
        pass

    @root.command()
    def go() -> None:
        settings()  # built, as a server command builds them before it fails
        with command_errors():
            raise exc

    return CliRunner().invoke(root, ["go"], env=env or {})


@pytest.mark.parametrize(("exc", "code", "start"), [
    (LogFileError("f.jsonl", 3, "not JSON"), ExitCode.BAD_INPUT, "f.jsonl:3: not JSON"),
    (LegalHold("session s1", "litigation"), ExitCode.FAILED, "refused: "),
    (SessionUnknown("s1", "tenant default"), ExitCode.BAD_INPUT, "Error: "),
    (BrokerUnavailable("metadata"), ExitCode.UNREACHABLE, "Error: "),
    (SummarizerError("no summary"), ExitCode.FAILED, "Error: no summary"),
])
def test_every_command_maps_its_errors_once_to_one_line_and_a_status(
        exc: BaseException, code: ExitCode, start: str) -> None:
    result = _failing(exc)
    assert result.exit_code == code, result.output
    assert result.stderr.startswith(start), result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_a_redis_that_does_not_answer_is_named_without_its_password() -> None:
    import redis

    env = {"SESSIONSTREAM_REDIS_URL": "redis://ops:s3cret@127.0.0.1:1/0"}
    down = _failing(redis.ConnectionError("Connection refused"), env)
    assert down.exit_code == ExitCode.UNREACHABLE
    assert "127.0.0.1:1" in down.stderr and "s3cret" not in down.stderr, down.stderr
    refused = _failing(redis.ResponseError("NOPERM this user has no permissions"), env)
    assert refused.exit_code == ExitCode.FAILED
    assert "NOPERM" in refused.stderr and "Traceback" not in refused.stderr


def test_an_error_that_is_not_ours_is_not_hidden_by_the_map() -> None:
    result = _failing(ZeroDivisionError("a bug"))
    assert isinstance(result.exception, ZeroDivisionError)
