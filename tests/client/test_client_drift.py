"""The client cannot drift from the API: its generated modules are what the generator writes from
the current OpenAPI schema, and each method answers the type its operation's responses declare."""

from __future__ import annotations

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
