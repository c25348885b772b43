"""The Redis row layout: key shapes are pinned (they are a stored format), and every Lua
script names only fields the layout declares."""

from __future__ import annotations

import pytest

from sessionstream.core.rows import (
    CHANGE_FIELD,
    LUA_FIELDS,
    KeySpace,
    SessionRow,
    change_entry,
    generation_of,
    lua,
    lua_literals,
    read_change_entry,
)
from sessionstream.producers import index, lease, views
from sessionstream.streams import replay_compare, sink_scripts

KEYS = KeySpace("acme", "ss")

#: Redis commands, flags and plain values the scripts may spell in quotes.
LUA_TOKENS = {"GET", "HGET", "HGETALL", "HSET", "HDEL", "HMGET", "ZADD", "GT", "HSETNX", "XADD",
              "INCR", "EXISTS", "TIME", "MAXLEN", "~", "*", "-1", "0", "1", "", ":", " ",
              "DEL", "LTRIM", "RPUSH", "SADD", "LRANGE", "HSTRLEN"}

SCRIPTS = {
    "sink_scripts.WRITE_SESSION_LUA": sink_scripts.WRITE_SESSION_LUA,
    "sink_scripts.PROGRESS_MAX_LUA": sink_scripts.PROGRESS_MAX_LUA,
    "sink_scripts.WRITE_TENANT_LUA": sink_scripts.WRITE_TENANT_LUA,
    "replay_compare.COMPARE_ROWS_LUA": replay_compare.COMPARE_ROWS_LUA,
    "lease._ACQUIRE": lease._ACQUIRE,
    "lease._RENEW": lease._RENEW,
    "lease._CHECK": lease._CHECK,
    "lease._HANDOFF": lease._HANDOFF,
    "lease._SETTLE": lease._SETTLE,
    "views.INSTALL": views.INSTALL,
    "views.READ": views.READ,
    "views.gather_script": views.gather_script(""),
    "index._RECORD": index._RECORD,
    "index._MARK_CLEAN": index._MARK_CLEAN,
}


def test_session_keys_share_the_session_hash_tag() -> None:
    assert KEYS.session_row("s1", 3) == "ss:{acme/s1}:g3"
    assert KEYS.session_changes("s1", 3) == "ss:{acme/s1}:changes:g3"
    assert KEYS.lease("s1") == "ss:{acme/s1}:lease"
    assert KEYS.epoch("s1") == "ss:{acme/s1}:epoch"
    assert KEYS.log_index("s1") == "ss:{acme/s1}:log"
    assert KEYS.inline_views("s1") == "ss:{acme/s1}:fv"
    assert KEYS.inline_view("s1", "a/b") == "ss:{acme/s1}:fv:a/b"
    assert KEYS.inline_view_chunks("s1", "a/b") == "ss:{acme/s1}:fv:a/b:chunks"


def test_tenant_keys_share_the_tenant_hash_tag() -> None:
    assert KEYS.sessions_index(2) == "ss:{acme}:sessions:g2"
    assert KEYS.tenant_changes(2) == "ss:{acme}:changes:g2"
    assert KEYS.progress("grp") == "ss:{acme}:progress:grp"
    assert KEYS.generation() == "ss:{acme}:generation"
    assert KEYS.generation_counter() == "ss:{acme}:generation:last"
    assert KEYS.compaction_watch("w") == "ss:{acme}:compaction-watch:w"


def test_generations_run_from_zero_to_the_highest_of_counter_pointer_and_first() -> None:
    assert KEYS.generations(None, None) == range(0, 2)
    assert KEYS.generations(b"4", None) == range(0, 5)
    assert KEYS.generations("2", "6") == range(0, 7)
    assert KEYS.generations(3, b"") == range(0, 4)


def test_session_key_roles_are_named() -> None:
    roles = {KEYS.session_key_role("s1", k) for k in (
        KEYS.session_row("s1", 2), KEYS.session_changes("s1", 2), KEYS.lease("s1"),
        KEYS.epoch("s1"), KEYS.log_index("s1"))}
    assert roles == {"row", "changes", "lease", "epoch", "log"}
    assert KEYS.session_key_role("s1", KEYS.session_key("s1", "other")) is None
    assert KEYS.session_key_role("s1", KEYS.session_row("s2", 1)) is None


def test_an_absent_generation_pointer_means_the_first_generation() -> None:
    assert generation_of(None) == 1
    assert generation_of("") == 1
    assert generation_of(b"4") == 4


def test_the_session_row_is_read_back_through_the_layout() -> None:
    row = {SessionRow.view("todo"): '{"a":1}', SessionRow.state_version("todo"): "2",
           SessionRow.META: '{"partition":3}', SessionRow.AS_OF_SEQ: "7"}
    assert SessionRow.views(row) == {"todo": {"a": 1}}
    assert SessionRow.state_versions(row) == {"todo": 2}
    assert SessionRow.meta(row) == {"partition": 3}
    assert (SessionRow.as_of_seq(row), SessionRow.as_of_offset(row)) == (7, -1)
    assert all(SessionRow.is_field(k) for k in row)
    assert not SessionRow.is_field("bogus")


def test_a_change_entry_round_trips_and_a_malformed_one_is_none() -> None:
    text = change_entry("s1", 4, 10, ["todo"])
    assert read_change_entry({CHANGE_FIELD: text}) == {
        "session": "s1", "as_of_seq": 4, "offset": 10, "changed": ["todo"]}
    assert read_change_entry({CHANGE_FIELD: "not json"}) is None
    assert read_change_entry({CHANGE_FIELD: "[1]"}) is None


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_every_quoted_name_in_a_script_is_a_command_or_a_declared_field(name: str) -> None:
    unknown = lua_literals(SCRIPTS[name]) - LUA_TOKENS - set(LUA_FIELDS.values())
    assert not unknown, f"{name} spells {sorted(unknown)}: add them to sessionstream.core.rows"


def test_an_unknown_field_in_a_script_template_fails_at_render_time() -> None:
    with pytest.raises(KeyError):
        lua("redis.call('HGET', KEYS[1], $NO_SUCH_FIELD)")


def test_the_extension_spells_no_row_field_of_its_own() -> None:
    """native/src/layout.rs is generated from this module (tools/native_layout.py), and no
    other Rust source spells a row field or the sealed prefix as a literal."""
    import importlib.util
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("native_layout", root / "tools/native_layout.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert (root / "native/src/layout.rs").read_text("utf-8") == gen.render(), \
        "native/src/layout.rs is stale: run python tools/native_layout.py"
    spelled = re.compile(r'"(view:|state:|sv:|parts?:|ss-aead1:)')
    offenders = [f"{p.name}:{n}" for p in (root / "native/src").rglob("*.rs")
                 if p.name != "layout.rs"
                 for n, line in enumerate(p.read_text("utf-8").splitlines(), 1)
                 if spelled.search(line) and "assert" not in line]
    assert offenders == []


def test_a_change_entry_is_the_canonical_json_of_its_fields() -> None:
    from sessionstream.core.jsonvalue import canonical_dumps
    from sessionstream.core.rows import change_entry

    for sid, changed in [("s1", ["index", "turns"]), ("é/ü \"q\"", []), ("x", ["surface"])]:
        assert change_entry(sid, 7, 42, changed) == canonical_dumps(
            {"session": sid, "as_of_seq": 7, "offset": 42, "changed": changed})
