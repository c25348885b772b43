"""Request assembly: sections, tools, variables, context snapshots, header, explain()."""

from __future__ import annotations

import json

import pytest

from sessionstream.core.errors import (
    ConflictingCompleteSections,
    DuplicateSection,
    HiddenTool,
    MissingPromptVariable,
    PendingToolCalls,
    RequestAssemblyError,
    UnknownTool,
)
from sessionstream.core.events import SurfaceOp
from sessionstream.core.projections import default_registry
from sessionstream.core.request import (
    PromptRegistry,
    RequestHeader,
    StaticTools,
    ToolSchema,
    assemble,
    context_snapshot_ids,
    explain,
    header_from_event,
    materialize_context,
    render,
    replaced_seqs,
    resolve_header,
    resolve_tools,
)
from tests.unit.logbuilder import LogBuilder

HEADER = RequestHeader("openai", "gpt-x", sources=(("model", "agent"), ("provider", "agent")))


def surface(b: LogBuilder):
    return list(default_registry().fold(b.events).states["surface"].messages)


def prompts() -> PromptRegistry:
    reg = PromptRegistry()
    reg.section("identity", "You are the harness.", order=0)
    reg.section("persona", "Persona for {tenant}.", order=10)
    reg.section("tools", "Use tools carefully.", order=20)
    reg.section("persona", "Analyst persona for {tenant}, {{strict}}.", order=10,
                scope="analyst")
    return reg


def providers():
    return [
        StaticTools("files", [ToolSchema("read_file"), ToolSchema("write_file")],
                    visibility={None: ["read_file"], "admin": ["read_file", "write_file"]}),
        StaticTools("billing", [ToolSchema("send_invoice", "bill",
                                           {"type": "object", "required": ["to"]})]),
    ]


# sections -------------------------------------------------------------------------------

def test_a_scoped_section_shadows_the_global_one_with_the_same_id():
    reg = prompts()
    glob = [s.id for s in reg.effective(None)]
    scoped = reg.effective("analyst")
    assert glob == ["identity", "persona", "tools"]
    assert [s.id for s in scoped] == ["identity", "persona", "tools"]
    assert scoped[1].scope == "analyst"
    assert [s.scope for s in reg.effective("other")] == [None, None, None]


def test_a_complete_section_is_exclusive():
    reg = prompts()
    reg.section("full", "Everything.", scope="audit", complete=True)
    assert [s.id for s in reg.effective("audit")] == ["full"]
    assert len(reg.effective(None)) == 3


def test_two_effective_complete_sections_fail_assembly():
    reg = prompts()
    reg.section("full", "A", complete=True)
    reg.section("other-full", "B", scope="x", complete=True)
    assert [s.id for s in reg.effective("y")] == ["full"]
    with pytest.raises(ConflictingCompleteSections, match="full"):
        reg.effective("x")


def test_a_scoped_complete_section_shadowing_a_global_complete_one_is_not_a_conflict():
    reg = PromptRegistry()
    reg.section("full", "global", complete=True)
    reg.section("full", "scoped", scope="x", complete=True)
    assert [s.text for s in reg.effective("x")] == ["scoped"]


def test_registering_the_same_section_twice_in_a_scope_is_refused():
    reg = prompts()
    with pytest.raises(DuplicateSection):
        reg.section("identity", "again")


# variables ------------------------------------------------------------------------------

def test_variables_are_substituted_and_double_braces_are_literal():
    assert render("a {x} {{y}} {x}", {"x": 1}, "s") == ("a 1 {y} 1", ("x",))


def test_a_missing_variable_names_the_variable_and_the_section():
    with pytest.raises(MissingPromptVariable, match=r"'persona' uses \{tenant\}"):
        assemble([], prompts(), header=HEADER)


# tools ----------------------------------------------------------------------------------

def test_a_misspelled_tool_is_unknown_and_suggests_the_closest_name():
    with pytest.raises(UnknownTool, match="did you mean 'send_invoice'") as info:
        resolve_tools(providers(), None, ["send_invoce"])
    assert info.value.suggestion == "send_invoice"


def test_a_known_tool_hidden_in_this_scope_is_a_different_error():
    with pytest.raises(HiddenTool, match="'write_file' \\(provider 'files'\\)"):
        resolve_tools(providers(), None, ["write_file"])
    parts = resolve_tools(providers(), "admin", ["write_file"])
    assert parts[0].provider == "files"


def test_without_names_every_visible_tool_is_offered_in_a_stable_order():
    names = [t.schema.name for t in resolve_tools(providers(), None)]
    assert names == ["read_file", "send_invoice"]


def test_one_tool_offered_by_two_providers_is_refused():
    twice = [StaticTools("a", [ToolSchema("t")]), StaticTools("b", [ToolSchema("t")])]
    with pytest.raises(RequestAssemblyError, match="both 'a' and 'b'"):
        resolve_tools(twice, None)


# context snapshots ----------------------------------------------------------------------

def test_context_is_materialized_only_when_the_full_snapshot_changes():
    b = LogBuilder()
    draft = materialize_context(b.events, "workspace: clean", ["git"])
    assert draft is not None and draft.type == "context/snapshot"
    assert draft.surface_op is SurfaceOp.APPEND and draft.data["sources"] == ["git"]
    b.add("context/snapshot", draft.data, surface_op="append")
    assert materialize_context(b.events, "workspace: clean") is None
    assert materialize_context(surface(b), "workspace: clean") is None
    changed = materialize_context(b.events, "workspace: dirty")
    assert changed is not None and changed.data["snapshot_id"] != draft.data["snapshot_id"]


