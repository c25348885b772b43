"""One error → exit-status map for every command (docs/cli.md, "Exit status")."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from sessionstream.cli.context import ExitCode, GuardedGroup, exit_code_of, settings
from sessionstream.cli.main import main
from sessionstream.core.errors import (
    InvariantViolation,
    LogFileError,
    SessionStreamError,
    SummarizerError,
)
from sessionstream.core.settings import Settings, SettingsError
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
])
def test_each_kind_of_error_has_its_exit_status(exc: BaseException, code: ExitCode) -> None:
    assert exit_code_of(exc) is code


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
