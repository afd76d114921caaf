"""What the serializers share: the bounds of the database's columns, for their `max_value`,
strict string fields (`strict_strings`), and bodies that hold only known fields (`KnownFields`).

The parsers refuse integers outside 64 bits (`hub.api.parsers`); an integer within them that its
column cannot hold (PostgreSQL's `integer` holds at most 2^31 - 1) must be refused by the field
that takes it, naming it, before the database raises.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

# PositiveSmallIntegerField (PostgreSQL smallint).
SMALLINT_MAX = 2**15 - 1
# PositiveIntegerField, IntegerField (PostgreSQL integer).
INTEGER_MAX = 2**31 - 1
# BigIntegerField, BigAutoField (PostgreSQL bigint).
BIGINT_MIN = -(2**63)
BIGINT_MAX = 2**63 - 1
# The largest finite 32-bit float (a float32 column stores a larger double as infinity).
FLOAT32_MAX = 3.4028234663852886e38


NOT_A_STRING = "Not a valid string."


def strict_strings() -> None:
    """Make DRF's string fields take what the schema says they take: a JSON string, kept as
    sent. Installed once, at start-up (`hub.apps.HubConfig.ready`), for every serializer.

    DRF's `CharField`, and every field built on it (`RegexField`, `SlugField`, `EmailField`,
    …), coerces a number to its text (`{"name": 5}` named a group "5") and trims whitespace
    before its checks (`" lab"` passed a pattern that refuses a space, and 65 characters passed
    `maxLength` 64), so the API accepted bodies that its OpenAPI schema, which says `type:
    string`, `pattern` and `maxLength` of the value as sent, calls invalid. Here a value that is
    not a string is refused ("Not a valid string."), and a value is no longer trimmed unless a
    field asks for it (`trim_whitespace=True`). A form's values are strings anyway.
    """
    field = serializers.CharField
    if getattr(field, "_strict_strings", False):
        return
    initialize = field.__init__
    to_internal_value = field.to_internal_value

    def __init__(self: serializers.CharField, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        initialize(self, **kwargs)

    def strict_to_internal_value(self: serializers.CharField, data: Any) -> str:
        if not isinstance(data, str):
            # Not self.fail("invalid"): a RegexField's "invalid" speaks of its pattern.
            raise serializers.ValidationError(NOT_A_STRING, code="invalid")
        return to_internal_value(self, data)

    field.__init__ = __init__  # type: ignore[method-assign]
    field.to_internal_value = strict_to_internal_value  # type: ignore[method-assign]
    field._strict_strings = True  # type: ignore[attr-defined]


class KnownFields(serializers.Serializer[Any]):
    """A request body of its writable fields and no other: an unknown one (a typo, a field the
    hub does not take, one it only shows) is refused, naming it, rather than ignored."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            writable = {name for name, field in self.fields.items() if not field.read_only}
            unknown = sorted(set(data) - writable)
            if unknown:
                raise serializers.ValidationError({name: ["unknown field"] for name in unknown})
        return super().to_internal_value(data)
