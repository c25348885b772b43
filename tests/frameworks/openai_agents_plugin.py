"""A pytest plugin that runs the OpenAI Agents SDK's own session tests on sessionstream.

Loaded with ``-p openai_agents_plugin`` into a pytest run inside the SDK's unpacked sdist
(``tests/integration/test_openai_agents_suite.py`` does that). Before the SDK's tests are
imported it swaps the two session classes they build for ``SessionstreamSession`` on one
store: ``agents.SQLiteSession`` (every name it is exported under) and the methods of
``tests.utils.simple_session.SimpleListSession`` (so its subclasses — ``CountingSession``,
``IdStrippingSession`` — inherit the swap). Each instance gets its own session id in the
store, as each SQLite database or list is its own history.

The store: ``SESSIONSTREAM_SDK_BACKEND=fleet`` (Kafka + Redis from the ``SESSIONSTREAM_*``
settings) or ``memory``. Every test ends with the store closed (leases released).
"""

from __future__ import annotations

import inspect
import os
import re
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from sessionstream.integrations.openai_agents import SessionstreamSession
from sessionstream.integrations.store import FleetStore, MemoryStore, SessionStore

_RUN = uuid.uuid4().hex[:8]
STORE: SessionStore


def _make_store() -> SessionStore:
    if os.environ.get("SESSIONSTREAM_SDK_BACKEND", "fleet") == "memory":
        return MemoryStore()
    return FleetStore.from_settings()


class _Namespaced(SessionstreamSession):
    """A SessionstreamSession keyed in the store by ``<namespace>.<session id>``."""

    def __init__(self, session_id: str, namespace: str, **kw: Any) -> None:
        super().__init__(session_id, STORE, **kw)
        self._handle = STORE.open(f"sdk-{_RUN}-{namespace}.{session_id}")


_DBS: dict[str, str] = {}


class SQLiteSession(_Namespaced):
    """``SQLiteSession(session_id, db_path=":memory:", session_settings=None)`` on the
    store: one namespace per database file, a fresh one per in-memory database."""

    def __init__(self, session_id: str, db_path: str | Path = ":memory:",
                 sessions_table: str = "agent_sessions", messages_table: str = "agent_messages",
                 session_settings: Any = None) -> None:
        path = str(db_path)
        ns = uuid.uuid4().hex[:8] if path == ":memory:" else _DBS.setdefault(
            f"{os.path.abspath(path)}|{messages_table}", uuid.uuid4().hex[:8])
        if session_settings is not None and not hasattr(session_settings, "limit"):
            from agents.memory.session_settings import coerce_session_settings

            session_settings = coerce_session_settings(session_settings)
        super().__init__(session_id, ns, session_settings=session_settings)
        self.db_path = db_path


def _simple_init(self: Any, session_id: str = "test", history: Any = None) -> None:
    self.session_id = session_id
    self._ignore_ids_for_matching = False
    self._ss = _Namespaced(session_id, uuid.uuid4().hex[:8])
    if history:
        self._ss._add_sync(list(history))


def _swap_simple_list_session() -> None:
    from tests.utils import simple_session

    cls = simple_session.SimpleListSession
    cls.__init__ = _simple_init  # type: ignore[method-assign]

    async def get_items(self: Any, limit: int | None = None) -> list[Any]:
        if limit is not None and limit <= 0:
            return []
        return await self._ss.get_items(limit)

    async def add_items(self: Any, items: list[Any]) -> None:
        await self._ss.add_items(items)

    async def pop_item(self: Any) -> Any:
        return await self._ss.pop_item()

    async def clear_session(self: Any) -> None:
        await self._ss.clear_session()

    def items(self: Any) -> list[Any]:
        from sessionstream.integrations.openai_agents import items_of

        return items_of(self._ss.handle.events())

    cls.get_items = get_items  # type: ignore[method-assign]
    cls.add_items = add_items  # type: ignore[method-assign]
    cls.pop_item = pop_item  # type: ignore[method-assign]
    cls.clear_session = clear_session  # type: ignore[method-assign]
    cls._items = property(items)  # type: ignore[attr-defined]
    cls.saved_items = property(items)  # type: ignore[attr-defined]
    cls.session_settings = None


def pytest_configure(config: pytest.Config) -> None:
    global STORE
    STORE = _make_store()
    import agents
    import agents.memory
    import agents.memory.sqlite_session

    for module in (agents, agents.memory, agents.memory.sqlite_session):
        module.SQLiteSession = SQLiteSession  # type: ignore[attr-defined,misc]
    sys.path.insert(0, str(config.rootpath))
    _swap_simple_list_session()


#: Files run whole; in every other file only the tests that build a session class.
WHOLE = ("tests/memory/", "tests/deferred_session_writes/", "tests/test_hitl_session_scenario.py")
_USES_SESSION = re.compile(r"\b(SimpleListSession|CountingSession|IdStrippingSession|"
                           r"SQLiteSession)\b")

