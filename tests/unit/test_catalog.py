"""The event catalog: schemas per type, reserved namespaces, plugin domains."""

from __future__ import annotations

import pytest

from sessionstream.core.catalog import EventType, F, Obj, default_catalog
from sessionstream.core.errors import CatalogError, SchemaViolation, UnknownEventType
from sessionstream.core.events import SurfaceOp


def test_every_core_type_of_the_seed_lab_is_registered() -> None:
    cat = default_catalog()
    for name in [
        "session/start", "session/end-seed", "turn/start", "turn/end", "step/start",
        "step/end", "user/message", "request/header", "assistant/chunk",
        "assistant/message", "tool/call", "tool/result", "context/snapshot",
        "compaction/start", "compaction/summary", "compaction/end",
    ]:
        assert name in cat


def test_a_missing_required_field_names_the_type_and_path() -> None:
    with pytest.raises(SchemaViolation, match=r"tool/result: data at \$\.call_id"):
        default_catalog().validate("tool/result", {"status": "ok"})


def test_an_enum_value_outside_the_list_is_refused() -> None:
    with pytest.raises(SchemaViolation, match="reason"):
        default_catalog().validate("turn/end", {"reason": "gave-up"})


def test_a_bool_is_not_accepted_as_an_integer() -> None:
    with pytest.raises(SchemaViolation, match="expected int"):
        default_catalog().validate("session/end-seed", {"reason": "fork", "seed_length": True})


def test_nested_tool_calls_are_checked_item_by_item() -> None:
    with pytest.raises(SchemaViolation, match=r"tool_calls\[0\]\.name"):
        default_catalog().validate(
            "assistant/message",
            {"content": "", "tool_calls": [{"call_id": "c1", "arguments": {}}]},
        )


def test_extra_fields_are_kept_for_forward_compatibility() -> None:
    default_catalog().validate("goal/set", {"goal": "g", "added_in_v2": 1})


def test_unknown_types_are_refused_with_a_hint() -> None:
    with pytest.raises(UnknownEventType, match="register it"):
        default_catalog().validate("todo/explode", {})


def test_plugins_cannot_take_a_core_namespace() -> None:
    with pytest.raises(CatalogError, match="reserved"):
        default_catalog().register_domain(EventType("tool/mine", Obj({"x": F("str")})))


def test_plugin_types_cannot_enter_the_model_surface() -> None:
    with pytest.raises(CatalogError, match="context/snapshot"):
        default_catalog().register_domain(
            EventType("notes/add", surface_ops=(SurfaceOp.APPEND,))
        )


def test_registering_a_type_twice_is_an_error() -> None:
    with pytest.raises(CatalogError, match="twice"):
        default_catalog().register_domain(EventType("todo/add"))


def test_domain_types_declare_whether_readers_may_skip_them() -> None:
    cat = default_catalog()
    assert cat.require("todo/add").ignorable is True
    assert cat.require("business/approval").ignorable is False
