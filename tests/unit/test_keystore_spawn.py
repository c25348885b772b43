"""A key store handed to a spawned process (the fleet's writers take the cipher along).

The copy must work there (its own lock: a lock cannot be pickled) and must not carry
this process's cached keys: a key shredded after the parent looked it up must read as
shredded in the child, whatever the parent's cache still holds.
"""

from __future__ import annotations

import multiprocessing
import pickle
from pathlib import Path

from sessionstream.core.privacy import KeyState
from sessionstream.core.sealed import DataClass
from sessionstream.governance import ContentCipher
from sessionstream.governance.keys import FileKeyStore


def _state_in_child(cipher: ContentCipher, session_id: str) -> str:
    store = cipher.store
    assert isinstance(store, FileKeyStore)
    return str(store.lookup("default", session_id, DataClass.RAW).state)


def _spawned(cipher: ContentCipher, session_id: str) -> str:
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_state_in_child, (cipher, session_id))


def test_a_cipher_pickles_and_its_key_store_works_in_a_spawned_process(tmp_path: Path) -> None:
    store = FileKeyStore(tmp_path / "keys")
    key = store.data_key("default", "s-1", DataClass.RAW)
    cipher = ContentCipher(store, "default")

    copy = pickle.loads(pickle.dumps(cipher))
    assert copy.store.lookup("default", "s-1", DataClass.RAW).key == key
    assert copy.store._lock is not store._lock
    assert _spawned(cipher, "s-1") == KeyState.ACTIVE


def test_a_spawned_copy_does_not_use_keys_the_parent_cached_before_a_shred(
        tmp_path: Path) -> None:
    parent = FileKeyStore(tmp_path / "keys", cache_ttl_s=600.0)
    parent.data_key("default", "s-2", DataClass.RAW)
    assert parent.lookup("default", "s-2", DataClass.RAW).state is KeyState.ACTIVE

    # Another process's store shreds the key; the parent's cache still answers ACTIVE
    # until its feed check is due.
    FileKeyStore(tmp_path / "keys").shred("default", "s-2", (DataClass.RAW,),
                                          principal="test", reason="deletion")
    assert parent.lookup("default", "s-2", DataClass.RAW).state is KeyState.ACTIVE

    assert _spawned(ContentCipher(parent, "default"), "s-2") == KeyState.SHREDDED


def test_the_writer_config_the_demo_hands_its_fleet_pickles(tmp_path: Path) -> None:
    """``make demo`` spawns its agent processes with WriterConfig.from_settings: every
    part of it (the cipher and its key store included) must survive pickling."""
    from sessionstream.core.settings import Settings
    from sessionstream.producers.writer import WriterConfig

    settings = Settings.from_env({"SESSIONSTREAM_STATE_DIR": str(tmp_path / "state")})
    cfg = WriterConfig.from_settings(settings)
    assert cfg.cipher is not None
    copy = pickle.loads(pickle.dumps(cfg))
    assert copy.topic == cfg.topic and copy.cipher is not None
