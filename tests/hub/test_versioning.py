"""Versions and npm version ranges.

Every expected value in these tables is what npm's own `semver` package (7.8.6) answers for the
same input (`semver.validRange`, `semver.satisfies`, `semver.maxSatisfying`, `semver.sort`),
except where a test says it checks one of our deliberate differences: versions we are given
must be strict SemVer 2.0.0, so `v1.2.3` or ` 1.2.3` is unparseable here although npm accepts it.
"""

from __future__ import annotations

import random
import re

import pytest

from predictors.manifests.versioning import (
    InvalidRange,
    InvalidVersion,
    is_valid_version,
    max_satisfying,
    parse_version,
    satisfies,
    validate_range,
    version_key,
)

# (range, npm's semver.validRange(range))
NORMALIZED = [
    # caret: changes that do not modify the left-most non-zero part
    ("^1.2.3", ">=1.2.3 <2.0.0-0"),
    ("^0.2.3", ">=0.2.3 <0.3.0-0"),
    ("^0.0.3", ">=0.0.3 <0.0.4-0"),
    ("^1.2.3-beta.2", ">=1.2.3-beta.2 <2.0.0-0"),
    ("^0.0.3-beta", ">=0.0.3-beta <0.0.4-0"),
    ("^1.2", ">=1.2.0 <2.0.0-0"),
    ("^1.x", ">=1.0.0 <2.0.0-0"),
    ("^0.x", "<1.0.0-0"),
    ("^0.0", "<0.1.0-0"),
    ("^1.2.x", ">=1.2.0 <2.0.0-0"),
    ("^ 1.2.3", ">=1.2.3 <2.0.0-0"),
    # tilde: patch-level changes if a minor version is given, else minor-level
    ("~1.2.3", ">=1.2.3 <1.3.0-0"),
    ("~1.2", ">=1.2.0 <1.3.0-0"),
    ("~1", ">=1.0.0 <2.0.0-0"),
    ("~0.2", ">=0.2.0 <0.3.0-0"),
    ("~0.2.3", ">=0.2.3 <0.3.0-0"),
    ("~1.2.3-beta.2", ">=1.2.3-beta.2 <1.3.0-0"),
    ("~>1.2.3", ">=1.2.3 <1.3.0-0"),
    ("~ 1.2", ">=1.2.0 <1.3.0-0"),
    # x-ranges, partial versions and "any"
    ("1.x", ">=1.0.0 <2.0.0-0"),
    ("1.2.*", ">=1.2.0 <1.3.0-0"),
    ("1.X.x", ">=1.0.0 <2.0.0-0"),
    ("1", ">=1.0.0 <2.0.0-0"),
    ("1.2", ">=1.2.0 <1.3.0-0"),
    ("*", "*"),
    ("X", "*"),
    ("x.x.x", "*"),
    ("", "*"),
    ("   ", "*"),
    ("||", "*"),
    (">=0.0.0", "*"),
    # x-ranges with an operator
    (">1", ">=2.0.0"),
    (">1.2", ">=1.3.0"),
    (">=1.2", ">=1.2.0"),
    ("<1.2", "<1.2.0-0"),
    ("<=1.2", "<1.3.0-0"),
    ("<=7.x", "<8.0.0-0"),
    ("=1.2.x", ">=1.2.0 <1.3.0-0"),
    (">x", "<0.0.0-0"),
    ("<*", "<0.0.0-0"),
    (">=*", "*"),
    # hyphen ranges, partial on either side
    ("1.2.3 - 2.3.4", ">=1.2.3 <=2.3.4"),
    ("1.2 - 2.3.4", ">=1.2.0 <=2.3.4"),
    ("1.2.3 - 2.3", ">=1.2.3 <2.4.0-0"),
    ("1.2.3 - 2", ">=1.2.3 <3.0.0-0"),
    ("1.2.3-rc.1 - 2.3.4-beta", ">=1.2.3-rc.1 <=2.3.4-beta"),
    ("x - 2.3.4", "<=2.3.4"),
    ("1.2.3 - x", ">=1.2.3"),
    # primitive comparators and comparator sets
    ("1.2.3", "1.2.3"),
    ("=1.2.3", "1.2.3"),
    ("v1.2.3", "1.2.3"),
    (">=1.2.7 <1.3.0", ">=1.2.7 <1.3.0"),
    (">= 1.2.7   <  1.3.0", ">=1.2.7 <1.3.0"),
    (">=1.17 <2", ">=1.17.0 <2.0.0-0"),
    ("1.2.3 1.2.3", "1.2.3"),
    ("^1.2 ^1", ">=1.2.0 <2.0.0-0 >=1.0.0"),
    (">=1.2.3 <1.2.3", ">=1.2.3 <1.2.3"),
    # unions
    ("1.2.7 || >=1.2.9 <2.0.0", "1.2.7||>=1.2.9 <2.0.0"),
    ("^1 || ^2", ">=1.0.0 <2.0.0-0||>=2.0.0 <3.0.0-0"),
    ("1.2.3 - 2.3.4 || >=5", ">=1.2.3 <=2.3.4||>=5.0.0"),
    ("* || 1.2.3", "*"),
    ("<0.0.0-0 || 1.2.3", "1.2.3"),
    ("<x || <*", "<0.0.0-0"),
    # build metadata is ignored, surrounding whitespace too
    ("^1.2.3+build.5", ">=1.2.3 <2.0.0-0"),
    ("1.2.3+a - 2.3.4+b", ">=1.2.3 <=2.3.4"),
    ("\t^1.2.3\n", ">=1.2.3 <2.0.0-0"),
]

