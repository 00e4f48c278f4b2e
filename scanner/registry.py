"""Finding checks: the built-in ones under gpu_audit.checks, and plugins' through entry points.

The registry is a return value, built fresh on every call: importing a module registers nothing.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Iterable, Iterator
from importlib import metadata
from pathlib import Path
from types import ModuleType

from gpu_audit.declarative import load_check_dir
from gpu_audit.errors import did_you_mean
from gpu_audit.model import Category, Check, Severity

ENTRY_POINT_GROUP = "gpu_audit.checks"
BUILTIN_ORIGIN = "gpu-audit"
BUILTIN_PREFIX = "GPU-"
DECLARATIVE_FOLDER = "declarative"


class RegistryError(Exception):
    """A check set that cannot be loaded: duplicate ids, reserved prefixes, broken plugins."""


def _modules(package: ModuleType) -> Iterator[ModuleType]:
    yield package
    paths = getattr(package, "__path__", None)
    if paths is None:
        return
    for info in sorted(pkgutil.walk_packages(paths, package.__name__ + "."), key=lambda i: i.name):
        yield importlib.import_module(info.name)


def _checks_in(module: ModuleType) -> Iterator[Check]:
    for value in vars(module).values():
        # A check module may import another's Check; only the defining module owns it.
        if isinstance(value, Check) and value.module == module.__name__:
            yield value


def _add(registry: dict[str, Check], found: Check, origin: str) -> None:
    existing = registry.get(found.id)
    if existing is not None:
        raise RegistryError(
            f"{found.id} is defined by both {existing.origin} ({existing.module}) "
            f"and {origin} ({found.module})"
        )
    if origin != BUILTIN_ORIGIN and found.id.startswith(BUILTIN_PREFIX):
        raise RegistryError(
            f"{found.id} from {origin} ({found.module}) uses the prefix {BUILTIN_PREFIX} "
            "reserved for gpu-audit's own checks"
        )
    registry[found.id] = dataclasses.replace(found, origin=origin)


def builtin_checks() -> dict[str, Check]:
    import gpu_audit.checks

    registry: dict[str, Check] = {}
    for module in _modules(gpu_audit.checks):
        for found in _checks_in(module):
            _add(registry, found, BUILTIN_ORIGIN)
    # The built-in declarative checks: YAML files shipped as package data of gpu_audit.checks.
    for found in load_check_dir(Path(gpu_audit.checks.__file__).parent / DECLARATIVE_FOLDER):
        _add(registry, found, BUILTIN_ORIGIN)
    return registry


def load_checks(
    *, plugins: bool = True, extra: Iterable[tuple[str, Iterable[Check]]] = ()
) -> dict[str, Check]:
    """All checks by id, sorted. `extra` adds (origin, checks) pairs, e.g. from --checks-dir."""
    registry = builtin_checks()
    if plugins:
        entry_points = sorted(
            metadata.entry_points(group=ENTRY_POINT_GROUP),
            key=lambda ep: (ep.name, ep.dist.name if ep.dist else ""),
        )
        for ep in entry_points:
            origin = ep.dist.name if ep.dist else ep.name
            try:
                package = ep.load()
            except Exception as exc:
                raise RegistryError(f"plugin {origin} ({ep.value}) failed to load: {exc}") from exc
            if not isinstance(package, ModuleType):
                raise RegistryError(f"plugin {origin} ({ep.value}) must name a module or package")
            for module in _modules(package):
                for found in _checks_in(module):
                    _add(registry, found, origin)
    for origin, checks in extra:
        for found in checks:
            _add(registry, found, origin)
    return dict(sorted(registry.items()))


def select_checks(
    registry: dict[str, Check],
    *,
    only: Iterable[str] = (),
    skip: Iterable[str] = (),
    categories: Iterable[Category] = (),
    min_severity: Severity | None = None,
) -> dict[str, Check]:
    """Filter the registry; ids in `only`/`skip` match in any case (gpu-wl-001), and unknown
    ones are an error naming the closest ids, not a silent no-op."""
    by_folded = {cid.casefold(): cid for cid in registry}
    unknown = sorted({i for i in (*only, *skip) if i.casefold() not in by_folded})
    if unknown:
        raise RegistryError(
            f"unknown check id(s): {', '.join(unknown)}{did_you_mean(unknown, registry)}"
        )
    only = {by_folded[i.casefold()] for i in only}
    skip = {by_folded[i.casefold()] for i in skip}
    cats = set(categories)
    return {
        cid: c
        for cid, c in registry.items()
        if (not only or cid in only)
        and cid not in skip
        and (not cats or c.category in cats)
        and (min_severity is None or c.severity.rank >= min_severity.rank)
    }
