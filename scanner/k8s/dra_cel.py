"""The CEL subset of DRA device selectors, evaluated the way kube-scheduler evaluates them.

A DeviceClass or a ResourceClaim request selects devices with CEL expressions over one
variable, `device` (k8s.io/dynamic-resource-allocation/cel/compile.go, DeviceMatches):

- `device.driver`: the driver's name (string);
- `device.attributes["<domain>"].<name>`: a map of maps. A bare attribute name in a
  ResourceSlice belongs to the driver's domain (`productName` of gpu.nvidia.com is
  `device.attributes["gpu.nvidia.com"].productName`). An unknown domain reads as an empty map;
  an unknown name in a known domain is a runtime error ("no such key") that aborts the
  allocation (resource.k8s.io/v1 CELDeviceSelector). Values are int, bool, string or
  semver (`version`), or lists of them;
- `device.capacity["<domain>"].<name>`: Kubernetes quantities;
- `device.allowMultipleAllocations`: bool.

Supported here, with CEL's semantics (cel-go; the Kubernetes quantity and semver libraries of
k8s.io/apiserver/pkg/cel/library): literals (int, bool, string, lists), `==` `!=` `<` `<=`
`>` `>=` on values of one type, `&&` `||` `!` and `?:` with CEL's commutative error
absorption (`false && error` is false), `in` on lists and maps, int arithmetic, `has()`,
`cel.bind()`, `size()`, the string functions startsWith, endsWith, contains, lowerAscii,
upperAscii and matches (regular expressions on which RE2 and Python agree), `quantity()` with
isGreaterThan/isLessThan/compareTo/isInteger/asInteger/sign, and `semver()` with
isGreaterThan/isLessThan/compareTo/major/minor/patch.

Anything else (floats, optional fields `.?`, comprehensions such as `exists`, other
functions, comparisons across types) raises NotEvaluatedError: the caller reports the selector as
not evaluated instead of guessing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from gpu_audit.k8s.quantities import QuantityError, parse_quantity

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_EXPRESSION_LENGTH = 10 * 1024  # resource.k8s.io CELSelectorExpressionMaxLength
_MAX_DEPTH = 100


class NotEvaluatedError(Exception):
    """The expression uses CEL outside the subset gpu-audit evaluates; the text says what."""


@dataclass(frozen=True, slots=True)
class CelError:
    """A CEL runtime error value ("no such key: productName"): it aborts the allocation unless
    `&&`/`||` absorb it."""

    message: str


@dataclass(frozen=True, slots=True, order=True)
class Quantity:
    value: Decimal


@dataclass(frozen=True, slots=True)
class Semver:
    """A semantic version as github.com/blang/semver/v4 parses it (strict: MAJOR.MINOR.PATCH,
    no leading zeros, optional -prerelease and +build; build is ignored when comparing)."""

    major: int
    minor: int
    patch: int
    pre: tuple[int | str, ...]

    def compare(self, other: Semver) -> int:
        for mine, theirs in ((self.major, other.major), (self.minor, other.minor)):
            if mine != theirs:
                return 1 if mine > theirs else -1
        if self.patch != other.patch:
            return 1 if self.patch > other.patch else -1
        if self.pre == other.pre:
            return 0
        if not self.pre or not other.pre:
            return 1 if not self.pre else -1  # a release is greater than its pre-releases
        for mine_part, theirs_part in zip(self.pre, other.pre, strict=False):
            if mine_part == theirs_part:
                continue
            if isinstance(mine_part, int) and isinstance(theirs_part, int):
                return 1 if mine_part > theirs_part else -1
            if isinstance(mine_part, int) or isinstance(theirs_part, int):
                return -1 if isinstance(mine_part, int) else 1  # numeric < alphanumeric
            return 1 if mine_part > theirs_part else -1
        return 1 if len(self.pre) > len(other.pre) else -1


_NUMERIC = r"(?:0|[1-9][0-9]*)"
_PRE_PART = r"(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)"
_SEMVER = re.compile(
    rf"^({_NUMERIC})\.({_NUMERIC})\.({_NUMERIC})"
    rf"(?:-({_PRE_PART}(?:\.{_PRE_PART})*))?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$"
)


def parse_semver(text: str) -> Semver | None:
    match = _SEMVER.match(text)
    if match is None:
        return None
    pre = tuple(int(p) if p.isdigit() else p for p in (match.group(4) or "").split(".") if p)
    return Semver(int(match.group(1)), int(match.group(2)), int(match.group(3)), pre)


class _Map:
    """A CEL map; `default` is what a missing key reads as (None: "no such key")."""

    __slots__ = ("default", "items")

    def __init__(self, items: Mapping[str, Any], default: Any = None) -> None:
        self.items = items
        self.default = default

    def get(self, key: str) -> Any:
        if key in self.items:
            return self.items[key]
        if self.default is not None:
            return self.default
        return CelError(f"no such key: {key}")


@dataclass(frozen=True, slots=True)
class DeviceInput:
    """What a selector sees of one device (the `device` variable)."""

    driver: str
    attributes: Mapping[str, Mapping[str, Any]]  # domain -> name -> int/bool/str/Semver/list
    capacity: Mapping[str, Mapping[str, Decimal]]  # domain -> name -> quantity
    allow_multiple_allocations: bool = False

    def variable(self) -> Mapping[str, Any]:
        empty = _Map({})
        return {
            "driver": self.driver,
            "attributes": _Map({d: _Map(v) for d, v in self.attributes.items()}, empty),
            "capacity": _Map(
                {d: _Map({n: Quantity(q) for n, q in v.items()}) for d, v in self.capacity.items()},
                empty,
            ),
            "allowMultipleAllocations": self.allow_multiple_allocations,
        }


# --------------------------------------------------------------------------- lexer

_TOKEN = re.compile(
    r"""
    (?P<space>\s+|//[^\n]*)
  | (?P<string>[rR]?(?:'''(?:.|\n)*?'''|\"\"\"(?:.|\n)*?\"\"\"|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*"))
  | (?P<bytes>[bB][rR]?['"])
  | (?P<number>0[xX][0-9a-fA-F]+[uU]?|\d+\.\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\d+[uU]?)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>&&|\|\||==|!=|<=|>=|\.\?|\[\?|[-+*/%!<>?:.,()\[\]{}])
    """,
    re.VERBOSE,
)
_ESCAPES = {
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "`": "`",
    "?": "?",
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "v": "\v",
}


@dataclass(frozen=True, slots=True)
class _Tok:
    kind: str  # string, int, ident, op, end
    text: str
    value: Any = None


def _unescape(body: str) -> str:
    out: list[str] = []
    index = 0
    while index < len(body):
        char = body[index]
        if char != "\\":
            out.append(char)
            index += 1
            continue
        nxt = body[index + 1 : index + 2]
        if nxt in _ESCAPES:
            out.append(_ESCAPES[nxt])
            index += 2
        elif nxt in ("u", "U", "x", "X") or nxt.isdigit():
            raise NotEvaluatedError("numeric escapes in string literals")
        else:
            raise NotEvaluatedError(f"the escape \\{nxt} in a string literal")
    return "".join(out)


def _string_value(text: str) -> str:
    raw = text[0] in "rR"
    body = text[1:] if raw else text
    quote = 3 if body[:3] in ("'''", '"""') else 1
    inner = body[quote:-quote]
    return inner if raw else _unescape(inner)


def _tokens(expression: str) -> list[_Tok]:
    out: list[_Tok] = []
    position = 0
    while position < len(expression):
        match = _TOKEN.match(expression, position)
        if match is None:
            raise NotEvaluatedError(f"unexpected character {expression[position]!r}")
        position = match.end()
        kind = match.lastgroup or ""
        text = match.group()
        if kind == "space":
            continue
        if kind == "bytes":
            raise NotEvaluatedError("bytes literals")
        if kind == "string":
            out.append(_Tok("string", text, _string_value(text)))
        elif kind == "number":
            hexadecimal = text[:2].lower() == "0x"
            if text[-1] in "uU" or (not hexadecimal and any(c in text for c in ".eE")):
                raise NotEvaluatedError(f"the number {text} (only int literals are evaluated)")
            out.append(_Tok("int", text, int(text, 16) if hexadecimal else int(text)))
        else:
            out.append(_Tok(kind, text))
    out.append(_Tok("end", ""))
    return out


# --------------------------------------------------------------------------- parser

# AST nodes are tuples: ("lit", value), ("ident", name), ("select", target, field),
# ("index", target, key), ("call", name, target | None, args), ("list", items), ("not", x),
# ("neg", x), ("and", a, b), ("or", a, b), ("cond", c, a, b), ("binary", op, a, b),
# ("has", select-node), ("bind", name, init, body).
Node = tuple[Any, ...]

_RELATIONS = ("==", "!=", "<", "<=", ">", ">=", "in")
_RESERVED = frozenset(
    {
        *("as", "break", "const", "continue", "else", "for", "function", "if", "import"),
        *("let", "loop", "package", "namespace", "return", "var", "void", "while"),
    }
)


class _Parser:
    def __init__(self, expression: str) -> None:
        self.tokens = _tokens(expression)
        self.index = 0
        self.depth = 0

    def peek(self) -> _Tok:
        return self.tokens[self.index]

    def next(self) -> _Tok:
        token = self.tokens[self.index]
        self.index += 1
        return token

    def accept(self, text: str) -> bool:
        token = self.peek()
        if token.kind in ("op", "ident") and token.text == text:
            self.index += 1
            return True
        return False

    def expect(self, text: str) -> None:
        if not self.accept(text):
            raise NotEvaluatedError(f"expected {text!r} at {self.peek().text or 'the end'!r}")

    def parse(self) -> Node:
        node = self.expression()
        if self.peek().kind != "end":
            raise NotEvaluatedError(f"unexpected {self.peek().text!r}")
        return node

    def expression(self) -> Node:
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise NotEvaluatedError("an expression nested too deeply")
        node = self.disjunction()
        if self.accept("?"):
            then = self.disjunction()
            self.expect(":")
            node = ("cond", node, then, self.expression())
        self.depth -= 1
        return node

    def disjunction(self) -> Node:
        node = self.conjunction()
        while self.accept("||"):
            node = ("or", node, self.conjunction())
        return node

    def conjunction(self) -> Node:
        node = self.relation()
        while self.accept("&&"):
            node = ("and", node, self.relation())
        return node

    def relation(self) -> Node:
        node = self.addition()
        while self.peek().text in _RELATIONS and self.peek().kind in ("op", "ident"):
            op = self.next().text
            node = ("binary", op, node, self.addition())
        return node

    def addition(self) -> Node:
        node = self.multiplication()
        while self.peek().kind == "op" and self.peek().text in ("+", "-"):
            op = self.next().text
            node = ("binary", op, node, self.multiplication())
        return node

    def multiplication(self) -> Node:
        node = self.unary()
        while self.peek().kind == "op" and self.peek().text in ("*", "/", "%"):
            op = self.next().text
            node = ("binary", op, node, self.unary())
        return node

    def unary(self) -> Node:
        self.depth += 1
        try:
            return self._unary()
        finally:
            self.depth -= 1

    def _unary(self) -> Node:
        if self.depth > _MAX_DEPTH:
            raise NotEvaluatedError("an expression nested too deeply")
        if self.accept("!"):
            return ("not", self.unary())
        if self.accept("-"):
            token = self.peek()
            if token.kind == "int" and token.value == INT64_MAX + 1:  # -9223372036854775808
                self.next()
                return self.member(("lit", INT64_MIN))
            return ("neg", self.unary())
        return self.member(self.primary())

    def member(self, node: Node) -> Node:
        while True:
            if self.peek().text in (".?", "[?") and self.peek().kind == "op":
                raise NotEvaluatedError("optional field selection (.? / [?)")
            if self.accept("."):
                name = self.next()
                if name.kind != "ident":
                    raise NotEvaluatedError(f"expected a field name after '.', got {name.text!r}")
                if self.accept("("):
                    node = ("call", name.text, node, self.arguments(")"))
                else:
                    node = ("select", node, name.text)
            elif self.accept("["):
                node = ("index", node, self.expression())
                self.expect("]")
            else:
                return node

    def arguments(self, close: str) -> list[Node]:
        args: list[Node] = []
        if self.accept(close):
            return args
        while True:
            args.append(self.expression())
            if self.accept(close):
                return args
            self.expect(",")
            if self.accept(close):  # CEL allows a trailing comma in lists
                return args

    def primary(self) -> Node:
        token = self.next()
        if token.kind == "int" and token.value > INT64_MAX:
            raise NotEvaluatedError(f"the int literal {token.text} (out of range)")
        if token.kind in ("string", "int"):
            return ("lit", token.value)
        if token.kind == "op" and token.text == "(":
            node = self.expression()
            self.expect(")")
            return node
        if token.kind == "op" and token.text == "[":
            return ("list", self.arguments("]"))
        if token.kind == "op" and token.text == "{":
            raise NotEvaluatedError("map literals")
        if token.kind != "ident":
            raise NotEvaluatedError(f"unexpected {token.text or 'end of expression'!r}")
        name = token.text
        if name in ("true", "false"):
            return ("lit", name == "true")
        if name == "null":
            raise NotEvaluatedError("null")
        if name in _RESERVED:
            raise NotEvaluatedError(f"the reserved word {name}")
        if name == "cel" and self.peek().text == ".":
            return self.cel_namespace()
        if self.accept("("):
            args = self.arguments(")")
            if name == "has":
                if len(args) != 1 or args[0][0] != "select":
                    raise NotEvaluatedError("has() of something other than a field selection")
                return ("has", args[0])
            return ("call", name, None, args)
        return ("ident", name)

    def cel_namespace(self) -> Node:
        self.expect(".")
        function = self.next()
        if function.text != "bind" or not self.accept("("):
            raise NotEvaluatedError(f"cel.{function.text}")
        args = self.arguments(")")
        if len(args) != 3 or args[0][0] != "ident":
            raise NotEvaluatedError("cel.bind() takes a variable name, a value and an expression")
        return ("bind", args[0][1], args[1], args[2])


# --------------------------------------------------------------------------- evaluation


# Bool before int: a Python bool is an int.
_TYPE_NAMES: tuple[tuple[type, str], ...] = (
    (bool, "bool"),
    (int, "int"),
    (str, "string"),
    (Quantity, "Quantity"),
    (Semver, "Semver"),
    (list, "list"),
    (_Map, "map"),
)


def _type_name(value: Any) -> str:
    return next((name for kind, name in _TYPE_NAMES if isinstance(value, kind)), "other")


def _same_type(a: Any, b: Any) -> bool:
    return _type_name(a) == _type_name(b)


def _equal(a: Any, b: Any) -> bool:
    if not _same_type(a, b):
        raise NotEvaluatedError(f"== between {_type_name(a)} and {_type_name(b)}")
    if isinstance(a, Semver):
        return a.compare(b) == 0
    if isinstance(a, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, _Map):
        raise NotEvaluatedError("== between maps")
    return bool(a == b)


def _order(op: str, a: Any, b: Any) -> bool:
    # Strings order by code point in both (Go compares UTF-8 bytes, which keeps that order).
    if not _same_type(a, b) or _type_name(a) not in ("int", "string", "bool"):
        raise NotEvaluatedError(f"{op} between {_type_name(a)} and {_type_name(b)}")
    results: dict[str, bool] = {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}
    return results[op]


def _checked_int(value: int) -> int | CelError:
    if not INT64_MIN <= value <= INT64_MAX:
        return CelError("integer overflow")
    return value


def _arithmetic(op: str, a: Any, b: Any) -> Any:
    if op == "+" and isinstance(a, str) and isinstance(b, str):
        return a + b
    if _type_name(a) != "int" or _type_name(b) != "int":
        raise NotEvaluatedError(f"{op} between {_type_name(a)} and {_type_name(b)}")
    if op in ("/", "%") and b == 0:
        return CelError("division by zero" if op == "/" else "modulus by zero")
    if op in ("/", "%"):  # CEL's (Go's) division truncates toward zero
        quotient = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)
        return _checked_int(quotient if op == "/" else a - b * quotient)
    return _checked_int({"+": a + b, "-": a - b, "*": a * b}[op])


# Regular expressions whose meaning RE2 (CEL's matches) and Python's re share.
_REGEX_ESCAPES = frozenset("dDwWsS.\\-/()[]{}*+?|^$bB")
_REGEX_INTERVAL = re.compile(r"\{(\d+)(,(\d*))?\}")


def _regex(pattern: str) -> re.Pattern[str]:
    body = pattern[4:] if pattern.startswith("(?i)") else pattern
    index = 0
    while index < len(body):
        char = body[index]
        if char == "\\":
            if body[index + 1 : index + 2] not in _REGEX_ESCAPES or index + 1 >= len(body):
                raise NotEvaluatedError(f"the regular expression escape in {pattern!r}")
            index += 2
            continue
        if body.startswith("(?", index) and not body.startswith("(?:", index):
            raise NotEvaluatedError(f"the group syntax in {pattern!r}")
        if body.startswith(("[:", "[[", "[^["), index):
            raise NotEvaluatedError(f"the character class in {pattern!r}")
        if char == "{":
            interval = _REGEX_INTERVAL.match(body, index)
            if interval is None or int(interval.group(1)) > 1000:
                raise NotEvaluatedError(f"the repetition in {pattern!r}")
        if char in "*+?}" and body[index + 1 : index + 2] == "+":
            raise NotEvaluatedError(f"the repetition in {pattern!r}")  # possessive: Python only
        index += 1
    flags = re.ASCII | (re.IGNORECASE if pattern.startswith("(?i)") else 0)
    try:
        return re.compile(body, flags)
    except re.error as exc:
        raise NotEvaluatedError(f"the regular expression {pattern!r} ({exc})") from None


def _ascii_case(text: str, upper: bool) -> str:
    low, high = ("a", "z") if upper else ("A", "Z")
    shift = -32 if upper else 32
    return "".join(chr(ord(c) + shift) if low <= c <= high else c for c in text)


def _string_method(name: str, target: str, args: Sequence[Any]) -> Any:
    if name in ("lowerAscii", "upperAscii") and not args:
        return _ascii_case(target, upper=name == "upperAscii")
    if name == "size" and not args:
        return len(target)
    if len(args) != 1 or not isinstance(args[0], str):
        raise NotEvaluatedError(f"string.{name}() with these arguments")
    arg = args[0]
    if name == "startsWith":
        return target.startswith(arg)
    if name == "endsWith":
        return target.endswith(arg)
    if name == "contains":
        return arg in target
    if name == "matches":
        if "\n" in target or (arg.startswith("(?i)") and not target.isascii()):
            raise NotEvaluatedError("matches() on text with line breaks or non-ASCII letters")
        return _regex(arg).search(target) is not None
    raise NotEvaluatedError(f"string.{name}()")


def _compare_result(order: int) -> dict[str, Any]:
    return {"isGreaterThan": order > 0, "isLessThan": order < 0, "compareTo": order}


def _quantity_method(name: str, target: Quantity, args: Sequence[Any]) -> Any:
    if name in ("isGreaterThan", "isLessThan", "compareTo"):
        if len(args) != 1 or not isinstance(args[0], Quantity):
            raise NotEvaluatedError(f"Quantity.{name}() with these arguments")
        other = args[0].value
        order = (target.value > other) - (target.value < other)
        return _compare_result(order)[name]
    if args:
        raise NotEvaluatedError(f"Quantity.{name}() with arguments")
    if name == "sign":
        return (target.value > 0) - (target.value < 0)
    whole = target.value == target.value.to_integral_value()
    if name == "isInteger":
        return whole and INT64_MIN <= target.value <= INT64_MAX
    if name == "asInteger":
        if not whole or not INT64_MIN <= target.value <= INT64_MAX:
            return CelError("cannot convert value to integer")
        return int(target.value)
    raise NotEvaluatedError(f"Quantity.{name}()")


def _semver_method(name: str, target: Semver, args: Sequence[Any]) -> Any:
    if name in ("isGreaterThan", "isLessThan", "compareTo"):
        if len(args) != 1 or not isinstance(args[0], Semver):
            raise NotEvaluatedError(f"Semver.{name}() with these arguments")
        return _compare_result(target.compare(args[0]))[name]
    if not args and name in ("major", "minor", "patch"):
        return int(getattr(target, name))
    raise NotEvaluatedError(f"Semver.{name}()")


def _global(name: str, args: Sequence[Any]) -> Any:
    if name == "quantity" and len(args) == 1 and isinstance(args[0], str):
        try:
            return Quantity(parse_quantity(args[0]))
        except QuantityError:
            return CelError(f"quantity({args[0]!r}) is not a valid quantity")
    if name == "semver" and len(args) == 1 and isinstance(args[0], str):
        parsed = parse_semver(args[0])
        return parsed if parsed is not None else CelError(f"semver({args[0]!r}) is invalid")
    if name == "size" and len(args) == 1 and isinstance(args[0], str | list):
        return len(args[0])
    raise NotEvaluatedError(f"the function {name}()")


def _method(name: str, target: Any, args: Sequence[Any]) -> Any:
    if isinstance(target, str):
        return _string_method(name, target, args)
    if isinstance(target, Quantity):
        return _quantity_method(name, target, args)
    if isinstance(target, Semver):
        return _semver_method(name, target, args)
    if isinstance(target, list) and name == "size" and not args:
        return len(target)
    raise NotEvaluatedError(f"{_type_name(target)}.{name}()")


def _field(target: Any, name: str) -> Any:
    if isinstance(target, _Map):
        return target.get(name)
    if isinstance(target, Mapping):  # the device variable
        if name not in target:
            raise NotEvaluatedError(f"device.{name} (not a field of device)")
        return target[name]
    raise NotEvaluatedError(f"field {name} of a {_type_name(target)}")


class _Evaluator:
    def __init__(self, variables: Mapping[str, Any]) -> None:
        self.scopes: list[Mapping[str, Any]] = [variables]

    def value(self, node: Node) -> Any:
        kind = node[0]
        handler: Callable[[Node], Any] = getattr(self, f"_{kind}")
        return handler(node)

    def _lit(self, node: Node) -> Any:
        return node[1]

    def _ident(self, node: Node) -> Any:
        for scope in reversed(self.scopes):
            if node[1] in scope:
                return scope[node[1]]
        raise NotEvaluatedError(f"the identifier {node[1]}")

    def _select(self, node: Node) -> Any:
        target = self.value(node[1])
        return target if isinstance(target, CelError) else _field(target, node[2])

    def _index(self, node: Node) -> Any:
        target, key = self.value(node[1]), self.value(node[2])
        for value in (target, key):
            if isinstance(value, CelError):
                return value
        if isinstance(target, _Map) and isinstance(key, str):
            return target.get(key)
        if isinstance(target, list) and _type_name(key) == "int":
            return target[key] if 0 <= key < len(target) else CelError("index out of range")
        raise NotEvaluatedError(f"indexing a {_type_name(target)} with a {_type_name(key)}")

    def _list(self, node: Node) -> Any:
        items = [self.value(item) for item in node[1]]
        error = next((i for i in items if isinstance(i, CelError)), None)
        return error if error is not None else items

    def _has(self, node: Node) -> Any:
        select = node[1]
        target = self.value(select[1])
        if isinstance(target, CelError):
            return target
        if isinstance(target, _Map):
            return select[2] in target.items
        if isinstance(target, Mapping):
            return select[2] in target
        raise NotEvaluatedError(f"has() on a {_type_name(target)}")

    def _bind(self, node: Node) -> Any:
        self.scopes.append({node[1]: self.value(node[2])})
        try:
            return self.value(node[3])
        finally:
            self.scopes.pop()

    def _bool(self, node: Node) -> bool | CelError:
        value = self.value(node)
        if isinstance(value, bool | CelError):
            return value
        raise NotEvaluatedError(f"a {_type_name(value)} where a bool is needed")

    def _not(self, node: Node) -> Any:
        value = self._bool(node[1])
        return value if isinstance(value, CelError) else not value

    def _neg(self, node: Node) -> Any:
        value = self.value(node[1])
        if isinstance(value, CelError):
            return value
        if _type_name(value) != "int":
            raise NotEvaluatedError(f"negating a {_type_name(value)}")
        return _checked_int(-value)

    def _logic(self, node: Node, absorbing: bool) -> Any:
        """`&&` (absorbing False) and `||` (absorbing True), commutative over errors."""
        left = self._bool(node[1])
        if left is absorbing:
            return absorbing
        right = self._bool(node[2])
        if right is absorbing:
            return absorbing
        if isinstance(left, CelError):
            return left
        return right

    def _and(self, node: Node) -> Any:
        return self._logic(node, False)

    def _or(self, node: Node) -> Any:
        return self._logic(node, True)

    def _cond(self, node: Node) -> Any:
        condition = self._bool(node[1])
        if isinstance(condition, CelError):
            return condition
        return self.value(node[2] if condition else node[3])

    def _binary(self, node: Node) -> Any:
        op, left, right = node[1], self.value(node[2]), self.value(node[3])
        for value in (left, right):
            if isinstance(value, CelError):
                return value
        if op in ("==", "!="):
            return _equal(left, right) is (op == "==")
        if op == "in":
            if isinstance(right, list):
                return any(_equal(left, item) for item in right)
            if isinstance(right, _Map) and isinstance(left, str):
                return left in right.items
            raise NotEvaluatedError(f"in on a {_type_name(right)}")
        if op in ("<", "<=", ">", ">="):
            return _order(op, left, right)
        return _arithmetic(op, left, right)

    def _call(self, node: Node) -> Any:
        name, target_node, arg_nodes = node[1], node[2], node[3]
        if target_node is None:
            args = [self.value(a) for a in arg_nodes]
            error = next((a for a in args if isinstance(a, CelError)), None)
            return error if error is not None else _global(name, args)
        target = self.value(target_node)
        if name in ("all", "exists", "exists_one", "map", "filter", "orValue", "includes"):
            raise NotEvaluatedError(f"the {name}() macro or function")
        args = [self.value(a) for a in arg_nodes]
        error = next((v for v in (target, *args) if isinstance(v, CelError)), None)
        return error if error is not None else _method(name, target, args)


# --------------------------------------------------------------------------- the API


@dataclass(frozen=True, slots=True)
class Selector:
    """A compiled selector expression."""

    expression: str
    tree: Node

    def matches(self, device: DeviceInput) -> bool | CelError:
        """True or False, or the runtime error the scheduler would abort the allocation with.
        Raises NotEvaluatedError when evaluating it needs more than the subset."""
        result = _Evaluator({"device": device.variable()}).value(self.tree)
        if isinstance(result, bool | CelError):
            return result
        return CelError(f"the expression returned a {_type_name(result)}, not a bool")

    def required_drivers(self) -> frozenset[str] | None:
        """The drivers the expression is limited to by a top-level conjunct `device.driver ==
        '<name>'` (or `device.driver in [...]`), None when it names none."""
        found: frozenset[str] | None = None
        for conjunct in _conjuncts(self.tree):
            drivers = _driver_constraint(conjunct)
            if drivers is not None:
                found = drivers if found is None else found & drivers
        return found


def _conjuncts(node: Node) -> list[Node]:
    if node[0] == "and":
        return [*_conjuncts(node[1]), *_conjuncts(node[2])]
    return [node]


_DRIVER = ("select", ("ident", "device"), "driver")


def _driver_constraint(node: Node) -> frozenset[str] | None:
    if node[0] != "binary":
        return None
    op, left, right = node[1], node[2], node[3]
    if op == "==":
        for one, other in ((left, right), (right, left)):
            if one == _DRIVER and other[0] == "lit" and isinstance(other[1], str):
                return frozenset({other[1]})
    if op == "in" and left == _DRIVER and right[0] == "list":
        names = [item[1] for item in right[1] if item[0] == "lit" and isinstance(item[1], str)]
        if len(names) == len(right[1]):
            return frozenset(names)
    return None


def _depth(tree: Node) -> int:
    """How deeply the tree nests (without recursion: `a && b && ...` chains are left-deep)."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        for child in node[1:]:
            if isinstance(child, tuple) and child and isinstance(child[0], str):
                stack.append((child, depth + 1))
            elif isinstance(child, list):
                stack.extend((item, depth + 1) for item in child)
    return deepest


def compile_selector(expression: str) -> Selector:
    """Parse a selector; raises NotEvaluatedError (with what is outside the subset)."""
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise NotEvaluatedError("an expression longer than 10 KiB")
    tree = _Parser(expression).parse()
    if _depth(tree) > _MAX_DEPTH:
        raise NotEvaluatedError("an expression nested too deeply")
    return Selector(expression, tree)