# ranges npm's semver.validRange rejects (returns null for)
MALFORMED = [
    ">>1.2",
    ">>1",
    "1.2.3.4",
    "^",
    "~",
    ">=",
    "<",
    "=",
    "a.b.c",
    "latest",
    "1.2.3 -",
    "- 1.2.3",
    "1.2.3 - 2 - 3",
    "1.2.3 -2.0.0",
    "1 ||| 2",
    "1.2.3 || ^",
    "1.2.3 foo",
    "x.1",
    "1.x.3",
    "01.2.3",
    "1.02.3",
    "1.2.3-01",
    "1.2.3-",
    "1.2.3-beta..1",
    "~1.2.3beta",
    "^^1",
    "=>1",
    "!=1.2.3",
    "9007199254740992",
    "^9007199254740991",
    "1.2.3-" + "a" * 251,
]

# (range, version, npm's semver.satisfies(version, range))
SATISFIES = [
    ("^1.2.3", "1.2.3", True),
    ("^1.2.3", "1.9.9", True),
    ("^1.2.3", "2.0.0", False),
    ("^1.2.3", "1.2.2", False),
    ("^0.2.3", "0.2.9", True),
    ("^0.2.3", "0.3.0", False),
    ("^0.0.3", "0.0.3", True),
    ("^0.0.3", "0.0.4", False),
    ("^1.x", "1.99.0", True),
    ("^1.x", "2.0.0", False),
    ("^0.x", "0.99.0", True),
    ("^0.x", "1.0.0", False),
    ("~1.2.3", "1.2.9", True),
    ("~1.2.3", "1.3.0", False),
    ("~1.2", "1.2.0", True),
    ("~1.2", "1.3.0", False),
    ("~1", "1.9.0", True),
    ("~1", "2.0.0", False),
    ("~0.2", "0.2.5", True),
    ("~0.2", "0.3.0", False),
    ("1.x", "1.0.0", True),
    ("1.x", "2.0.0", False),
    ("1.2.*", "1.2.7", True),
    ("1.2.*", "1.3.0", False),
    ("X", "0.0.0", True),
    ("", "10.20.30", True),
    ("*", "1.2.3", True),
    ("1.2.3 - 2.3.4", "1.2.3", True),
    ("1.2.3 - 2.3.4", "2.3.4", True),
    ("1.2.3 - 2.3.4", "2.3.5", False),
    ("1.2 - 2.3", "2.3.9", True),
    ("1.2 - 2.3", "2.4.0", False),
    (">=1.2.7 <1.3.0", "1.2.7", True),
    (">=1.2.7 <1.3.0", "1.2.99", True),
    (">=1.2.7 <1.3.0", "1.3.0", False),
    (">=1.2.7 <1.3.0", "1.2.6", False),
    ("1.2.7 || >=1.2.9 <2.0.0", "1.2.7", True),
    ("1.2.7 || >=1.2.9 <2.0.0", "1.2.8", False),
    ("1.2.7 || >=1.2.9 <2.0.0", "1.4.6", True),
    ("1.2.7 || >=1.2.9 <2.0.0", "2.0.0", False),
    (">1", "2.0.0", True),
    (">1", "1.9.9", False),
    ("<=1.2", "1.2.9", True),
    ("<=1.2", "1.3.0", False),
    ("=1.2.3", "1.2.3+build.7", True),
    (">=1.17 <2", "1.31.0", True),
    (">=1.17 <2", "2.0.0", False),
    (">=1.2.3 <1.2.3", "1.2.3", False),
    ("<0.0.0-0", "0.0.0", False),
]

