"""What every API view and serializer shares."""

from __future__ import annotations

import copy
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from memoryapp.errors import DomainError
from memoryapp.ids import person_id_check


def _fresh_field(field: serializers.Field) -> serializers.Field:
    """A copy of a declared field for one serializer instance to bind: a shallow copy (bind sets
    attributes of the copy only; the arguments, validators and messages stay shared, read-only),
    its child a fresh copy whose parent it is. A nested serializer is deep-copied, as DRF does."""
    if isinstance(field, serializers.BaseSerializer):
        return copy.deepcopy(field)
    fresh = copy.copy(field)
    if isinstance(field.default, list | dict | set):  # DRF hands the default itself to validated data
        fresh.default = copy.deepcopy(field.default)
    child = getattr(field, "child", None)
    if isinstance(child, serializers.Field):
        copied = _fresh_field(child)
        # bound (field_name "") when the field was made; now to its copy (a field, not a serializer)
        copied.parent = fresh  # type: ignore[assignment]
        fresh.child = copied  # type: ignore[attr-defined]
    return fresh


# serializer class -> its declared fields, deep-copied once: what each instance copies from.
_DECLARED: dict[type[serializers.Serializer], dict[str, serializers.Field]] = {}


class StrictSerializer(serializers.Serializer):
    """An input serializer that refuses fields it does not know (a typo is a 400, not ignored).

    Its fields are copied from a per-class set made once instead of deep-copied from the declared
    ones on every request, as DRF does: a deep copy builds each field anew (its validators, its
    messages), ~10% of a search's web CPU and ~8% of a context build's (issue 26)."""

    def get_fields(self) -> dict[str, serializers.Field]:
        declared = _DECLARED.get(type(self))
        if declared is None:
            declared = _DECLARED.setdefault(type(self), copy.deepcopy(self._declared_fields))
        return {name: _fresh_field(field) for name, field in declared.items()}

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({unknown[0]: ["Unknown field."]}, code="unknown_field")
        return super().to_internal_value(data)


def validated(serializer_class: type[serializers.Serializer], data: Any, **context: Any) -> dict[str, Any]:
    serializer = serializer_class(data=data, context=context)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


# --- output serializers ----------------------------------------------------------------------


class OutputSerializer(serializers.Serializer):
    """A response shape: what the OpenAPI schema (and so the docs page and generated clients) shows.

    A field declared `required=False` is one the API leaves out when it was never set (absent
    rather than null, as 004 writes entries): it is dropped from an answer when it holds None or
    "", and a dict without its key leaves it out too. (Read-only fields, such as a
    SerializerMethodField, are always answered.)
    """

    def to_representation(self, instance: Any) -> Any:
        body = super().to_representation(instance)
        for name, field in self.fields.items():
            optional = not field.required and not field.read_only
            if optional and name in body and (body[name] is None or body[name] == ""):
                del body[name]
        return body


class IsoDateTimeField(serializers.DateTimeField):
    """A time as the API has always written it: ISO 8601 with its offset (`+00:00`, not `Z`)."""

    def to_representation(self, value: Any) -> Any:
        return value.isoformat()


@extend_schema_field({"type": "object", "additionalProperties": {}})
class JsonObjectField(serializers.Field):
    """A JSON object of the client's (metadata) or of a job's (result, usage).

    A required one is never null (unset is {}); an optional one is left out when unset.
    """

    def get_attribute(self, instance: Any) -> Any:
        value = super().get_attribute(instance)
        return value or {} if self.required else value

    def to_representation(self, value: Any) -> Any:
        return value


class TextOrNullField(serializers.CharField):
    """A text column whose empty value the API answers as null (a job's error, a rename's source)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(allow_null=True, **kwargs)

    def get_attribute(self, instance: Any) -> Any:
        return super().get_attribute(instance) or None


class PersonIdField(serializers.CharField):
    """A person id (`user_id`) as every input serializer takes it: the one rule of `person_id_check`,
    untrimmed (a space or newline at either end is refused, not silently cut, so the id stored is the
    one the client will name again), "" for no person."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault("allow_blank", True)
        kwargs.setdefault("help_text", "The person this is about: at most 128 printable characters, no `/`.")
        super().__init__(trim_whitespace=False, **kwargs)

    def to_internal_value(self, data: Any) -> str:
        value = super().to_internal_value(data)
        try:
            return person_id_check(value, field=self.field_name or "user_id")
        except DomainError as exc:
            raise serializers.ValidationError(exc.message, code=exc.code) from exc
