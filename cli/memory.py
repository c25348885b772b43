"""``sessionstream memory``: a tenant's long-term memory (docs/adr/0030) from the shell.

Every command acts in one namespace: ``--user ID`` (the default scope), ``--agent ID`` or
``--org ID``, then ``--label`` parts; as an operator of the tenant (``--as`` user: as that
user, whose confirmations and forgets the policy checks). Content is printed only by
``list``, ``search`` and ``show``; ``explain`` walks back to source sessions and seqs
and never prints it.
"""

from __future__ import annotations

import json
from typing import Any

import click

from sessionstream.cli.context import command_errors, die, settings

_JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON (for scripts).")


def _ns_options(f: Any) -> Any:
    f = click.option("--label", "labels", multiple=True,
                     help="A label of the namespace below its owner (repeatable, in order).")(f)
    f = click.option("--org", help="The organisation whose namespace it is.")(f)
    f = click.option("--agent", help="The agent whose namespace it is.")(f)
    f = click.option("--user", help="The user whose namespace it is.")(f)
    f = click.option("--as", "as_role", type=click.Choice(["operator", "user"]),
                     default="operator", show_default=True,
                     help="Act as an operator of the tenant, or as the user itself.")(f)
    return f


def _client(user: str | None, agent: str | None, org: str | None, labels: tuple[str, ...],
            as_role: str) -> tuple[Any, Any]:
    from sessionstream.core.memory import Actor, Namespace, Role, Scope
    from sessionstream.integrations.memory import FleetBackend, MemoryClient
    from sessionstream.integrations.memory_embed import embedder_for

    given = [(Scope.USER, user), (Scope.AGENT, agent), (Scope.ORG, org)]
    chosen = [(s, o) for s, o in given if o]
    if len(chosen) != 1:
        die("error: name one namespace owner: --user ID, --agent ID or --org ID "
            "(e.g. `sessionstream memory list --user ada`)", 2)
    scope, owner = chosen[0]
    s = settings()
    role = Role.OPERATOR if as_role == "operator" else Role.USER
    if role is Role.USER and scope is not Scope.USER:
        die("error: --as user acts in a --user namespace only", 2)
    actor = Actor(role, "cli", tenant=s.tenant, user=owner if scope is Scope.USER else None)
    ns = Namespace(s.tenant, scope, str(owner), tuple(labels))
    return MemoryClient(FleetBackend.from_settings(s), actor,
                        embedder=embedder_for(s.memory_embedder)), ns


def _out(value: Any) -> None:
    click.echo(json.dumps(value, ensure_ascii=False, indent=2))


def _line(v: Any) -> str:
    content = v.content if isinstance(v.content, str) else json.dumps(v.content,
                                                                        ensure_ascii=False)
    srcs = ", ".join(f"{s.session_id}@{','.join(map(str, s.seqs))}" for s in v.sources)
    return f"{v.ref}  [{v.kind}, {v.status.value}]  {content}" + (f"  ← {srcs}" if srcs else "")


@click.group("memory")
def memory_group() -> None:
    """Long-term memory: what agents learned across sessions, with its sources.

    Examples: `sessionstream memory list --user ada`, `sessionstream memory search --user
    ada "seat preference"`, `sessionstream memory explain --user ada ID`.
    """


@memory_group.command("list")
@_ns_options
@click.option("--pending", is_flag=True, help="Include memories waiting for confirmation.")
@_JSON
def list_cmd(user: str | None, agent: str | None, org: str | None, labels: tuple[str, ...],
             as_role: str, pending: bool, as_json: bool) -> None:
    """The namespace's current memories (content, kind, status, sources)."""
    with command_errors():
        mem, ns = _client(user, agent, org, labels, as_role)
        found = mem.list(namespace=ns, pending=pending)
    if as_json:
        _out([{"ref": str(v.ref), **v.to_json()} for v in found])
        return
    if not found:
        click.echo(f"no memories in {ns.key}")
    for v in found:
        click.echo(_line(v))


