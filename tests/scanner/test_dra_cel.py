"""The CEL subset of DRA selectors: CEL's semantics where evaluated, NotEvaluatedError elsewhere.

Expected values follow cel-go (commutative && / || over errors, truncating integer division)
and the Kubernetes CEL libraries (quantity, semver) that kube-scheduler evaluates selectors
with (k8s.io/dynamic-resource-allocation/cel).
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from gpu_audit.k8s.dra_cel import (
    CelError,
    DeviceInput,
    NotEvaluatedError,
    compile_selector,
    parse_semver,
)

H100 = DeviceInput(
    "gpu.nvidia.com",
    {
        "gpu.nvidia.com": {
            "type": "gpu",
            "productName": "NVIDIA H100 80GB HBM3",
            "architecture": "Hopper",
            "driverVersion": parse_semver("580.126.20"),
            "cudaComputeCapability": parse_semver("9.0.0"),
        },
        "resource.kubernetes.io": {"pciBusID": "0000:65:00.0"},
    },
    {"gpu.nvidia.com": {"memory": Decimal(80 * 2**30)}},
)


def value(expression: str, device: DeviceInput = H100) -> bool | CelError:
    return compile_selector(expression).matches(device)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("device.driver == 'gpu.nvidia.com'", True),
        ('device.attributes["gpu.nvidia.com"].type == "gpu"', True),
        ("device.attributes['gpu.nvidia.com'].architecture != 'Hopper'", False),
        ("device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H100')", True),
        ("device.attributes['gpu.nvidia.com'].productName.endsWith('HBM3')", True),
        ("device.attributes['gpu.nvidia.com'].productName.contains('80GB')", True),
        ("device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('h100')", True),
        ("device.attributes['gpu.nvidia.com'].productName.matches('^H100')", False),
        (
            "device.attributes['gpu.nvidia.com'].productName.matches('(?i)^nvidia h1[0-9]{2} ')",
            True,
        ),
        (
            "device.attributes['resource.kubernetes.io'].pciBusID.upperAscii() == '0000:65:00.0'",
            True,
        ),
        ("device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('40Gi'))", True),
        ("device.capacity['gpu.nvidia.com'].memory.isLessThan(quantity('80Gi'))", False),
        ("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('80Gi')) == 0", True),
        ("device.capacity['gpu.nvidia.com'].memory == quantity('81920Mi')", True),
        ("quantity('200M').compareTo(quantity('0.2G')) == 0", True),
        ("quantity('50M').isLessThan(quantity('50Mi'))", True),
        ("device.capacity['gpu.nvidia.com'].memory.asInteger() == 85899345920", True),
        (
            "device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan(semver('565.0.0'))",
            True,
        ),
        ("device.attributes['gpu.nvidia.com'].driverVersion.major() == 580", True),
        ("device.attributes['gpu.nvidia.com'].cudaComputeCapability == semver('9.0.0')", True),
        ("semver('1.0.0-alpha').isLessThan(semver('1.0.0'))", True),
        ("semver('1.0.0-alpha.2').compareTo(semver('1.0.0-alpha.10')) == -1", True),
        ("semver('1.0.0-2').isLessThan(semver('1.0.0-alpha'))", True),
        ("semver('1.0.0+build.1') == semver('1.0.0')", True),
        ("device.attributes['gpu.nvidia.com'].architecture in ['Ampere', 'Hopper']", True),
        ("'gpu.nvidia.com' in device.attributes", True),
        ("has(device.attributes['gpu.nvidia.com'].productName)", True),
        ("has(device.attributes['gpu.nvidia.com'].profile)", False),
        (
            "cel.bind(g, device.attributes['gpu.nvidia.com'], g.type == 'gpu' && g.brand == 'x')",
            CelError("no such key: brand"),
        ),
        ("-7 / 2 == -3 && -7 % 2 == -1 && 7 % -2 == 1 && 2 + 3 * 4 == 14", True),
        ("size('abc') == 3 && 'abc'.size() == 3 && size([1, 2]) == 2", True),
        ("!(device.driver == 'x') ? true : false", True),
        ("'a\\'b' == \"a'b\" && r'a\\n' == 'a\\\\n'", True),
        ("'''multi\nline''' == 'multi\\nline'", True),
        ("0x10 == 16", True),
        ("'b' > 'a' && true > false && 2 >= 2", True),
    ],
)
def test_evaluates_the_subset_as_cel_does(expression: str, expected: object) -> None:
    assert value(expression) == expected


def test_an_unknown_domain_is_an_empty_map_and_an_unknown_name_an_error() -> None:
    assert value("device.attributes['other.example.com'].model == 'x'") == CelError(
        "no such key: model"
    )
    assert value("has(device.attributes['other.example.com'].model)") is False
    assert value("device.capacity['gpu.nvidia.com'].cores.isGreaterThan(quantity('1'))") == (
        CelError("no such key: cores")
    )


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        # && and || absorb an error when the other side decides the result, in either order.
        ("device.driver == 'other' && device.attributes['gpu.nvidia.com'].index == 0", False),
        ("device.attributes['gpu.nvidia.com'].index == 0 && device.driver == 'other'", False),
        (
            "device.attributes['gpu.nvidia.com'].index == 0 || device.driver == 'gpu.nvidia.com'",
            True,
        ),
        (
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].index == 0",
            CelError("no such key: index"),
        ),
        (
            "device.driver == 'other' || device.attributes['gpu.nvidia.com'].index == 0",
            CelError("no such key: index"),
        ),
        ("!(device.attributes['gpu.nvidia.com'].index == 0)", CelError("no such key: index")),
        (
            "quantity('200K').isGreaterThan(quantity('1'))",
            CelError("quantity('200K') is not a valid quantity"),
        ),
        ("semver('01.0.0') == semver('1.0.0')", CelError("semver('01.0.0') is invalid")),
        ("1 / 0 == 1", CelError("division by zero")),
        ("9223372036854775807 + 1 > 0", CelError("integer overflow")),
    ],
)
def test_runtime_errors_flow_as_in_cel(expression: str, expected: object) -> None:
    assert value(expression) == expected


@pytest.mark.parametrize(
    "expression",
    [
        "device.attributes['gpu.nvidia.com'].?profile.orValue('') == ''",
        "['a', 'b'].exists(x, x == device.driver)",
        "device.attributes['gpu.nvidia.com'].productName.split(' ').size() == 4",
        "device.capacity['gpu.nvidia.com'].memory.asApproximateFloat() > 1.5",
        "device.attributes['gpu.nvidia.com'].type == 1",
        "device.capacity['gpu.nvidia.com'].memory > quantity('1')",
        "device.attributes['gpu.nvidia.com'].productName.matches('(?=H100)')",
        "device.attributes['gpu.nvidia.com'].productName.matches('(H)\\\\1')",
        "device.attributes['gpu.nvidia.com'].productName.matches('H1*+')",
        "device.foo == 1",
        "1u == 1u",
        "{'a': 1}['a'] == 1",
        "device.driver == 'a' &&",
    ],
)
def test_outside_the_subset_is_not_evaluated(expression: str) -> None:
    with pytest.raises(NotEvaluatedError):
        value(expression)


def test_regular_expressions_match_anywhere_like_re2() -> None:
    assert value("device.attributes['gpu.nvidia.com'].productName.matches('H100')") is True
    assert value("device.attributes['gpu.nvidia.com'].productName.matches('^H100$')") is False
    assert value("device.attributes['gpu.nvidia.com'].productName.matches('\\\\d+GB')") is True


@pytest.mark.parametrize(
    ("expression", "drivers"),
    [
        (
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
            {"gpu.nvidia.com"},
        ),
        ("'gpu.nvidia.com' == device.driver", {"gpu.nvidia.com"}),
        (
            "device.driver in ['a.example.com', 'b.example.com'] && true",
            {"a.example.com", "b.example.com"},
        ),
        ("device.driver == 'a' || device.driver == 'b'", None),
        ("device.attributes['gpu.nvidia.com'].type == 'gpu'", None),
    ],
)
def test_required_drivers_come_from_top_level_conjuncts(
    expression: str, drivers: set[str] | None
) -> None:
    found = compile_selector(expression).required_drivers()
    assert (None if found is None else set(found)) == drivers


def test_semver_parsing_is_strict_like_blang_semver() -> None:
    assert parse_semver("580.126.20") is not None
    assert parse_semver("1.2.3-rc.1+build.5") is not None
    for bad in ("570.158.01", "v1.2.3", "1.2", "1.2.3-01", ""):
        assert parse_semver(bad) is None, bad


@pytest.mark.parametrize(
    "expression",
    ["!" * 5000 + "true", " && ".join(["true"] * 1000), "(" * 3000 + "true" + ")" * 3000],
)
def test_deep_nesting_is_not_evaluated_instead_of_exhausting_the_stack(expression: str) -> None:
    with pytest.raises(NotEvaluatedError, match="nested too deeply"):
        compile_selector(expression)