# pre-releases: (range, version, npm's semver.satisfies(version, range))
PRERELEASES = [
    (">1.2.3-alpha.3", "1.2.3-alpha.7", True),
    (">1.2.3-alpha.3", "3.4.5-alpha.9", False),
    (">1.2.3-alpha.3", "3.4.5", True),
    ("^1.2.3-beta.2", "1.2.3-beta.4", True),
    ("^1.2.3-beta.2", "1.2.3-beta.11", True),
    ("^1.2.3-beta.2", "1.2.3-beta.1", False),
    ("^1.2.3-beta.2", "1.2.4-beta.2", False),
    ("^1.2.3", "1.2.3-beta", False),
    ("^1.2.3", "1.5.0-rc.1", False),
    ("^1.2.3", "2.0.0-rc.1", False),
    ("<2.0.0", "2.0.0-rc.1", False),
    ("<=1.2.3", "1.2.3-beta", False),
    ("*", "1.0.0-rc.1", False),
    ("1.x", "1.1.0-a", False),
    (">=1.0.0-0 <2.0.0", "1.0.0-rc.1", True),
    (">=1.0.0-0 <2.0.0", "1.5.0-rc.1", False),
    ("1.2.3-rc.1 - 1.2.3", "1.2.3-rc.2", True),
    ("1.2.3 - 1.2.4-rc.1", "1.2.4-beta", True),
    ("~1.2.3-beta.2", "1.2.3-beta.3", True),
    ("~1.2.3-beta.2", "1.2.4-beta.3", False),
    ("1.2.3-beta.2 || 2.x", "1.2.3-beta.2", True),
    ("1.2.3-beta.2 || 2.x", "2.0.0-beta.2", False),
]

# (range, version, npm's answer, npm's answer with includePrerelease)
INCLUDE_PRERELEASE = [
    ("*", "1.0.0-rc.1", False, True),
    ("", "0.0.0-0", False, True),
    ("^1.2.3", "1.5.0-rc.1", False, True),
    ("^1.2.3", "1.2.3-rc.1", False, False),
    ("^1.2.3", "2.0.0-rc.1", False, False),
    ("1.x", "1.0.0-a", False, True),
    ("1.x", "2.0.0-a", False, False),
    ("~1.2", "1.2.0-rc.1", False, True),
    ("<2.0.0", "2.0.0-rc.1", False, True),
    ("<2", "2.0.0-rc.1", False, False),
    (">=1.2.7 <1.3.0", "1.2.8-beta", False, True),
    ("1 - 2", "2.9.9-beta", False, True),
    ("1 - 2", "3.0.0-beta", False, False),
    ("1.2.3 - 2.3.4", "2.3.4-beta", False, True),
    ("1.2.3 - 2.3.4", "2.3.5-0", False, False),
    ("^1.2.3-beta.2", "1.2.3-beta.4", True, True),
    # npm rejects this range only when it includes pre-releases (the bound passes 2**53 - 1)
    ("* - 0.0.9007199254740991", "0.0.1", True, False),
]

# (versions, range, include_prerelease, npm's semver.maxSatisfying(versions, range, options))
MAX_SATISFYING = [
    (["1.2.3", "1.2.4", "1.3.0", "2.0.0"], "~1.2", False, "1.2.4"),
    (["1.2.3", "1.2.4", "1.3.0", "2.0.0"], "^1.2.3", False, "1.3.0"),
    (["1.2.9", "1.2.10", "1.2.2"], "1.2.x", False, "1.2.10"),
    (["2.0.0", "10.0.0", "9.9.9"], "*", False, "10.0.0"),
    (["1.2.3", "1.2.4-beta.1", "1.2.4-beta.2"], "^1.2.3", False, "1.2.3"),
    (["1.2.3", "1.2.4-beta.1", "1.2.4-beta.2"], "^1.2.3", True, "1.2.4-beta.2"),
    (["1.2.3", "1.2.4-beta.1", "1.2.4-beta.2"], ">=1.2.4-beta.1", False, "1.2.4-beta.2"),
    (["1.0.0-rc.1", "1.0.0-rc.2", "1.0.0-beta.11"], "1.0.0-beta - 1.0.0", False, "1.0.0-rc.2"),
    (["garbage", "1.2.3", "", "1.2", "1.10.0", "1.2.3.4", "01.9.0"], "^1", False, "1.10.0"),
    (["1.0.0", "3.0.0", "not-a-version"], "^2", False, None),
    (["2.0.0-rc.1"], "^2", False, None),
    (["2.0.0-rc.1"], "^2", True, "2.0.0-rc.1"),
    ([], "*", False, None),
    (["1.2.3+build.1", "1.2.3+build.2"], "1.2.3", False, "1.2.3+build.1"),
]

