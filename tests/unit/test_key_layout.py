"""Where the file key store puts keys and with which modes (tenant keys apart from data)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from sessionstream.core.privacy import DataClass
from sessionstream.core.settings import Settings, SettingsError
from sessionstream.governance.keys import FileKeyStore, TenantKeys
from sessionstream.governance.wiring import key_store


@pytest.fixture
def open_umask() -> Iterator[None]:
    """umask 0: any mode the code does not set itself shows up as world-readable."""
    old = os.umask(0)
    yield
    os.umask(old)


def _modes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root.parent)): stat.S_IMODE(p.stat().st_mode)
            for p in [root, *root.rglob("*")]}


def _exercise(store: FileKeyStore) -> None:
    for tenant in ("acme", "bravo"):
        store.data_key(tenant, "s1", DataClass.RAW)
        store.data_key(tenant, "s2", DataClass.SURFACE)
        store.shred(tenant, "s1", (DataClass.RAW,), principal="ops", reason="erasure")
        store.place_hold(tenant, "s2", reason="case", principal="legal")
        store.retire(tenant, grace_s=0)


def test_every_key_directory_is_0700_and_every_key_file_0600(
        tmp_path: Path, open_umask: None) -> None:
    s = Settings.from_env({"SESSIONSTREAM_STATE_DIR": str(tmp_path / "state")})
    store = key_store(s)
    assert isinstance(store, FileKeyStore)
    _exercise(store)
    for root in (s.key_dir, s.tenant_keys_dir):
        modes = _modes(root)
        assert len(modes) > 4, modes
        for name, mode in modes.items():
            want = 0o700 if (root.parent / name).is_dir() else 0o600
            assert mode == want, f"{name} is {oct(mode)}, want {oct(want)}"


def test_tenant_keys_live_outside_the_state_dir_one_directory_per_tenant(
        tmp_path: Path) -> None:
    s = Settings.from_env({"SESSIONSTREAM_STATE_DIR": str(tmp_path / "state")})
    assert s.tenant_keys_dir == tmp_path / "state-tenant-keys"
    _exercise(key_store(s))  # type: ignore[arg-type]
    assert not [p for p in (tmp_path / "state").rglob("*") if "kek" in p.name]
    assert sorted(p.name for p in s.tenant_keys_dir.iterdir()) == ["acme", "bravo"]
    assert (s.tenant_keys_dir / "acme" / "kek.json").is_file()
    # an explicit key dir outside the state dir gets its rings beside it
    other = Settings.from_env({"SESSIONSTREAM_STATE_DIR": str(tmp_path / "state"),
                               "SESSIONSTREAM_KEY_DIR": str(tmp_path / "k")})
    assert other.tenant_keys_dir == tmp_path / "k-tenant-keys"


def test_a_tenant_key_dir_inside_the_data_keys_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="overlap"):
        Settings.from_env({"SESSIONSTREAM_KEY_DIR": str(tmp_path / "keys"),
                           "SESSIONSTREAM_TENANT_KEY_DIR": str(tmp_path / "keys" / "t")})
    with pytest.raises(SettingsError, match="overlap"):
        Settings.from_env({"SESSIONSTREAM_KEY_DIR": str(tmp_path / "keys" / "d"),
                           "SESSIONSTREAM_TENANT_KEY_DIR": str(tmp_path / "keys")})


def test_an_older_tree_is_moved_apart_and_tightened(tmp_path: Path, open_umask: None) -> None:
    """The older layout: <key dir>/tenants/<tenant>.kek beside data/, directories 0755."""
    s = Settings.from_env({"SESSIONSTREAM_STATE_DIR": str(tmp_path / "state")})
    key = FileKeyStore(s.key_dir, TenantKeys(tmp_path / "rings")).data_key(
        "acme", "s1", DataClass.RAW)
    ring_file = s.key_dir / "tenants" / "acme.kek"
    ring_file.parent.mkdir()
    (tmp_path / "rings" / "acme" / "kek.json").rename(ring_file)
    for d in (s.key_dir, s.key_dir / "data", s.key_dir / "data" / "acme"):
        os.chmod(d, 0o755)
    new = key_store(s)
    assert new.data_key("acme", "s1", DataClass.RAW) == key
    assert not ring_file.exists() and (s.tenant_keys_dir / "acme" / "kek.json").is_file()
    for d in (s.key_dir, s.key_dir / "data", s.key_dir / "data" / "acme"):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
