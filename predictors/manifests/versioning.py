"""Version numbers and version ranges, with npm's semantics.

Versions are strict SemVer 2.0.0 (https://semver.org): `MAJOR.MINOR.PATCH`, an optional
`-pre.release` and optional `+build` metadata, no leading zeros, no leading `v`, no surrounding
whitespace. Like npm, a version is at most 256 characters long and each of MAJOR, MINOR and PATCH
is at most 2**53 - 1.

Ranges are npm's: caret (`^1.2.3`), tilde (`~1.2`), x-ranges (`1.x`, `*`, `''`), hyphen ranges
(`1.2.3 - 2.3.4`), comparator sets (`>=1.2.7 <1.3.0`) and `||` unions, with npm's pre-release
rule: a pre-release version satisfies a set of comparators only if one of them names a
pre-release of the same MAJOR.MINOR.PATCH, unless `include_prerelease` is set.

This module is a port of the strict (non-loose) range parser of npm's `semver` package, version
7.8.6 (`classes/range.js`, `classes/comparator.js`, `internal/re.js`): the same regular
expressions, applied in the same order, so that odd inputs (`> =1.2.3`, `vv1`, `1.2.3 - 2 || *`)
mean here what they mean to npm. We do not delegate to the `node-semver` PyPI package: it ports
npm semver 5, and on a corpus of 18,573 ranges (npm's own test fixtures plus generated and
fuzzed ones) and 1.2 million range/version pairs it disagreed with npm 7.8.6 on 3,273 ranges'
validity or normal form and on 58,000 `satisfies` answers. It accepts ranges npm rejects (`x.1`,
`1.x.3`, `9007199254740992`), rejects ones npm accepts (`^1.x+build`), leaves out the `-0` on
upper bounds, treats every pre-release as equal to its release when `include_prerelease` is on
(so `1.2.3-0` satisfies `^1.2.3`), and raises on unparseable versions instead of answering
False. This module agrees with npm 7.8.6 on every answer for that corpus and for 48,144 more
fuzzed ranges (validRange with and without includePrerelease, satisfies, maxSatisfying, sort).

Deliberate differences from npm, all about versions rather than ranges:

- a version given to `satisfies`, `max_satisfying` or `version_key` must be strict SemVer:
  npm also accepts `v1.2.3` and surrounding whitespace there; we treat those as unparseable;
- numeric pre-release identifiers above 2**53 - 1 are compared exactly (npm compares them as
  floating-point numbers).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

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

MAX_LENGTH = 256
MAX_SAFE_INTEGER = 2**53 - 1
_MAX_SAFE_BUILD_LENGTH = MAX_LENGTH - 6


class InvalidVersion(ValueError):
    """Text that is not a strict SemVer 2.0.0 version."""


class InvalidRange(ValueError):
    """Text that npm's `semver.validRange` rejects."""


class _Unparseable(Exception):
    """Raised inside the range parser; turned into InvalidRange with the whole range text."""


# --- Versions ---------------------------------------------------------------------------------

Identifier = int | str


@dataclass(frozen=True)
class Version:
    major: int
    minor: int
    patch: int
    prerelease: tuple[Identifier, ...] = ()
    build: tuple[str, ...] = ()

    def __str__(self) -> str:
        text = self.release
        if self.build:
            text += "+" + ".".join(self.build)
        return text

    @property
    def release(self) -> str:
        """MAJOR.MINOR.PATCH[-PRERELEASE], without build metadata (npm's `SemVer.version`)."""
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(str(part) for part in self.prerelease)
        return text

    @property
    def precedence(self) -> tuple[object, ...]:
        """A key that orders versions by SemVer precedence (build metadata does not count)."""
        # A release sorts after its pre-releases; within a pre-release, numeric identifiers
        # sort before alphanumeric ones, and a longer list wins when the shorter is a prefix.
        pre: tuple[object, ...] = (
            (0, *(_identifier_key(part) for part in self.prerelease)) if self.prerelease else (1,)
        )
        return (self.major, self.minor, self.patch, pre)


def _identifier_key(identifier: Identifier) -> tuple[int, Identifier]:
    return (0, identifier) if isinstance(identifier, int) else (1, identifier)


def parse_version(text: str) -> Version:
    """Parse a strict SemVer 2.0.0 version, or raise InvalidVersion."""
    if not isinstance(text, str):
        raise InvalidVersion(f"a version must be a string, not {type(text).__name__}")
    if text != _js_trim(text) or text.startswith("v"):
        raise InvalidVersion(
            f"{text!r} is not a semantic version: no leading 'v' or surrounding spaces allowed"
        )
    try:
        return _parse_npm_version(text)
    except _Unparseable as error:
        raise InvalidVersion(f"{text!r} is not a semantic version: {error}") from None


