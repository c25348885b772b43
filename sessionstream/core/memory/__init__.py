"""Long-term memory's pure core: records, operations, the fold, lineage, policy, search.

Memory is one level up the session's pattern (docs/adr/0030-long-term-memory.md): its
operations are records of a per-tenant memory topic keyed by namespace
(:mod:`.model`), folded per namespace into a state (:mod:`.fold`) whose versions carry
their provenance (source sessions and seqs, the extractor) and validity; deleting a
session forgets what was derived only from it (:mod:`.lineage`); an authorization policy
decides per scope, kind and role what is accepted, waits for confirmation or is refused
(:mod:`.policy`); search ranks lexically and by vectors in process (:mod:`.search`).
Standard library only, like the rest of the core.
"""

from sessionstream.core.memory.errors import (
    InvalidMemory,
    InvalidPolicy,
    MemoryLogError,
    MemoryRefused,
    NamespaceMismatch,
)
from sessionstream.core.memory.fold import (
    MemoryState,
    Rejection,
    apply,
    derived_from,
    dump,
    explain,
    fold,
    init,
    load,
)
from sessionstream.core.memory.lineage import ForgetPlan, forget_plan
from sessionstream.core.memory.model import (
    Actor,
    ActorRef,
    AnyOp,
    Confirm,
    Confirmation,
    Draft,
    Extractor,
    Forget,
    Memory,
    Method,
    Namespace,
    Propose,
    Ref,
    Role,
    Scope,
    Source,
    Supersede,
    Touch,
    Version,
    content_digest,
    op_from_json,
)
from sessionstream.core.memory.policy import DEFAULT_POLICY, Decision, Outcome, Policy, Rule

__all__ = [
    "DEFAULT_POLICY", "Actor", "ActorRef", "AnyOp", "Confirm", "Confirmation", "Decision",
    "Draft", "Extractor", "Forget", "ForgetPlan", "InvalidMemory", "InvalidPolicy", "Memory",
    "MemoryLogError", "MemoryRefused", "MemoryState", "Method", "Namespace",
    "NamespaceMismatch", "Outcome", "Policy", "Propose", "Ref", "Rejection", "Role", "Rule",
    "Scope", "Source", "Supersede", "Touch", "Version", "apply", "content_digest",
    "derived_from", "dump", "explain", "fold", "forget_plan", "init", "load", "op_from_json",
]
