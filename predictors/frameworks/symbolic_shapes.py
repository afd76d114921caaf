"""A torch.export program's symbolic shapes, checked before torch reads them.

`torch.export.load` hands each symbolic shape of a program (an `expr_str` of its JSON) to
sympy's `sympify`, which evaluates it as Python: a file could run any code in the process that
loads it. `unsafe_expression` finds the first shape that is anything but arithmetic,
comparisons and calls of sympy's and torch's size functions over size symbols, which is all
torch.export writes there.
"""

from __future__ import annotations

import ast
import json
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["unsafe_expression"]

# What a program's symbolic shapes (the `expr_str` torch.export.load hands sympy's `sympify`,
# which evaluates them as Python) may hold: arithmetic, comparisons and calls of sympy's and
# torch's functions over size symbols, nothing else.
_EXPRESSION_CALLS = frozenset(
    {
        *("Symbol", "Integer", "Rational", "Float", "Add", "Mul", "Pow", "Max", "Min", "Abs"),
        *("floor", "ceiling", "Eq", "Ne", "Lt", "Le", "Gt", "Ge", "And", "Or", "Not"),
        *("StrictLessThan", "LessThan", "StrictGreaterThan", "GreaterThan", "Unequality"),
        *("Equality", "Piecewise", "ExprCondPair", "BooleanTrue", "BooleanFalse"),
        *("FloorDiv", "ModularIndexing", "Where", "PythonMod", "Mod", "CleanDiv", "CeilToInt"),
        *("FloorToInt", "CeilDiv", "LShift", "RShift", "PowByNatural", "FloatPow"),
        *("FloatTrueDiv", "IntTrueDiv", "IsNonOverlappingAndDenseIndicator", "TruncToFloat"),
        *("TruncToInt", "RoundToInt", "RoundDecimal", "ToFloat", "Identity"),
    }
)
_EXPRESSION_NODES = (
    ast.Expression, ast.Call, ast.Name, ast.Load, ast.Constant, ast.keyword, ast.BinOp,
    ast.UnaryOp, ast.Compare, ast.BoolOp, ast.Tuple, ast.operator, ast.unaryop, ast.cmpop,
    ast.boolop,
)  # fmt: skip
_SYMBOL = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")


def unsafe_expression(path: Path) -> str | None:
    """The first symbolic shape of the program at `path` that is not arithmetic on sizes
    (`_EXPRESSION_CALLS`), or None when all are."""
    with zipfile.ZipFile(path) as archive:
        for name in archive.namelist():
            if not name.endswith(".json") or archive.getinfo(name).file_size > 256 * 2**20:
                continue
            try:
                document = json.loads(archive.read(name))
            except ValueError:
                continue
            for text in _expression_texts(document):
                if not _is_size_expression(text):
                    return text
    return None


def _expression_texts(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "expr_str" and isinstance(item, str):
                yield item
            else:
                yield from _expression_texts(item)
    elif isinstance(value, list):
        for item in value:
            yield from _expression_texts(item)


def _is_size_expression(text: str) -> bool:
    if len(text) > 10_000:
        return False
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if not isinstance(node, _EXPRESSION_NODES):
            return False
        if isinstance(node, ast.Call) and not (
            isinstance(node.func, ast.Name) and node.func.id in _EXPRESSION_CALLS
        ):
            return False
        if isinstance(node, ast.Name) and not (
            node.id in _EXPRESSION_CALLS
            or node.id in ("True", "False", "oo", "zoo", "nan")
            or _SYMBOL.fullmatch(node.id)
            and "__" not in node.id
            and node.id not in _BUILTINS
        ):
            return False
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and not (_SYMBOL.fullmatch(node.value))
        ):
            return False
    return True


# Names a symbol must not take: Python's builtins, and what sympy's namespace adds that parses
# or runs text.
_BUILTINS = frozenset(dir(__import__("builtins"))) | {
    "sympify", "S", "parse_expr", "lambdify", "var", "symbols", "Function", "exec", "eval",
}  # fmt: skip