# the SemVer 2.0.0 specification's own precedence example, lowest first
SPEC_ORDER = [
    "1.0.0-alpha",
    "1.0.0-alpha.1",
    "1.0.0-alpha.beta",
    "1.0.0-beta",
    "1.0.0-beta.2",
    "1.0.0-beta.11",
    "1.0.0-rc.1",
    "1.0.0",
]

# (versions, npm's semver.sort(versions))
SORTED = [
    (
        ["1.10.0", "1.9.0", "1.11.0", "10.0.0", "2.0.0"],
        ["1.9.0", "1.10.0", "1.11.0", "2.0.0", "10.0.0"],
    ),
    (["1.0.0-a", "1.0.0-10", "1.0.0-2", "1.0.0"], ["1.0.0-2", "1.0.0-10", "1.0.0-a", "1.0.0"]),
    (["1.0.0-B", "1.0.0-a", "1.0.0-1a"], ["1.0.0-1a", "1.0.0-B", "1.0.0-a"]),
    (["1.0.0-a.b", "1.0.0-a.1", "1.0.0-a"], ["1.0.0-a", "1.0.0-a.1", "1.0.0-a.b"]),
    (["0.0.1", "0.0.0", "0.0.0-0"], ["0.0.0-0", "0.0.0", "0.0.1"]),
    (["1.0.1", "1.0.0+b", "1.0.0", "1.0.0-rc.1"], ["1.0.0-rc.1", "1.0.0", "1.0.0+b", "1.0.1"]),
]

# strict SemVer 2.0.0 versions (npm's semver.valid accepts each)
VALID_VERSIONS = [
    "0.0.0",
    "1.0.0",
    "10.20.30",
    "1.2.3-rc.1",
    "1.2.3-0.3.7",
    "1.0.0-x.7.z.92",
    "1.0.0-x-y-z.--",
    "1.0.0-alpha+001",
    "1.0.0+20130313144700",
    "1.0.0-beta+exp.sha.5114f85",
    "1.0.0+21AF26D3----117B344092BD",
    "9007199254740991.9007199254740991.9007199254740991",
]

# not versions (npm's semver.valid rejects each)
INVALID_VERSIONS = [
    "",
    "1",
    "1.0",
    "1.0.0.0",
    "01.0.0",
    "1.01.0",
    "1.0.01",
    "1.0.0-01",
    "1.0.0-",
    "1.0.0+",
    "1.0.0-alpha..1",
    "1.0.0-alpha_1",
    "1.0.0+build+again",
    "=1.0.0",
    "V1.0.0",
    "x.1.0",
    "a.b.c",
    "latest",
    "9007199254740992.0.0",
    "1.0.0-" + "a" * 251,
]

# not strict SemVer, although npm's semver.valid accepts them: our deliberate difference
NPM_LENIENT_VERSIONS = ["v1.0.0", " 1.0.0", "1.0.0 ", "\t1.0.0\n"]


@pytest.mark.parametrize(("text", "normalized"), NORMALIZED)
def test_validate_range_returns_npms_normalized_range(text: str, normalized: str) -> None:
    assert validate_range(text) == normalized


@pytest.mark.parametrize("text", MALFORMED)
def test_validate_range_raises_invalid_range_naming_the_range_where_npm_rejects_it(
    text: str,
) -> None:
    with pytest.raises(InvalidRange, match=re.escape(f"invalid version range {text!r}: ")):
        validate_range(text)


@pytest.mark.parametrize("value", [None, 1.17, 2, ["^1"]])
def test_validate_range_raises_invalid_range_for_a_value_that_is_not_a_string(
    value: object,
) -> None:
    with pytest.raises(InvalidRange, match="must be a string"):
        validate_range(value)  # type: ignore[arg-type]


def test_invalid_range_and_invalid_version_are_value_errors() -> None:
    assert issubclass(InvalidRange, ValueError)
    assert issubclass(InvalidVersion, ValueError)


@pytest.mark.parametrize(("text", "version", "expected"), SATISFIES)
def test_satisfies_answers_like_npm_for_every_range_form(
    text: str, version: str, expected: bool
) -> None:
    assert satisfies(version, text) is expected


@pytest.mark.parametrize(("text", "version", "expected"), PRERELEASES)
def test_prerelease_satisfies_only_a_set_naming_a_prerelease_of_the_same_release(
    text: str, version: str, expected: bool
) -> None:
    assert satisfies(version, text) is expected