def is_valid_version(text: str) -> bool:
    """Whether `text` is a strict SemVer 2.0.0 version such as 1.0.0 or 2.1.0-rc.1+build.5."""
    try:
        parse_version(text)
    except InvalidVersion:
        return False
    return True


def version_key(text: str) -> tuple[object, ...]:
    """A sort key ordering versions by SemVer precedence, then by build metadata (as npm's
    `semver.sort` does). Text that is not a valid version sorts before every valid version,
    ordered by the text itself, so that one stray value never breaks a listing."""
    try:
        version = parse_version(text)
    except InvalidVersion:
        return (0, str(text))
    build = tuple(
        _identifier_key(int(part) if _DIGITS.fullmatch(part) else part) for part in version.build
    )
    return (1, *version.precedence, build)


def _parse_npm_version(text: str) -> Version:
    """npm's `new SemVer(text)` in strict mode, which also allows a leading 'v' and spaces."""
    if len(text) > MAX_LENGTH:
        raise _Unparseable(f"a version is at most {MAX_LENGTH} characters long")
    match = _FULL.match(_js_trim(text))
    if not match:
        raise _Unparseable("expected MAJOR.MINOR.PATCH[-PRERELEASE][+BUILD]")
    numbers = [int(match.group(i)) for i in (1, 2, 3)]
    for name, number in zip(("major", "minor", "patch"), numbers, strict=True):
        if number > MAX_SAFE_INTEGER:
            raise _Unparseable(f"{name} version {number} is larger than {MAX_SAFE_INTEGER}")
    prerelease = tuple(
        int(part) if _DIGITS.fullmatch(part) else part
        for part in (match.group(4).split(".") if match.group(4) else ())
    )
    build = tuple(match.group(5).split(".")) if match.group(5) else ()
    return Version(numbers[0], numbers[1], numbers[2], prerelease, build)


# --- Regular expressions, as in npm semver's internal/re.js -----------------------------------
#
# npm builds these from sources that use \s and \d, then bounds every * and + after \s, \d and
# [a-zA-Z0-9-] ("safe" regexes, against ReDoS). We do the same, and then spell \s as JavaScript's
# whitespace set and \d as [0-9] (Python's \s and \d also match other Unicode characters).

_JS_WHITESPACE = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)
_WS_CLASS = "".join(f"\\u{ord(char):04x}" for char in _JS_WHITESPACE)
_WS_RUN = re.compile(f"[{_WS_CLASS}]+")
_DIGITS = re.compile("[0-9]+")


def _js_trim(text: str) -> str:
    return text.strip(_JS_WHITESPACE)


def _safe(source: str) -> str:
    for token, limit in (("\\s", 1), ("\\d", MAX_LENGTH), ("[a-zA-Z0-9-]", _MAX_SAFE_BUILD_LENGTH)):
        source = source.replace(token + "*", f"{token}{{0,{limit}}}")
        source = source.replace(token + "+", f"{token}{{1,{limit}}}")
    return source


def _compile(source: str, safe: bool = True) -> re.Pattern[str]:
    if safe:
        source = _safe(source)
    source = source.replace("[v=\\s]", f"[v={_WS_CLASS}]").replace("\\s", f"[{_WS_CLASS}]")
    return re.compile(source.replace("\\d", "[0-9]").replace("$", r"\Z"))


_NUMERIC = r"0|[1-9]\d*"
_NUMERIC_LOOSE = r"\d+"
_NONNUMERIC = r"\d*[a-zA-Z-][a-zA-Z0-9-]*"
_MAIN = rf"({_NUMERIC})\.({_NUMERIC})\.({_NUMERIC})"
_MAIN_LOOSE = rf"({_NUMERIC_LOOSE})\.({_NUMERIC_LOOSE})\.({_NUMERIC_LOOSE})"
_PRE_ID = rf"(?:{_NONNUMERIC}|{_NUMERIC})"
_PRE_ID_LOOSE = rf"(?:{_NONNUMERIC}|{_NUMERIC_LOOSE})"
_PRERELEASE = rf"(?:-({_PRE_ID}(?:\.{_PRE_ID})*))"
_PRERELEASE_LOOSE = rf"(?:-?({_PRE_ID_LOOSE}(?:\.{_PRE_ID_LOOSE})*))"
_BUILD_ID = "[a-zA-Z0-9-]+"
_BUILD_SRC = rf"(?:\+({_BUILD_ID}(?:\.{_BUILD_ID})*))"
_FULL_PLAIN = rf"v?{_MAIN}{_PRERELEASE}?{_BUILD_SRC}?"
_LOOSE_PLAIN = rf"[v=\s]*{_MAIN_LOOSE}{_PRERELEASE_LOOSE}?{_BUILD_SRC}?"
_GTLT = r"((?:<|>)?=?)"
_XRANGE_ID = rf"{_NUMERIC}|x|X|\*"
_XRANGE_PLAIN = rf"[v=\s]*({_XRANGE_ID})(?:\.({_XRANGE_ID})(?:\.({_XRANGE_ID})(?:{_PRERELEASE})?{_BUILD_SRC}?)?)?"

