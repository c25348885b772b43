"""The batch's session-write script call packed by the extension is, byte for byte, what
redis-py's ``pack_command`` sends for the same arguments (the sink's fallback path)."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.asyncio.connection import Connection

from sessionstream.streams import fold_native

if not fold_native.available():
    if os.environ.get("CI"):
        raise RuntimeError("CI must build the native extension (make install)")
    pytest.skip("the native extension is not built", allow_module_level=True)

from sessionstream._native import pack_session_writes


def _redis_py(command: str, script: str, maxlen: int, calls: list[tuple],  # type: ignore[type-arg]
              keys_before: tuple[str, ...] = (), args_before: tuple[str, ...] = (),
              tail: tuple[str, ...] = ()) -> bytes:
    """The same call as streams.sink's fallback builds it."""
    keys: list[str] = list(keys_before)
    args: list[object] = [*args_before, maxlen]
    for row, changes, base, last, seq, force, entry, fields, deletes in calls:
        keys += [row, changes]
        args += [base, last, seq, "1" if force else "0", entry, len(fields)]
        for k, v in fields.items():
            args += [k, v]
        args.append(len(deletes))
        args += deletes
    args += tail
    return b"".join(Connection().pack_command(command, script, len(keys), *keys, *args))


_text = st.text(max_size=40)
_call = st.tuples(_text, _text, st.integers(-1, 2**40), st.integers(-1, 2**40),
                  st.integers(-1, 2**31), st.booleans(), _text,
                  st.dictionaries(_text, st.text(max_size=2000), max_size=8),
                  st.lists(_text, max_size=4).map(tuple))


@settings(max_examples=200, deadline=None)
@given(calls=st.lists(_call, max_size=6), maxlen=st.integers(0, 10**6),
       command=st.sampled_from(["EVALSHA", "EVAL"]), script=_text)
def test_the_packed_script_call_is_the_bytes_redis_py_sends(
        calls: list[tuple], maxlen: int, command: str, script: str) -> None:  # type: ignore[type-arg]
    assert pack_session_writes(command, script, maxlen, calls) == _redis_py(
        command, script, maxlen, calls)


def test_a_field_that_is_not_text_is_refused_with_its_role() -> None:
    with pytest.raises(TypeError, match="a field value must be a str"):
        pack_session_writes("EVALSHA", "x", 1, [("r", "c", 0, 1, 1, False, "{}", {"a": 1}, ())])


@settings(max_examples=100, deadline=None)
@given(calls=st.lists(_call, max_size=4), keys_before=st.lists(_text, max_size=4),
       args_before=st.lists(_text, max_size=4), tail=st.lists(_text, max_size=6))
def test_the_one_call_batch_packs_its_tenant_keys_and_arguments_as_redis_py(
        calls: list[tuple], keys_before: list[str], args_before: list[str],  # type: ignore[type-arg]
        tail: list[str]) -> None:
    assert pack_session_writes("EVALSHA", "s", 100, calls, keys_before, args_before,
                               tail) == _redis_py("EVALSHA", "s", 100, calls,
                                                  tuple(keys_before), tuple(args_before),
                                                  tuple(tail))
