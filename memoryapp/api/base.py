"""What every API view and serializer shares."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers


class StrictSerializer(serializers.Serializer):
    """An input serializer that refuses fields it does not know (a typo is a 400, not ignored)."""

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