_FULL = _compile(rf"^{_FULL_PLAIN}$")
_BUILD = _compile(_BUILD_SRC)
_BUILD_STRIP = _compile(_BUILD_SRC, safe=False)  # npm strips build metadata with the unsafe one
_XRANGE = _compile(rf"^{_GTLT}\s*{_XRANGE_PLAIN}$")
_TILDE_TRIM = _compile(r"(\s*)(?:~>?)\s+")
_TILDE = _compile(rf"^(?:~>?){_XRANGE_PLAIN}$")
_CARET_TRIM = _compile(r"(\s*)(?:\^)\s+")
_CARET = _compile(rf"^(?:\^){_XRANGE_PLAIN}$")
_COMPARATOR = _compile(rf"^{_GTLT}\s*({_FULL_PLAIN})$|^$")
_COMPARATOR_TRIM = _compile(rf"(\s*){_GTLT}\s*({_LOOSE_PLAIN}|{_XRANGE_PLAIN})")
_HYPHEN_RANGE = _compile(rf"^\s*({_XRANGE_PLAIN})\s+-\s+({_XRANGE_PLAIN})\s*$")
_STAR = _compile(r"(<|>)?=?\s*\*")
_GTE0 = _compile(r"^\s*>=\s*0\.0\.0\s*$")
_GTE0_PRE = _compile(r"^\s*>=\s*0\.0\.0-0\s*$")


# --- Ranges, as in npm semver's classes/range.js and classes/comparator.js --------------------


@dataclass(frozen=True)
class _Comparator:
    operator: str  # '', '<', '<=', '>', '>='
    version: Version | None  # None: any version

    @property
    def value(self) -> str:
        return "" if self.version is None else self.operator + self.version.release

    def test(self, version: Version) -> bool:
        if self.version is None:
            return True
        mine, theirs = version.precedence, self.version.precedence
        if self.operator == "":
            return mine == theirs
        if self.operator == "<":
            return mine < theirs
        if self.operator == "<=":
            return mine <= theirs
        if self.operator == ">":
            return mine > theirs
        return mine >= theirs


_NULL_SET = "<0.0.0-0"


def _comparator(text: str) -> _Comparator:
    text = " ".join(_WS_RUN.split(_js_trim(text)))
    match = _COMPARATOR.match(text)
    if not match:
        raise _Unparseable(f"cannot parse comparator {text!r}")
    operator = match.group(1) or ""
    if operator == "=":
        operator = ""
    if not match.group(2):
        return _Comparator("", None)
    return _Comparator(operator, _parse_npm_version(match.group(2)))


@dataclass(frozen=True)
class _Range:
    sets: tuple[tuple[_Comparator, ...], ...]
    include_prerelease: bool

    def format(self) -> str:
        return "||".join(" ".join(c.value for c in comparators) for comparators in self.sets)

    def test(self, version: Version) -> bool:
        return any(self._test_set(comparators, version) for comparators in self.sets)

    def _test_set(self, comparators: tuple[_Comparator, ...], version: Version) -> bool:
        if not all(c.test(version) for c in comparators):
            return False
        if version.prerelease and not self.include_prerelease:
            # A pre-release is allowed only by a comparator that names a pre-release of the same
            # MAJOR.MINOR.PATCH: ^1.2.3-pr.1 allows 1.2.3-pr.2, but not 1.2.4-alpha.
            core = (version.major, version.minor, version.patch)
            return any(
                c.version is not None
                and c.version.prerelease
                and (c.version.major, c.version.minor, c.version.patch) == core
                for c in comparators
            )
        return True


