"""The OpenAPI schema describes every response, and every response fits it.

1. The schema generates with drf-spectacular's validation and no warning.
2. Every success response of every operation has described fields (no untyped object), and
   every operation states its errors in the one error shape.
3. A tour of the API (tests/api_tour.py) calls every operation; each answer must fit the
   response its status declares: no field the schema does not name, every required field
   there, each of the right type. Some answers are built by hand for speed (entries, the
   context, search hits) or come from a service's own result (compaction): this is what keeps
   them and their declared serializers from drifting apart.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import Client
from django.utils.translation import get_language
from drf_spectacular.drainage import GENERATOR_STATS
from drf_spectacular.plumbing import _load_enum_name_overrides, deep_import_string
from drf_spectacular.settings import patched_settings

from tests.kit.api import Caller
from tests.kit.api_tour import Visit, api_tour

METHODS = ("get", "post", "put", "patch", "delete")
WRITES = ("post", "put", "patch", "delete")


@pytest.fixture
def schema(client: Client) -> dict[str, Any]:
    return client.get("/api/schema/", {"format": "json"}).json()


def operations(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path, method, operation)
        for path, item in schema["paths"].items()
        for method, operation in item.items()
        if method in METHODS
    ]


def resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
    return node


# --- what "described" means ------------------------------------------------------------------


def undescribed(schema: dict[str, Any], node: dict[str, Any] | None) -> str | None:
    """Why a response body schema does not describe its fields (None: it does)."""
    if not node:
        return "no schema"
    node = resolve(schema, node)
    for combined in ("oneOf", "anyOf", "allOf"):
        if combined in node:
            reasons = [undescribed(schema, member) for member in node[combined]]
            return next((r for r in reasons if r), None)
    if node.get("type") == "object" or "properties" in node or not node.get("type"):
        return None if node.get("properties") else "an object without described fields"
    return None


def test_an_untyped_or_free_form_object_is_not_a_described_response(schema: dict[str, Any]) -> None:
    for bare in ({}, {"type": "object"}, {"type": "object", "additionalProperties": {}}, None):
        assert undescribed(schema, bare), bare
    assert undescribed(schema, {"oneOf": [{"$ref": "#/components/schemas/ThreadOut"}, {"type": "object"}]})
    assert undescribed(schema, {"$ref": "#/components/schemas/ThreadOut"}) is None


def _as_a_fresh_process() -> None:
    """Forget what an earlier schema generation of this process cached and reported: drf-spectacular
    reads ENUM_NAME_OVERRIDES once per process (an lru_cache) and warns about them only then, so
    after any test that fetched /api/schema/ a bad override went unreported and this test passed
    only when it ran first (`manage.py spectacular`, a process of its own, always reports it)."""
    assert hasattr(_load_enum_name_overrides, "cache_clear"), "drf-spectacular changed: see _as_a_fresh_process"
    _load_enum_name_overrides.cache_clear()
    GENERATOR_STATS.reset()


def test_the_schema_generates_with_validation_and_without_a_warning(tmp_path: Path, client: Client) -> None:
    """`manage.py spectacular --validate --fail-on-warn`: an unresolved field, a guessed
    serializer or an enum name collision fails it, whatever ran before it in this process."""
    assert client.get("/api/schema/", {"format": "json"}).status_code == 200  # what an earlier test may do
    _as_a_fresh_process()
    target = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(target))
    assert "ThreadOut" in target.read_text()


def test_every_enum_name_override_names_one_choice_set_of_its_own() -> None:
    """Each ENUM_NAME_OVERRIDES entry imports (a module moved in a relayout leaves a dead path:
    drf-spectacular then names the enum by a hash and reports a "duplication issue"), and no two
    name the same choices."""
    overrides = settings.SPECTACULAR_SETTINGS["ENUM_NAME_OVERRIDES"]
    for name, where in overrides.items():
        assert deep_import_string(where), f"{name}: {where} does not import"
    _as_a_fresh_process()
    assert len(_load_enum_name_overrides(get_language())) == len(overrides)
    assert not GENERATOR_STATS, "ENUM_NAME_OVERRIDES: a warning or an error"


def test_a_dead_enum_override_path_is_reported() -> None:
    """The check above can fail: a path that does not import is a warning and a duplication error."""
    overrides = dict(settings.SPECTACULAR_SETTINGS["ENUM_NAME_OVERRIDES"])
    overrides["CompactionStrategyEnum"] = "memoryapp.compaction.strategies.STRATEGY_NAMES"  # before the relayout
    assert deep_import_string(overrides["CompactionStrategyEnum"]) is None
    try:
        with patched_settings({"ENUM_NAME_OVERRIDES": overrides}):
            _as_a_fresh_process()
            assert len(_load_enum_name_overrides(get_language())) == len(overrides) - 1
            assert GENERATOR_STATS, "no warning for a dead path"
    finally:
        _as_a_fresh_process()


def test_every_success_response_describes_its_fields(schema: dict[str, Any]) -> None:
    problems = []
    for path, method, operation in operations(schema):
        successes = {status: r for status, r in operation["responses"].items() if status.startswith("2")}
        if not successes:
            problems.append(f"{method.upper()} {path}: no success response")
        for status, response in successes.items():
            content = response.get("content")
            if status == "204":
                if content:
                    problems.append(f"{method.upper()} {path} 204: a body")
                continue
            if not content:
                problems.append(f"{method.upper()} {path} {status}: no body described")
                continue
            for media_type, body in content.items():
                if media_type in ("application/x-ndjson", "text/event-stream"):
                    if body.get("schema", {}).get("type") != "string" or not response.get("description"):
                        problems.append(f"{method.upper()} {path} {status}: {media_type} without a described text")
                    continue
                reason = undescribed(schema, body.get("schema"))
                if reason:
                    problems.append(f"{method.upper()} {path} {status} {media_type}: {reason}")
    assert not problems, "\n".join(problems)


def _names_the_error_shape(schema: dict[str, Any], response: dict[str, Any]) -> bool:
    body = resolve(schema, response.get("content", {}).get("application/json", {}).get("schema", {}))
    error = resolve(schema, body.get("properties", {}).get("error", {}))
    return {"code", "message", "field"} <= set(error.get("properties", {})) and {"code", "message"} <= set(
        error.get("required", [])
    )


def test_every_operation_declares_its_errors_in_the_one_error_shape(schema: dict[str, Any]) -> None:
    problems = []
    for path, method, operation in operations(schema):
        takes_input = "requestBody" in operation or any(p["in"] == "query" for p in operation.get("parameters", []))
        wanted = {"401"}
        wanted |= {"400"} if takes_input else set()
        wanted |= {"404"} if "{" in path else set()
        wanted |= {"409", "413"} if method in WRITES else set()
        responses = operation["responses"]
        missing = wanted - set(responses)
        if missing:
            problems.append(f"{method.upper()} {path}: no {sorted(missing)}")
        for status, response in responses.items():
            if status.startswith("4") and not _names_the_error_shape(schema, response):
                problems.append(f"{method.upper()} {path} {status}: not the error shape")
    assert not problems, "\n".join(problems)
    assert resolve(schema, {"$ref": "#/components/schemas/ErrorOut"})["required"] == ["error"]


# --- every answer fits its declaration -------------------------------------------------------------


class Misfit(AssertionError):
    pass


def fit(schema: dict[str, Any], node: dict[str, Any], value: Any, where: str, seen: set[str]) -> None:
    """Check `value` against the OpenAPI schema `node`; raise Misfit naming the place.

    Objects are checked strictly: a key the schema does not name is a misfit (drift), and so is
    a required key that is missing. `seen` collects "Component.field" of every field met.
    """
    name = node["$ref"].rsplit("/", 1)[1] if "$ref" in node else None
    node = resolve(schema, node)
    if value is None:
        if node.get("nullable") or node == {}:
            return
        raise Misfit(f"{where}: null, and the schema does not allow it")
    if "allOf" in node:
        for member in node["allOf"]:
            fit(schema, member, value, where, seen)
        return
    if "oneOf" in node:
        fitting = []
        for member in node["oneOf"]:
            try:
                fit(schema, member, value, where, set())
            except Misfit:
                continue
            fitting.append(member)
        if len(fitting) != 1:
            raise Misfit(f"{where}: fits {len(fitting)} of the oneOf alternatives, not exactly one: {value!r:.200}")
        fit(schema, fitting[0], value, where, seen)
        return
    if "enum" in node and value not in node["enum"]:
        raise Misfit(f"{where}: {value!r} is not one of {node['enum']}")
    kind = node.get("type")
    checks = {
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
        "array": lambda v: isinstance(v, list),
        "object": lambda v: isinstance(v, dict),
    }
    if kind and not checks[kind](value):
        raise Misfit(f"{where}: {value!r:.100} is not of type {kind}")
    if kind == "string" and node.get("format") == "date-time":
        try:
            datetime.fromisoformat(value)
        except ValueError:
            raise Misfit(f"{where}: {value!r} is not an ISO 8601 date-time") from None
    if kind == "array":
        for index, item in enumerate(value):
            fit(schema, node.get("items", {}), item, f"{where}[{index}]", seen)
    if isinstance(value, dict) and "properties" in node:
        properties = node["properties"]
        unknown = sorted(set(value) - set(properties))
        if unknown and not node.get("additionalProperties"):
            raise Misfit(f"{where}: {unknown} answered but not in the schema{f' of {name}' if name else ''}")
        missing = sorted(set(node.get("required", [])) - set(value))
        if missing:
            raise Misfit(f"{where}: {missing} required by the schema{f' of {name}' if name else ''} but absent")
        for key, item in value.items():
            if key in properties:
                if name:
                    seen.add(f"{name}.{key}")
                fit(schema, properties[key], item, f"{where}.{key}", seen)
    elif isinstance(value, dict) and isinstance(node.get("additionalProperties"), dict):
        for key, item in value.items():
            fit(schema, node["additionalProperties"], item, f"{where}.{key}", seen)


def test_an_answer_with_a_field_the_schema_does_not_name_or_without_a_required_one_does_not_fit(
    schema: dict[str, Any],
) -> None:
    thread = {"$ref": "#/components/schemas/ThreadOut"}
    answer = {
        "id": "t",
        "user_id": "",
        "metadata": {},
        "active_leaf_id": None,
        "forked_from": None,
        "created_at": "2026-03-04T10:00:00+00:00",
        "updated_at": "2026-03-04T10:00:00+00:00",
    }
    fit(schema, thread, answer, "thread", set())
    for wrong in (
        {**answer, "colour": "blue"},
        {k: v for k, v in answer.items() if k != "user_id"},
        {**answer, "id": None},
        {**answer, "metadata": []},
        {**answer, "created_at": "yesterday"},
    ):
        with pytest.raises(Misfit):
            fit(schema, thread, wrong, "thread", set())


def declared_body(schema: dict[str, Any], visit: Visit) -> dict[str, Any] | None:
    operation = schema["paths"][visit.path][visit.method.lower()]
    response = operation["responses"].get(str(visit.status))
    if response is None:
        raise Misfit(f"{visit.method} {visit.url}: answered {visit.status}, which the schema does not declare")
    content = response.get("content")
    if not content:
        return None
    if visit.content_type not in content:
        raise Misfit(f"{visit.method} {visit.url}: answered {visit.content_type}, declared {sorted(content)}")
    return content[visit.content_type]["schema"]  # type: ignore[no-any-return]


# Declared fields the tour does not make the API answer (each needs a failure or a rarer state).
RARELY_ANSWERED = {
    "ProblemOut.source",  # a failed embedder or store
    "ProblemOut.message",
    "CompactedOut.reason",
    "CompactedOut.partial",  # the zero-model tier leaving something out
    "CompactionSkippedOut.partial",
    "EventPageOut.missed",  # retention deleted events before the reader read them
    "MissedOut.from_seq",
    "MissedOut.to_seq",
}


def test_every_answer_of_the_tour_fits_the_schema_and_the_tour_visits_every_operation(
    alice: Caller, schema: dict[str, Any]
) -> None:
    visits = api_tour(alice)
    seen: set[str] = set()
    misfits = []
    for visit in visits:
        try:
            body_schema = declared_body(schema, visit)
            if body_schema is not None:
                fit(schema, body_schema, visit.body(), f"{visit.method} {visit.url} {visit.status}", seen)
            elif visit.response.content:
                raise Misfit(f"{visit.method} {visit.url}: a body where the schema declares none")
        except Misfit as misfit:
            misfits.append(str(misfit))
    assert not misfits, "\n".join(misfits)

    answered = {(v.path, v.method.lower()) for v in visits if 200 <= v.status < 300}
    unvisited = [f"{m.upper()} {p}" for p, m, _ in operations(schema) if (p, m) not in answered]
    assert not unvisited, f"operations the tour never gets a success from: {unvisited}"

    declared = {
        f"{name}.{field}"
        for name, component in schema["components"]["schemas"].items()
        for field in component.get("properties", {})
        if name.endswith("Out") and name not in ("ErrorOut", "ErrorDetailOut")
    }
    never = sorted(declared - seen - RARELY_ANSWERED)
    assert not never, f"declared fields no answer of the tour holds: {never}"