_INTERNALS = "checks SQLiteSession internals"
#: The SDK tests not run, each with its reason (test id -> why).
EXCLUDED: dict[str, str] = {
    **{f"tests/memory/test_session.py::{name}": f"{_INTERNALS}: its per-thread connection "
       "pool (_connections, _connections_lock)" for name in (
        "test_sqlite_session_close_closes_worker_thread_connections",
        "test_sqlite_session_reaps_connections_from_exited_worker_threads",
        "test_sqlite_session_closes_retired_connections_before_the_next_allocation",
        "test_sqlite_session_keeps_connections_of_live_worker_threads",
        "test_sqlite_session_rollback_failure_evicts_connection",
        "test_sqlite_session_close_retries_quarantined_connection",
        "test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome[add]",
        "test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome[pop]",
        "test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome[clear]",
    )},
    **{f"tests/memory/test_session.py::{name}": f"{_INTERNALS}: writes corrupt JSON rows "
       "into its table through _locked_connection (our log refuses non-JSON data at write "
       "time, so no such row can exist)" for name in (
        "test_sqlite_session_pop_item_skips_corrupt_most_recent",
        "test_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows",
        "test_sqlite_session_get_items_limit_skips_corrupt_newest_rows",
        "test_sqlite_session_get_items_session_settings_limit_skips_corrupt_rows",
    )},
    **{f"tests/memory/test_session.py::{name}": f"{_INTERNALS}: drops its SQLite tables or "
       "probes the database file's write lock after a failed statement" for name in (
        "test_sqlite_session_failed_add_items_releases_write_lock",
        "test_sqlite_session_failed_clear_session_rolls_back",
        "test_sqlite_session_failed_pop_item_releases_write_lock",
    )},
    "tests/memory/test_session.py::test_sqlite_session_file_lock_is_shared_across_instances":
        f"{_INTERNALS}: its per-file lock registry (_file_lock_counts)",
    **{f"tests/test_run_impl_resume_paths.py::test_handoff_resume_after_cancelled_compaction_"
       f"commits[{mode}]": f"{_INTERNALS}: wraps its _insert_items to pause a compaction's "
       "row replacement" for mode in ("run-live", "run-json", "streamed-live",
                                      "streamed-json")},
    **{f"tests/memory/test_compaction_suffix.py::{name}": f"{_INTERNALS}: makes the "
       "compaction's insert fail with a trigger in its SQLite file (or by wrapping its "
       "_insert_items) and asserts sqlite3.IntegrityError; our replacement is one atomic "
       "write (a refused batch stores nothing), tested in tests/unit/"
       "test_openai_agents_session.py" for name in (
        "test_suffix_transaction_rolls_back_failed_insert[sqlite]",
        "test_cancelled_suffix_transaction_settles_before_newer_append[sqlite]",
        "test_failed_encrypted_suffix_transaction_preserves_original_tokens[sqlite-False]",
        "test_failed_encrypted_suffix_transaction_preserves_original_tokens[sqlite-True]",
    )},
    **{f"tests/extensions/memory/test_encrypt_session.py::{name}": f"{_INTERNALS}: reads "
       "its table's rows and write lock through a second sqlite3 connection; that a pop "
       "refused by its validation removes nothing is tested on our store in tests/unit/"
       "test_openai_agents_session.py" for name in (
        "test_encrypted_pop_authentication_is_atomic_with_concurrent_mutations[append]",
        "test_encrypted_pop_authentication_is_atomic_with_concurrent_mutations[clear]",
        "test_encrypted_pop_wrong_key_preserves_row_identity",
    )},
    "tests/memory/test_session.py::test_sqlite_session_closed_rejects_empty_add_items":
        "SQLiteSession's closed state (RuntimeError 'SQLiteSession is closed'): our close() "
        "hands the session over and the object stays usable",
}


#: Whole SDK test files not run, with the reason.
EXCLUDED_FILES: dict[str, str] = {
    "tests/test_error_logging_redaction.py": "asserts on traceback frames under the sdist's "
    "src/agents, so it needs the SDK imported from that source tree, not the installed "
    "package (it fails the same way without this plugin)",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    keep, drop = [], []
    for item in items:
        nodeid = item.nodeid
        if nodeid in EXCLUDED or nodeid.split("::")[0] in EXCLUDED_FILES:
            drop.append(item)
            continue
        if not nodeid.startswith(WHOLE):
            fn = getattr(item, "function", None)
            try:
                source = inspect.getsource(fn) if fn is not None else ""
            except (OSError, TypeError):
                source = ""
            if not _USES_SESSION.search(source):
                drop.append(item)
                continue
        keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_terminal_summary(terminalreporter: Any) -> None:
    terminalreporter.write_line(
        f"sessionstream: {len(EXCLUDED)} SDK tests and {len(EXCLUDED_FILES)} file(s) excluded "
        "(reasons in openai_agents_plugin.EXCLUDED and EXCLUDED_FILES)")


@pytest.fixture(autouse=True)
def _release_sessions() -> Any:
    yield
    STORE.close()