def _parse_range(text: str, include_prerelease: bool) -> _Range:
    if not isinstance(text, str):
        raise InvalidRange(f"invalid version range {text!r}: a range must be a string")
    try:
        return _parse_range_text(text, include_prerelease)
    except InvalidRange:
        if not include_prerelease:
            raise
        # Desugaring for pre-releases can push a bound past 2**53 - 1 (`* - 0.0.9007199254740991`
        # becomes `<0.0.9007199254740992-0`), and npm then rejects the range, so that nothing
        # satisfies it. Answer the same, but raise only where validate_range does.
        _parse_range_text(text, False)
        return _Range(((_Comparator("<", Version(0, 0, 0, (0,))),),), include_prerelease)


@functools.lru_cache(maxsize=1024)
def _parse_range_text(text: str, include_prerelease: bool) -> _Range:
    raw = _WS_RUN.sub(" ", _js_trim(text))
    try:
        sets = [_parse_set(_js_trim(part), include_prerelease) for part in raw.split("||")]
    except _Unparseable as error:
        raise InvalidRange(f"invalid version range {text!r}: {error}") from None
    if len(sets) > 1:
        # Drop sets that match nothing (unless all do); a set that matches anything wins.
        first = sets[0]
        sets = [s for s in sets if s[0].value != _NULL_SET] or [first]
        if len(sets) > 1:
            sets = next(([s] for s in sets if len(s) == 1 and s[0].value == ""), sets)
    return _Range(tuple(sets), include_prerelease)


def _parse_set(text: str, include_prerelease: bool) -> tuple[_Comparator, ...]:
    text = _BUILD_STRIP.sub("", text)
    text = _HYPHEN_RANGE.sub(_hyphen_replacer(include_prerelease), text, count=1)
    text = _COMPARATOR_TRIM.sub(r"\1\2\3", text)  # `> 1.2.3` -> `>1.2.3`
    text = _TILDE_TRIM.sub(r"\1~", text)  # `~ 1.2.3` -> `~1.2.3`
    text = _CARET_TRIM.sub(r"\1^", text)  # `^ 1.2.3` -> `^1.2.3`
    desugared = " ".join(_desugar(part, include_prerelease) for part in text.split(" "))
    gte0 = _GTE0_PRE if include_prerelease else _GTE0  # >=0.0.0 is the same as *
    parts = [gte0.sub("", _js_trim(part), count=1) for part in _WS_RUN.split(desugared)]
    comparators = [_comparator(part) for part in parts]
    unique: dict[str, _Comparator] = {}
    for comparator in comparators:
        if comparator.value == _NULL_SET:
            return (comparator,)
        unique[comparator.value] = comparator
    if len(unique) > 1:
        unique.pop("", None)
    return tuple(unique.values())


def _desugar(text: str, include_prerelease: bool) -> str:
    """Turn one caret, tilde, x-range or star into plain comparators (npm's parseComparator)."""
    text = _BUILD.sub("", text, count=1)
    for replace in (_replace_caret, _replace_tilde, _replace_xrange):
        text = " ".join(replace(part, include_prerelease) for part in _WS_RUN.split(_js_trim(text)))
    return _STAR.sub("", _js_trim(text), count=1)


def _is_x(part: str | None) -> bool:
    return not part or part.lower() == "x" or part == "*"


def _replace_caret(text: str, include_prerelease: bool) -> str:
    return _CARET.sub(_bounds_replacer(include_prerelease, caret=True), text, count=1)


def _replace_tilde(text: str, include_prerelease: bool) -> str:
    return _TILDE.sub(_bounds_replacer(include_prerelease, caret=False), text, count=1)


def _bounds_replacer(include_prerelease: bool, caret: bool) -> Callable[[re.Match[str]], str]:
    """A caret (`^1.2.3`: up to the next change of the first non-zero part) or tilde (`~1.2.3`:
    up to the next minor version) range as a lower and an upper comparator."""
    z = "-0" if include_prerelease else ""

    def bounds(match: re.Match[str]) -> str:
        major, minor, patch, pre = match.group(1, 2, 3, 4)
        if _is_x(major):
            return ""
        if _is_x(minor):
            return f">={major}.0.0{z} <{int(major) + 1}.0.0-0"
        if _is_x(patch):
            if caret and major != "0":
                return f">={major}.{minor}.0{z} <{int(major) + 1}.0.0-0"
            return f">={major}.{minor}.0{z} <{major}.{int(minor) + 1}.0-0"
        low = f">={major}.{minor}.{patch}" + (f"-{pre}" if pre else "")
        if caret and major != "0":
            high = f"{int(major) + 1}.0.0"
        elif caret and minor == "0":
            high = f"{major}.{minor}.{int(patch) + 1}"
        else:
            high = f"{major}.{int(minor) + 1}.0"
        return f"{low} <{high}-0"

    return bounds


