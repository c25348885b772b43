"""Who may write what into which memory namespace: the authorization policy, as data.

Two checks, in order, before anything is appended to the memory topic:

1. **Binding.** An actor writes only into namespaces of its own tenant that it is bound
   to: a user's namespace when it acts for that user, an agent's when it is that agent,
   an organisation's when it belongs to it; an operator of the tenant is bound to all of
   them. Nothing enters a namespace its writer is not authorized for.
2. **Rules.** The first :class:`Rule` matching the namespace's scope, the memory's kind
   and the actor's role gives the outcome: ``accept`` (the memory is served at once),
   ``confirm`` (it is kept pending until a principal of the namespace confirms it) or
   ``refuse`` (nothing is written; :class:`~.errors.MemoryRefused`). No rule matching:
   the policy's ``default``.

Who may confirm or reject a pending memory, and who may forget one, is per scope
(``confirmers``, ``forgetters``), after the same binding check.

The writer decides and records the outcome in the operation (``status``, and the
policy's ``version``): the fold never re-decides, so a changed policy changes what is
written from then on, never what was already accepted (docs/adr/0030).
A policy is JSON (:meth:`Policy.from_json`, errors name the path), so an operator keeps it
beside the tenant's other settings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from sessionstream.core.memory.errors import InvalidPolicy, MemoryRefused
from sessionstream.core.memory.model import Actor, Namespace, Role, Scope


class Outcome(StrEnum):
    ACCEPT = "accept"
    CONFIRM = "confirm"
    REFUSE = "refuse"


@dataclass(frozen=True, slots=True)
class Rule:
    """Scope, kind and role to match (None: any) and the outcome when they do."""

    outcome: Outcome
    scope: Scope | None = None
    kind: str | None = None
    role: Role | None = None

    def matches(self, scope: Scope, kind: str, role: Role) -> bool:
        return ((self.scope is None or self.scope is scope)
                and (self.kind is None or self.kind == kind)
                and (self.role is None or self.role is role))

    def to_json(self) -> dict[str, Any]:
        return {"scope": None if self.scope is None else self.scope.value, "kind": self.kind,
                "role": None if self.role is None else self.role.value,
                "outcome": self.outcome.value}


@dataclass(frozen=True, slots=True)
class Decision:
    """The policy's answer and why (the rule's index, or the binding that failed)."""

    outcome: Outcome
    reason: str
    rule: int | None = None  # index into Policy.rules; None: the default or a binding


def _roles(*roles: Role) -> frozenset[Role]:
    return frozenset(roles)


@dataclass(frozen=True, slots=True)
class Policy:
    version: str
    rules: tuple[Rule, ...]
    default: Outcome = Outcome.CONFIRM
    confirmers: Mapping[Scope, frozenset[Role]] = field(default_factory=dict)
    forgetters: Mapping[Scope, frozenset[Role]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "rules": [r.to_json() for r in self.rules],
                "default": self.default.value,
                "confirmers": {s.value: sorted(r.value for r in roles)
                               for s, roles in sorted(self.confirmers.items())},
                "forgetters": {s.value: sorted(r.value for r in roles)
                               for s, roles in sorted(self.forgetters.items())}}

    @classmethod
    def from_json(cls, obj: Any) -> Policy:
        """A policy from its JSON form; :class:`InvalidPolicy` names what and where."""
        if not isinstance(obj, Mapping):
            raise InvalidPolicy("$", f"expected an object, got {type(obj).__name__}")
        allowed = {"version", "rules", "default", "confirmers", "forgetters"}
        for name in obj:
            if name not in allowed:
                raise InvalidPolicy(f"$.{name}", f"unknown field (allowed: "
                                    f"{', '.join(sorted(allowed))})")
        version = obj.get("version")
        if not isinstance(version, str) or not version:
            raise InvalidPolicy("$.version", "a policy has a version (a non-empty string "
                                "recorded in every operation it decides)")
        raw_rules = obj.get("rules", [])
        if not isinstance(raw_rules, list):
            raise InvalidPolicy("$.rules", "expected a list of rules")
        rules = tuple(_rule(r, f"$.rules[{i}]") for i, r in enumerate(raw_rules))
        return cls(version, rules, _member(Outcome, obj.get("default", "confirm"),
                                           "$.default"),
                   _by_scope(obj.get("confirmers", {}), "$.confirmers"),
                   _by_scope(obj.get("forgetters", {}), "$.forgetters"))


def _member(cls: Any, value: Any, path: str) -> Any:
    try:
        return cls(value)
    except ValueError:
        raise InvalidPolicy(path, f"{value!r} is not one of: "
                            f"{', '.join(m.value for m in cls)}") from None


def _rule(obj: Any, path: str) -> Rule:
    if not isinstance(obj, Mapping):
        raise InvalidPolicy(path, "expected an object with outcome and optional scope, "
                            "kind, role")
    for name in obj:
        if name not in ("scope", "kind", "role", "outcome"):
            raise InvalidPolicy(f"{path}.{name}", "unknown field (allowed: kind, outcome, "
                                "role, scope)")
    if "outcome" not in obj:
        raise InvalidPolicy(f"{path}.outcome", "missing")
    kind = obj.get("kind")
    if kind is not None and not isinstance(kind, str):
        raise InvalidPolicy(f"{path}.kind", "expected a kind name or null")
    return Rule(_member(Outcome, obj["outcome"], f"{path}.outcome"),
                None if obj.get("scope") is None else _member(Scope, obj["scope"],
                                                              f"{path}.scope"),
                kind,
                None if obj.get("role") is None else _member(Role, obj["role"],
                                                             f"{path}.role"))


def _by_scope(obj: Any, path: str) -> dict[Scope, frozenset[Role]]:
    if not isinstance(obj, Mapping):
        raise InvalidPolicy(path, "expected an object: scope -> list of roles")
    out = {}
    for name, roles in obj.items():
        scope = _member(Scope, name, f"{path}.{name}")
        if not isinstance(roles, list):
            raise InvalidPolicy(f"{path}.{name}", "expected a list of roles")
        out[scope] = frozenset(_member(Role, r, f"{path}.{name}[{i}]")
                               for i, r in enumerate(roles))
    return out


#: The shipped policy. Org-wide memory: only an operator writes it at once, anyone else's
#: proposal waits for an operator. An instruction changes how agents behave, so a model's
#: guess at one waits for the user; preferences and facts a model extracted for a user
#: are served at once (the user sees and can forget them). An agent's own namespace takes
#: the extractor's proposals pending.
DEFAULT_POLICY = Policy(
    version="default-1",
    rules=(
        Rule(Outcome.ACCEPT, scope=Scope.ORG, role=Role.OPERATOR),
        Rule(Outcome.CONFIRM, scope=Scope.ORG),
        Rule(Outcome.CONFIRM, scope=Scope.USER, kind="instruction", role=Role.EXTRACTOR),
        Rule(Outcome.ACCEPT, role=Role.USER),
        Rule(Outcome.ACCEPT, role=Role.OPERATOR),
        Rule(Outcome.ACCEPT, role=Role.AGENT),
        Rule(Outcome.ACCEPT, scope=Scope.USER, role=Role.EXTRACTOR),
        Rule(Outcome.CONFIRM, scope=Scope.AGENT, role=Role.EXTRACTOR),
    ),
    default=Outcome.CONFIRM,
    confirmers={Scope.USER: _roles(Role.USER, Role.OPERATOR),
                Scope.AGENT: _roles(Role.OPERATOR), Scope.ORG: _roles(Role.OPERATOR)},
    forgetters={Scope.USER: _roles(Role.USER, Role.AGENT, Role.OPERATOR),
                Scope.AGENT: _roles(Role.AGENT, Role.OPERATOR),
                Scope.ORG: _roles(Role.OPERATOR)},
)


def binding(actor: Actor, namespace: Namespace) -> str | None:
    """Why ``actor`` is not bound to ``namespace`` (None: it is)."""
    if actor.tenant != namespace.tenant:
        return f"the actor belongs to tenant {actor.tenant!r}, not {namespace.tenant!r}"
    if actor.role is Role.OPERATOR:
        return None
    owner = actor.owner_in(namespace.scope)
    if owner != namespace.owner:
        acting = "nobody" if owner is None else repr(owner)
        return (f"the actor acts for {acting} in scope {namespace.scope.value!r}, not for "
                f"{namespace.owner!r}")
    return None


def decide(policy: Policy, actor: Actor, namespace: Namespace, kind: str) -> Decision:
    """Whether ``actor`` may write a memory of ``kind`` into ``namespace``, and how."""
    unbound = binding(actor, namespace)
    if unbound is not None:
        return Decision(Outcome.REFUSE, unbound)
    for i, rule in enumerate(policy.rules):
        if rule.matches(namespace.scope, kind, actor.role):
            return Decision(rule.outcome, f"policy {policy.version} rule {i}", i)
    return Decision(policy.default, f"policy {policy.version} default")


def _governs(roles: Mapping[Scope, frozenset[Role]], actor: Actor,
             namespace: Namespace) -> str | None:
    unbound = binding(actor, namespace)
    if unbound is not None:
        return unbound
    if actor.role not in roles.get(namespace.scope, frozenset()):
        allowed = sorted(r.value for r in roles.get(namespace.scope, frozenset()))
        return (f"in scope {namespace.scope.value!r} only "
                f"{', '.join(allowed) or 'nobody'} may")
    return None


def require_write(policy: Policy, actor: Actor, namespace: Namespace, kind: str) -> Decision:
    """:func:`decide`, raising :class:`MemoryRefused` on ``refuse``."""
    d = decide(policy, actor, namespace, kind)
    if d.outcome is Outcome.REFUSE:
        raise MemoryRefused(str(actor), namespace.key, f"write a {kind!r} memory", d.reason)
    return d


def require_confirm(policy: Policy, actor: Actor, namespace: Namespace) -> None:
    why = _governs(policy.confirmers, actor, namespace)
    if why is not None:
        raise MemoryRefused(str(actor), namespace.key, "confirm or reject memories", why)


def require_forget(policy: Policy, actor: Actor, namespace: Namespace) -> None:
    why = _governs(policy.forgetters, actor, namespace)
    if why is not None:
        raise MemoryRefused(str(actor), namespace.key, "forget memories", why)


__all__: Sequence[str] = ("DEFAULT_POLICY", "Decision", "Outcome", "Policy", "Rule",
                          "binding", "decide", "require_confirm", "require_forget",
                          "require_write")