def test_snapshot_ids_are_derived_from_content_so_rebuilds_agree():
    one = materialize_context([], "same")
    two = materialize_context([], "same")
    assert one is not None and two is not None and one.data == two.data


# header ---------------------------------------------------------------------------------

def test_the_header_records_which_layer_supplied_each_field():
    h = resolve_header(("call", {"max_tokens": 512}),
                       ("agent", {"model": "gpt-x", "reasoning_effort": None}),
                       ("adapter-default", {"provider": "openai", "model": "y",
                                            "reasoning_effort": "medium"}))
    assert (h.provider, h.model, h.reasoning_effort, h.max_tokens) == (
        "openai", "gpt-x", "medium", 512)
    assert dict(h.sources) == {"provider": "adapter-default", "model": "agent",
                               "reasoning_effort": "adapter-default", "max_tokens": "call"}


def test_a_header_without_provider_or_model_is_refused():
    with pytest.raises(RequestAssemblyError, match="'model'"):
        resolve_header(("call", {"provider": "p"}))


def test_a_logged_header_rebuilds_the_same_header():
    h = resolve_header(("agent", {"provider": "p", "model": "m", "max_tokens": 9}))
    b = LogBuilder()
    b.add("turn/start")
    b.add("step/start")
    event = b.add("request/header", h.to_draft().data)
    assert header_from_event(event) == h


# assemble / explain ---------------------------------------------------------------------

def _session() -> LogBuilder:
    b = LogBuilder()
    b.add("context/snapshot", materialize_context([], "ws v1", ["git"]).data,  # type: ignore[union-attr]
          surface_op="append")
    b.tool_turn("question", [("c1", "send_invoice")])
    return b


def test_assembly_is_refused_while_a_tool_call_on_the_surface_has_no_result():
    b = LogBuilder()
    b.add("turn/start")
    b.add("step/start")
    call = b.assistant("", [("c9", "search")])
    with pytest.raises(PendingToolCalls, match=f"c9 \\(seq {call.seq}\\)"):
        assemble(surface(b), prompts(), header=HEADER, variables={"tenant": "t"})


def test_rebuilding_from_the_same_log_and_registrations_gives_an_equal_request():
    def build():
        b = _session()
        return assemble(surface(b), prompts(), "analyst", header=HEADER,
                        tools=["send_invoice"], providers=providers(),
                        variables={"tenant": "acme", "unused": 1},
                        snapshot_ids=context_snapshot_ids(b.events))
    one, two = build(), build()
    assert one == two and hash(one.to_json().__repr__()) == hash(two.to_json().__repr__())
    assert one.variables == (("tenant", "acme"),)  # unused variables are not part of it
    assert "Analyst persona for acme, {strict}." in one.system_prompt
    assert json.loads(json.dumps(one.to_json())) == one.to_json()


def test_explain_names_the_source_of_every_part():
    b = _session()
    req = assemble(surface(b), prompts(), "analyst", header=HEADER, tools=["send_invoice"],
                   providers=providers(), variables={"tenant": "acme"},
                   snapshot_ids=context_snapshot_ids(b.events))
    parts = explain(req)
    by_part: dict[str, list] = {}
    for p in parts:
        by_part.setdefault(p["part"], []).append(p)
    assert {(p["field"], p["source"]) for p in by_part["header"]} == {
        ("provider", "agent"), ("model", "agent")}
    assert [(p["section"], p["scope"]) for p in by_part["system"]] == [
        ("identity", "global"), ("persona", "analyst"), ("tools", "global")]
    assert by_part["variable"] == [{"part": "variable", "name": "tenant",
                                    "sections": ["persona"]}]
    assert by_part["tool"] == [{"part": "tool", "name": "send_invoice", "provider": "billing"}]
    messages = by_part["message"]
    assert len(messages) == len(req.messages)
    ctx = messages[0]
    assert ctx["kind"] == "context" and ctx["seqs"] == [1]
    assert ctx["snapshot_id"] == b.events[1].data["snapshot_id"]
    assert all(m["seqs"] for m in messages)
    assert any(m.get("call_id") == "c1" for m in messages)


def test_explain_lists_the_seqs_a_summary_replaced():
    b = _session()
    shadowed = b.nodes[1:4]  # the user message, the call and its result
    summary = b.compact(shadowed)
    req = assemble(b.session.derive_messages(), prompts(), header=HEADER,
                   variables={"tenant": "t"}, replaced=replaced_seqs(b.events))
    assert req.replaced == ((summary.seq, tuple(shadowed)),)
    msgs = [p for p in explain(req) if p["part"] == "message"]
    assert [m for m in msgs if m["kind"] == "summary"] == [{
        "part": "message", "index": 1, "role": "user", "kind": "summary",
        "seqs": [summary.seq], "replaces": shadowed}]
    # without the map the summary is still marked, with nothing to cite
    bare = assemble(b.session.derive_messages(), prompts(), header=HEADER,
                    variables={"tenant": "t"})
    assert [m["replaces"] for m in explain(bare) if m["part"] == "message"
            and m["kind"] == "summary"] == [None]
