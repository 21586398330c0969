"""The client cannot drift from the API: its generated modules are what the generator writes from
the current OpenAPI schema, and each method answers the type its operation's responses declare."""

from __future__ import annotations

import collections.abc
import typing
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from tests.client.conftest import CLIENT_FOLDER

PACKAGE = Path(CLIENT_FOLDER) / "memory_client"


@pytest.fixture
def schema(client: Client) -> dict[str, Any]:
    return client.get("/api/schema/", {"format": "json"}).json()


def generator() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("memory_client_generate", Path(CLIENT_FOLDER) / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_clients_models_are_what_the_generator_writes_from_the_current_schema(schema: dict[str, Any]) -> None:
    written = generator().models_source(schema)
    assert (PACKAGE / "models.py").read_text() == written, (
        "memory_client/models.py is not the current schema's: run "
        "`manage.py spectacular --format openapi-json --file /tmp/schema.json && "
        "python clients/python/generate.py /tmp/schema.json`"
    )


def test_the_sync_client_is_the_async_client_without_its_async_keywords() -> None:
    written = generator().sync_source((PACKAGE / "_async.py").read_text())
    assert (PACKAGE / "_sync.py").read_text() == written, "memory_client/_sync.py is stale: run generate.py"


def test_a_schema_with_a_new_field_makes_the_models_differ(schema: dict[str, Any]) -> None:
    """The check above can fail: a field added to a response changes the models written."""
    schema["components"]["schemas"]["ThreadOut"]["properties"]["colour"] = {"type": "string"}
    assert "    colour: NotRequired[str]" in generator().models_source(schema)
    assert (PACKAGE / "models.py").read_text() != generator().models_source(schema)


def _declared(schema: dict[str, Any], operation_id: str) -> set[str]:
    """The names of the response shapes an operation's successes declare ('str' for a text body)."""
    for item in schema["paths"].values():
        for operation in item.values():
            if isinstance(operation, dict) and operation.get("operationId") == operation_id:
                names: set[str] = set()
                for status, response in operation["responses"].items():
                    if not status.startswith("2"):
                        continue
                    content = response.get("content", {})
                    if not content:
                        names.add("None")
                    for media, body in content.items():
                        node = body.get("schema", {})
                        if media == "text/event-stream":
                            names.add("StreamEvent")  # a stream of events, each decoded (see below)
                            continue
                        if media != "application/json":
                            names.add("str")
                            continue
                        names |= _members(schema, node)
                return names
    raise AssertionError(f"no operation {operation_id} in the schema")


def _members(schema: dict[str, Any], node: dict[str, Any]) -> set[str]:
    """The shapes a body may be: a component, or each member of a oneOf (itself a component or not)."""
    if "oneOf" in node:
        return {name for member in node["oneOf"] for name in _members(schema, member)}
    name = node["$ref"].rsplit("/", 1)[1]
    component = schema["components"]["schemas"][name]
    return _members(schema, component) if "oneOf" in component else {name}


def _answered(annotation: Any) -> set[str]:
    if typing.get_origin(annotation) in (collections.abc.Iterator, collections.abc.AsyncIterator):
        (item,) = typing.get_args(annotation)
        return {item.__name__}
    members = typing.get_args(annotation) if typing.get_origin(annotation) in (typing.Union, type(int | str)) else ()
    return {getattr(m, "__name__", str(m)) for m in members} if members else {getattr(annotation, "__name__", "")}


def test_every_client_method_answers_the_types_its_operation_declares(schema: dict[str, Any]) -> None:
    from memory_client import OPERATIONS, AsyncMemoryClient, MemoryClient

    by_operation: dict[str, set[str]] = {}
    for method, operation_id in OPERATIONS.items():
        for cls in (MemoryClient, AsyncMemoryClient):
            hints = typing.get_type_hints(getattr(cls, method))
            by_operation.setdefault(operation_id, set()).update(
                {"None" if n == "NoneType" else n for n in _answered(hints["return"])}
            )
    for operation_id, answered in by_operation.items():
        assert answered == _declared(schema, operation_id), operation_id
    # Every operation of the schema has its method.
    operation_ids = {
        op["operationId"] for item in schema["paths"].values() for op in item.values() if isinstance(op, dict)
    }
    assert operation_ids == set(OPERATIONS.values())


def test_a_streamed_event_holds_the_shapes_the_schema_gives_the_events(schema: dict[str, Any]) -> None:
    """GET /events is text: its frames' data are the events page's shapes (EventOut, and MissedOut
    for a gap), which the stream's description names."""
    from memory_client import StreamEvent, models

    hints = typing.get_type_hints(StreamEvent, vars(models))
    assert _answered(hints["change"]) == {"EventOut", "NoneType"}
    assert _answered(hints["missed"]) == {"MissedOut", "NoneType"}
    components = schema["components"]["schemas"]
    page = components["EventPageOut"]["properties"]
    assert page["results"]["items"] == {"$ref": "#/components/schemas/EventOut"}
    assert {"$ref": "#/components/schemas/MissedOut"} in page["missed"].get("allOf", [page["missed"]])
    described = schema["paths"]["/api/v1/events"]["get"]["responses"]["200"]["description"]
    assert set(components["EventOut"]["properties"]) <= {"seq", "type", "ids", "thread_id", "at"}
    assert all(f'"{field}"' in described for field in ("seq", "type", "ids", "at")), described
    assert "event: gap" in described and "{from_seq, to_seq}" in described
