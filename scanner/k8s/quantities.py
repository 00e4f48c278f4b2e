"""Kubernetes resource quantities: parsing, formatting and summing ResourceLists."""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from functools import lru_cache

from gpu_audit.k8s.objects import as_mapping

# --------------------------------------------------------------------------- quantities


class QuantityError(ValueError):
    """A value that is not a Kubernetes resource quantity."""


_QUANTITY = re.compile(
    r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:(Ki|Mi|Gi|Ti|Pi|Ei)|([numkMGTPE]?)|([eE][+-]?\d+))$"
)
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}


# No Kubernetes object holds a quantity of 2^63 or more (an int64 of the smallest unit);
# bigger numbers would also overflow the arithmetic the checks do (1e28 % 1).
_QUANTITY_LIMIT = Decimal(2) ** 63


def parse_quantity(value: object) -> Decimal:
    """Parse a quantity the way the API server does: 1, "1", "1000m" and "1e0" are equal."""
    parsed = _parse_quantity(value)
    if not parsed.is_finite() or abs(parsed) >= _QUANTITY_LIMIT:
        raise QuantityError(f"{value!r} is out of range for a quantity")
    return parsed


def _parse_quantity(value: object) -> Decimal:
    if isinstance(value, bool) or value is None:
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(repr(value))
    if not isinstance(value, str):
        raise QuantityError(f"{value!r} is not a quantity")
    return _parse_text(value)


# A cluster repeats few quantity texts ("1", "16Gi") across its objects: each is parsed once.
# Decimals are immutable, so a cached one is safe to share (gpu-audit never changes the
# thread's decimal context, which the arithmetic below uses).
@lru_cache(maxsize=65536)
def _parse_text(value: str) -> Decimal:
    match = _QUANTITY.match(value.strip())
    if not match:
        raise QuantityError(f"{value!r} is not a quantity")
    number, binary, decimal_suffix, exponent = match.groups()
    try:
        base = Decimal(number)
        if binary:
            return base * _BINARY[binary]
        if exponent:
            return base * (Decimal(10) ** int(exponent[1:]))
        return base * _DECIMAL[decimal_suffix or ""]
    except (InvalidOperation, OverflowError) as exc:  # pragma: no cover - regex bounds input
        raise QuantityError(f"{value!r} is not a quantity") from exc


def format_quantity(value: Decimal) -> str:
    normalized = value.normalize()
    return format(normalized, "f") if normalized == normalized.to_integral() else str(normalized)


def quantities(raw: object) -> dict[str, Decimal]:
    """A ResourceList (requests, allocatable, overhead) as numbers; non-quantities are skipped."""
    out: dict[str, Decimal] = {}
    for name, value in as_mapping(raw).items():
        try:
            out[str(name)] = parse_quantity(value)
        except QuantityError:
            continue
    return out


def add_quantities(total: dict[str, Decimal], more: Mapping[str, Decimal]) -> None:
    for name, value in more.items():
        total[name] = total.get(name, Decimal(0)) + value