@pytest.mark.parametrize(("text", "version", "default", "included"), INCLUDE_PRERELEASE)
def test_include_prerelease_lets_prereleases_in_between_the_bounds(
    text: str, version: str, default: bool, included: bool
) -> None:
    assert satisfies(version, text) is default
    assert satisfies(version, text, include_prerelease=True) is included


@pytest.mark.parametrize("text", MALFORMED)
def test_satisfies_raises_invalid_range_for_a_malformed_range(text: str) -> None:
    with pytest.raises(InvalidRange, match=re.escape(repr(text))):
        satisfies("1.2.3", text)
    with pytest.raises(InvalidRange, match=re.escape(repr(text))):
        satisfies("1.2.3", text, include_prerelease=True)


@pytest.mark.parametrize("version", INVALID_VERSIONS + NPM_LENIENT_VERSIONS)
def test_a_version_that_does_not_parse_satisfies_nothing(version: str) -> None:
    assert satisfies(version, "*") is False
    assert satisfies(version, "*", include_prerelease=True) is False
    assert satisfies(version, ">=0.0.0-0 || <1") is False


@pytest.mark.parametrize("version", [None, 1, 1.0])
def test_a_version_that_is_not_a_string_satisfies_nothing(version: object) -> None:
    assert satisfies(version, "*") is False  # type: ignore[arg-type]


@pytest.mark.parametrize(("versions", "text", "include_prerelease", "expected"), MAX_SATISFYING)
def test_max_satisfying_picks_npms_answer(
    versions: list[str], text: str, include_prerelease: bool, expected: str | None
) -> None:
    assert max_satisfying(versions, text, include_prerelease=include_prerelease) == expected


def test_max_satisfying_ignores_versions_with_a_leading_v() -> None:
    # npm would answer "v1.9.0"; we only consider strict SemVer versions
    assert max_satisfying(["1.2.0", "v1.9.0"], "^1") == "1.2.0"


def test_max_satisfying_accepts_any_iterable() -> None:
    assert max_satisfying((f"1.{minor}.0" for minor in range(5)), "<1.3") == "1.2.0"


def test_max_satisfying_raises_invalid_range_for_a_malformed_range() -> None:
    with pytest.raises(InvalidRange, match=re.escape("'>>1.2'")):
        max_satisfying(["1.2.3"], ">>1.2")


def test_version_key_orders_the_semver_specs_example() -> None:
    shuffled = SPEC_ORDER[:]
    random.Random(0).shuffle(shuffled)
    assert sorted(shuffled, key=version_key) == SPEC_ORDER
    assert sorted(reversed(SPEC_ORDER), key=version_key) == SPEC_ORDER


@pytest.mark.parametrize(("versions", "expected"), SORTED)
def test_version_key_sorts_like_npm(versions: list[str], expected: list[str]) -> None:
    assert sorted(versions, key=version_key) == expected


def test_version_key_puts_text_that_is_not_a_version_first() -> None:
    versions = ["1.0.0", "zzz", "0.0.1", "v2.0.0", "abc"]
    assert sorted(versions, key=version_key) == ["abc", "v2.0.0", "zzz", "0.0.1", "1.0.0"]


@pytest.mark.parametrize("version", VALID_VERSIONS)
def test_is_valid_version_accepts_strict_semver(version: str) -> None:
    assert is_valid_version(version)


@pytest.mark.parametrize("version", INVALID_VERSIONS + NPM_LENIENT_VERSIONS)
def test_is_valid_version_rejects_anything_else(version: str) -> None:
    assert not is_valid_version(version)


def test_is_valid_version_rejects_a_value_that_is_not_a_string() -> None:
    assert not is_valid_version(None)  # type: ignore[arg-type]
    assert not is_valid_version(1.0)  # type: ignore[arg-type]


def test_is_valid_version_rejects_a_version_longer_than_256_characters() -> None:
    assert is_valid_version("1.0.0-" + "a" * 250)
    assert not is_valid_version("1.0.0-" + "a" * 251)


def test_parse_version_splits_the_parts() -> None:
    version = parse_version("1.20.3-rc.11.b+build.007")
    assert (version.major, version.minor, version.patch) == (1, 20, 3)
    assert version.prerelease == ("rc", 11, "b")
    assert version.build == ("build", "007")
    assert str(version) == "1.20.3-rc.11.b+build.007"


@pytest.mark.parametrize("version", INVALID_VERSIONS + NPM_LENIENT_VERSIONS)
def test_parse_version_raises_invalid_version(version: str) -> None:
    with pytest.raises(InvalidVersion):
        parse_version(version)
