"""Versions and npm version ranges for the hub; the implementation is `predictors.versioning`
(the hub depends on `predictors`, never the reverse)."""

from predictors.versioning import (
    InvalidRange,
    InvalidVersion,
    Version,
    is_valid_version,
    max_satisfying,
    parse_version,
    satisfies,
    validate_range,
    version_key,
)

__all__ = [
    "InvalidRange",
    "InvalidVersion",
    "Version",
    "is_valid_version",
    "max_satisfying",
    "parse_version",
    "satisfies",
    "validate_range",
    "version_key",
]
