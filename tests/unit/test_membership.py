"""The worker's consumer instance id: static membership by default, one id per live worker."""

from __future__ import annotations

import fcntl
import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sessionstream.core.settings import Env, Settings, SettingsError
from sessionstream.streams import membership


def settings(tmp_path: Path, **env: str) -> Settings:
    return Settings.from_env({Env.STATE_DIR: str(tmp_path), **env})


@pytest.fixture(autouse=True)
def _release_all():  # type: ignore[no-untyped-def]
    yield
    for handle, _ in membership._held.values():
        handle.close()
    membership._held.clear()


def test_by_default_the_id_is_the_host_name_and_the_lowest_free_slot(tmp_path: Path) -> None:
    s = settings(tmp_path)
    assert s.worker_instance == "auto"
    got = membership.claim(s, "g", hostname="worker-3")
    assert got.instance_id == "worker-3-0"
    assert (tmp_path / "workers" / "g.0.lock").exists()


def test_a_second_worker_of_the_group_on_the_host_gets_the_next_slot(tmp_path: Path) -> None:
    s = settings(tmp_path)
    (tmp_path / "workers").mkdir()
    with (tmp_path / "workers" / "g.0.lock").open("ab") as other:  # another live worker
        fcntl.flock(other.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert membership.claim(s, "g", hostname="h").instance_id == "h-1"
    # another group on the same host starts from slot 0
    assert membership.claim(s, "other", hostname="h").instance_id == "h-0"


def test_a_worker_restarted_after_sigkill_takes_its_old_id_back(tmp_path: Path) -> None:
    """The kernel drops a dead process's lock: the restarted worker's slot is free again,
    while a live worker's slot stays taken."""
    s = settings(tmp_path)
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from pathlib import Path; from sessionstream.core.settings "
         "import Settings; from sessionstream.streams import membership; "
         f"m = membership.claim(Settings.from_env({{'{Env.STATE_DIR}': sys.argv[1]}}), 'g', "
         "hostname='h'); print(m.instance_id, flush=True); time.sleep(60)",
         str(tmp_path)], stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2])
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "h-0"
        assert membership.claim(s, "g", hostname="h").instance_id == "h-1"
        child.kill()
        child.wait(10)
        membership.release(s, "g")
        deadline = time.monotonic() + 5
        while membership.claim(s, "g", hostname="h").instance_id != "h-0":
            membership.release(s, "g")
            assert time.monotonic() < deadline, "the dead worker's slot stayed taken"
            time.sleep(0.05)
    finally:
        child.kill()
        child.wait(10)


def test_one_process_claims_once_per_group(tmp_path: Path) -> None:
    s = settings(tmp_path)
    first = membership.claim(s, "g", hostname="h")
    assert membership.claim(s, "g", hostname="h") == first


def test_dynamic_and_an_explicit_id_take_no_slot(tmp_path: Path) -> None:
    assert membership.claim(settings(tmp_path, **{Env.WORKER_INSTANCE: "dynamic"}),
                            "g").instance_id is None
    got = membership.claim(settings(tmp_path, **{Env.WORKER_INSTANCE: "worker-7"}), "g")
    assert got.instance_id == "worker-7" and got.source == "setting"
    assert not (tmp_path / "workers").exists()


def test_no_writable_lock_dir_falls_back_to_dynamic_membership_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with caplog.at_level(logging.WARNING):
        got = membership.claim(settings(tmp_path), "g", lock_dir=blocker / "workers")
    assert got.instance_id is None
    assert "dynamic group membership" in caplog.text


def test_host_names_and_groups_are_made_safe_for_ids_and_file_names(tmp_path: Path) -> None:
    got = membership.claim(settings(tmp_path), "a/b c", hostname="my host")
    assert got.instance_id == "my-host-0"
    assert (tmp_path / "workers" / "a_b_c.0.lock").exists()


@pytest.mark.parametrize("bad", ["two words", "x" * 250, "a{b}"])
def test_a_bad_instance_setting_is_refused_naming_the_variable(tmp_path: Path, bad: str) -> None:
    with pytest.raises(SettingsError, match=Env.WORKER_INSTANCE):
        settings(tmp_path, **{Env.WORKER_INSTANCE: bad})