@memory_group.command("search")
@_ns_options
@click.argument("query")
@click.option("-k", "k", default=5, show_default=True, help="How many results.")
@click.option("--mode", type=click.Choice(["hybrid", "lexical", "vector"]), default="hybrid",
              show_default=True, help="Ranking: BM25, vectors, or both fused.")
@_JSON
def search_cmd(user: str | None, agent: str | None, org: str | None, labels: tuple[str, ...],
               as_role: str, query: str, k: int, mode: str, as_json: bool) -> None:
    """Rank the namespace's memories for QUERY."""
    with command_errors():
        mem, ns = _client(user, agent, org, labels, as_role)
        hits = mem.search(query, namespace=ns, k=k, mode=mode)
    if as_json:
        _out([h.to_json() for h in hits])
        return
    if not hits:
        click.echo(f"nothing in {ns.key} matches")
    for h in hits:
        click.echo(f"{h.score:.4f}  {_line(h.version)}")


@memory_group.command("show")
@_ns_options
@click.argument("memory_id")
@_JSON
def show_cmd(user: str | None, agent: str | None, org: str | None, labels: tuple[str, ...],
             as_role: str, memory_id: str, as_json: bool) -> None:
    """Every version of MEMORY_ID, with its content while it is held."""
    with command_errors():
        mem, ns = _client(user, agent, org, labels, as_role)
        got = mem.show(memory_id, namespace=ns)
    _out(got) if as_json else click.echo(json.dumps(got, ensure_ascii=False, indent=2))


@memory_group.command("explain")
@_ns_options
@click.argument("memory_id")
@_JSON
def explain_cmd(user: str | None, agent: str | None, org: str | None,
                labels: tuple[str, ...], as_role: str, memory_id: str,
                as_json: bool) -> None:
    """Walk MEMORY_ID back to its source sessions and seqs (never prints content)."""
    with command_errors():
        mem, ns = _client(user, agent, org, labels, as_role)
        got = mem.explain(memory_id, namespace=ns)
    if as_json:
        _out(got)
        return
    click.echo(f"memory {got['id']} in {got['namespace']} (current {got['current']}, "
               f"{'live' if got['live'] else 'not live'})")
    for v in got["versions"]:
        ext = v["extractor"]
        how = ext["method"] if ext["model"] is None else \
            f"{ext['method']} {ext['model']} prompt {ext['prompt_version']}"
        click.echo(f"  {v['ref']}  {v['kind']}  {v['status']}  by {ext['name']} ({how}), "
                   f"policy {v['policy'] or '-'}")
        for s in v["sources"]:
            click.echo(f"    from session {s['session_id']} seqs {s['seqs']}")
        if v["supersedes"]:
            click.echo(f"    supersedes {', '.join(v['supersedes'])}")
        if v["superseded_by"]:
            click.echo(f"    superseded by {v['superseded_by']}")
        if v["forgotten"]:
            f = v["forgotten"]
            click.echo(f"    content forgotten at {f['at']}: {f['reason']}")


@memory_group.command("forget")
@_ns_options
@click.argument("memory_ids", nargs=-1, required=True)
@click.option("--reason", default="forgotten", show_default=True, help="Why (audited).")
@_JSON
def forget_cmd(user: str | None, agent: str | None, org: str | None, labels: tuple[str, ...],
               as_role: str, memory_ids: tuple[str, ...], reason: str, as_json: bool) -> None:
    """Forget MEMORY_IDS: every version's content, in the topic, Redis and every logged
    recall (their keys are destroyed)."""
    with command_errors():
        mem, ns = _client(user, agent, org, labels, as_role)
        done = mem.forget(list(memory_ids), namespace=ns, reason=reason)
    if as_json:
        _out({"namespace": ns.key, "forgotten": done})
        return
    click.echo(f"forgot {', '.join(done)} in {ns.key}")


def _confirm(user: str | None, agent: str | None, org: str | None, labels: tuple[str, ...],
             as_role: str, ref: str, accept: bool, as_json: bool) -> None:
    with command_errors():
        mem, ns = _client(user, agent, org, labels, as_role)
        v = mem.confirm(ref, namespace=ns, accept=accept)
    if as_json:
        _out(v.to_json())
        return
    click.echo(f"{v.ref} is {v.status.value}")