def _replace_xrange(text: str, include_prerelease: bool) -> str:
    text = _js_trim(text)

    def xrange(match: re.Match[str]) -> str:
        operator, major, minor, patch = match.group(1, 2, 3, 4)
        if (_is_x(major) and not _is_x(minor)) or (_is_x(minor) and patch and not _is_x(patch)):
            return (
                text  # an x followed by a number (x.1, 1.x.3) is left for the comparator to reject
            )
        x_major = _is_x(major)
        x_minor = x_major or _is_x(minor)
        any_x = x_minor or _is_x(patch)
        if operator == "=" and any_x:
            operator = ""
        pre = "-0" if include_prerelease else ""
        if x_major:
            return "<0.0.0-0" if operator in (">", "<") else "*"
        if operator and any_x:
            major_n = int(major)
            minor_n = 0 if x_minor else int(minor)
            if operator == ">":  # >1 => >=2.0.0, >1.2 => >=1.3.0
                operator = ">="
                if x_minor:
                    major_n, minor_n = major_n + 1, 0
                else:
                    minor_n += 1
            elif operator == "<=":  # <=0.7.x => <0.8.0-0, <=7.x => <8.0.0-0
                operator = "<"
                if x_minor:
                    major_n += 1
                else:
                    minor_n += 1
            if operator == "<":
                pre = "-0"
            return f"{operator}{major_n}.{minor_n}.0{pre}"
        if x_minor:
            return f">={major}.0.0{pre} <{int(major) + 1}.0.0-0"
        if any_x:
            return f">={major}.{minor}.0{pre} <{major}.{int(minor) + 1}.0-0"
        return match.group(0)

    return _XRANGE.sub(xrange, text, count=1)


def _hyphen_replacer(include_prerelease: bool) -> Callable[[re.Match[str]], str]:
    z = "-0" if include_prerelease else ""

    def hyphen(match: re.Match[str]) -> str:
        low, l_major, l_minor, l_patch, l_pre = match.group(1, 2, 3, 4, 5)
        high, h_major, h_minor, h_patch, h_pre = match.group(7, 8, 9, 10, 11)
        if _is_x(l_major):
            low = ""
        elif _is_x(l_minor):
            low = f">={l_major}.0.0{z}"
        elif _is_x(l_patch):
            low = f">={l_major}.{l_minor}.0{z}"
        elif l_pre:
            low = f">={low}"
        else:
            low = f">={low}{z}"
        if _is_x(h_major):
            high = ""
        elif _is_x(h_minor):
            high = f"<{int(h_major) + 1}.0.0-0"
        elif _is_x(h_patch):
            high = f"<{h_major}.{int(h_minor) + 1}.0-0"
        elif h_pre:
            high = f"<={h_major}.{h_minor}.{h_patch}-{h_pre}"
        elif include_prerelease:
            high = f"<{h_major}.{h_minor}.{int(h_patch) + 1}-0"
        else:
            high = f"<={high}"
        return _js_trim(f"{low} {high}")

    return hyphen


# --- Public range functions -------------------------------------------------------------------


def validate_range(text: str) -> str:
    """Return npm's normalized form of a range (npm's `semver.validRange`), e.g.
    `^1.2.3` -> `>=1.2.3 <2.0.0-0` and `''` -> `*`; raise InvalidRange where npm returns null."""
    return _parse_range(text, False).format() or "*"


def satisfies(version: str, range: str, *, include_prerelease: bool = False) -> bool:
    """Whether `version` is in `range` (npm's `semver.satisfies`). A malformed range raises
    InvalidRange; a version that is not strict SemVer satisfies nothing."""
    parsed = _parse_range(range, include_prerelease)
    try:
        return parsed.test(parse_version(version))
    except InvalidVersion:
        return False


def max_satisfying(
    versions: Iterable[str], range: str, *, include_prerelease: bool = False
) -> str | None:
    """The highest of `versions` in `range` (npm's `semver.maxSatisfying`), or None. Versions
    that are not strict SemVer are ignored; a malformed range raises InvalidRange."""
    parsed = _parse_range(range, include_prerelease)
    best: tuple[str, Version] | None = None
    for text in versions:
        try:
            version = parse_version(text)
        except InvalidVersion:
            continue
        if parsed.test(version) and (best is None or version.precedence > best[1].precedence):
            best = (text, version)
    return None if best is None else best[0]