@memory_group.command("confirm")
@_ns_options
@click.argument("ref")
@_JSON
def confirm_cmd(user: str | None, agent: str | None, org: str | None,
                labels: tuple[str, ...], as_role: str, ref: str, as_json: bool) -> None:
    """Confirm REF (``ID`` or ``ID@VERSION``): a pending memory is served from now on."""
    _confirm(user, agent, org, labels, as_role, ref, True, as_json)


@memory_group.command("reject")
@_ns_options
@click.argument("ref")
@_JSON
def reject_cmd(user: str | None, agent: str | None, org: str | None,
               labels: tuple[str, ...], as_role: str, ref: str, as_json: bool) -> None:
    """Reject REF: never served, and the same content proposed again stays rejected."""
    _confirm(user, agent, org, labels, as_role, ref, False, as_json)


@memory_group.command("worker")
@click.option("--once", is_flag=True, help="Fold what is there, then exit.")
def worker_cmd(once: bool) -> None:
    """Fold the tenant's memory topic into the Redis rows (run beside `worker`)."""
    from sessionstream.governance.wiring import key_store
    from sessionstream.streams.memory_fold import MemoryWorker

    with command_errors():
        s = settings()
        w = MemoryWorker(s, key_store(s))
        try:
            if once:
                while w.run_once(timeout=1.0):
                    pass
            else:
                w.serve()
        except KeyboardInterrupt:
            pass
        finally:
            w.close()


@memory_group.command("rebuild")
def rebuild_cmd() -> None:
    """Fold the whole memory topic into a new generation of rows, then switch readers."""
    from sessionstream.governance.wiring import key_store
    from sessionstream.streams.memory_fold import MemoryWorker

    with command_errors():
        s = settings()
        w = MemoryWorker(s, key_store(s))
        try:
            gen = w.rebuild()
        finally:
            w.close()
    click.echo(f"memory rebuilt into generation {gen}; readers use it now")


class DemoHarnessMemory:
    """The demo's harness remembering for one user (``streams.demo.DemoMemory``):
    `make demo` shows a deletion forgetting what memory learned only from it."""

    user = "demo-user"

    def __init__(self, s: Any, echo: Any) -> None:
        from sessionstream.core.memory import Actor, Role
        from sessionstream.governance.wiring import key_store
        from sessionstream.integrations.memory import FleetBackend, MemoryClient
        from sessionstream.producers.writer import WriterConfig

        self.echo = echo
        self.cfg = WriterConfig.from_settings(s)
        self.backend = FleetBackend(s, key_store(s), encryption=s.encryption)
        self.mem = MemoryClient(self.backend, Actor(Role.AGENT, "demo-harness",
                                                    user=self.user))

    def _asked(self, session_id: str) -> list[int]:
        from sessionstream.producers.writer import read_log

        return [e.seq for e in read_log(self.cfg, session_id).admitted
                if e.type == "user/message"][:1]

    def remember(self, target: str, other: str | None) -> int:
        asked = self._asked(target)
        if not asked:
            return 0
        self.mem.propose(f"Asked the fleet for a report in session {target}", kind="note",
                         sources=[(target, asked)])
        placed, also = 1, self._asked(other) if other is not None else []
        if other is not None and also:
            self.mem.propose("Asks the fleet to find and fix failing reports", kind="fact",
                             sources=[(target, asked), (other, also)])
            placed += 1
        self.echo(f"memory: {placed} memories of {self.user} cite session {target}"
              + (f" (one only it, one {other} too)" if placed == 2 else ""))
        return placed

    def cascade(self) -> Any:
        from sessionstream.integrations.memory import LineageCascade

        return LineageCascade(self.backend)

    def kept(self) -> list[list[str]]:
        return [[src.session_id for src in v.sources] for v in self.mem.list()]

    def close(self) -> None:
        self.backend.close()



def register(main: click.Group) -> None:
    main.add_command(memory_group)
