"""The value types that flow through the scanner: references, results, check metadata."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from gpu_audit.snapshot import Snapshot


class Severity(Enum):
    """How bad a failure is. Ordered: CRITICAL > HIGH > MEDIUM > LOW > INFO."""

    CRITICAL = "critical"
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"
    INFO = "info"

    @property
    def rank(self) -> int:
        return _SEVERITY_RANK[self]

    @property
    def weight(self) -> int:
        """The weight of a check of this severity in the score (see README, Scoring)."""
        return _SEVERITY_WEIGHT[self]

    @classmethod
    def parse(cls, text: str) -> Severity:
        try:
            return cls(text.lower())
        except ValueError:
            names = ", ".join(s.value for s in cls)
            raise ValueError(f"unknown severity {text!r} (expected one of {names})") from None


_SEVERITY_RANK = {
    Severity.INFO: 0,
    Severity.LOW: 1,
    Severity.MEDIUM: 2,
    Severity.HIGH: 3,
    Severity.CRITICAL: 4,
}
_SEVERITY_WEIGHT = {
    Severity.INFO: 0,
    Severity.LOW: 1,
    Severity.MEDIUM: 3,
    Severity.HIGH: 5,
    Severity.CRITICAL: 10,
}


class Category(Enum):
    """The catalogue's categories. `codes` are the id segments allowed for checks in it."""

    STACK = "stack"
    SHARING = "sharing"
    NODES = "nodes"
    SCHEDULING = "scheduling"
    WORKLOADS = "workloads"
    DISTRIBUTED = "distributed-training"
    QUOTA = "quota"
    COST = "cost"
    AUTOSCALING = "autoscaling"
    MONITORING = "monitoring"
    SERVING = "serving"
    STORAGE = "storage"
    NETWORK_SECURITY = "network-security"

    @property
    def codes(self) -> tuple[str, ...]:
        return _CATEGORY_CODES[self]

    @property
    def title(self) -> str:
        return _CATEGORY_TITLES[self]

    @classmethod
    def parse(cls, text: str) -> Category:
        wanted = text.lower()
        for category in cls:
            if wanted == category.value or wanted in (c.lower() for c in category.codes):
                return category
        names = ", ".join(c.value for c in cls)
        raise ValueError(f"unknown category {text!r} (expected one of {names})")


_CATEGORY_CODES: dict[Category, tuple[str, ...]] = {
    Category.STACK: ("STACK",),
    Category.SHARING: ("SHARE",),
    Category.NODES: ("NODE",),
    Category.SCHEDULING: ("SCHED",),
    Category.WORKLOADS: ("WL",),
    Category.DISTRIBUTED: ("DIST",),
    Category.QUOTA: ("QUOTA",),
    Category.COST: ("COST",),
    Category.AUTOSCALING: ("HPA",),
    Category.MONITORING: ("MON",),
    Category.SERVING: ("SRV",),
    Category.STORAGE: ("STO",),
    Category.NETWORK_SECURITY: ("NET", "SEC"),
}
_CATEGORY_TITLES: dict[Category, str] = {
    Category.STACK: "GPU Operator and driver stack",
    Category.SHARING: "Device plugin and GPU sharing",
    Category.NODES: "GPU nodes",
    Category.SCHEDULING: "Scheduling and placement",
    Category.WORKLOADS: "GPU workloads",
    Category.DISTRIBUTED: "Distributed training",
    Category.QUOTA: "Quotas and multi-tenancy",
    Category.COST: "Cost",
    Category.AUTOSCALING: "Autoscaling",
    Category.MONITORING: "Monitoring",
    Category.SERVING: "Model serving",
    Category.STORAGE: "Storage",
    Category.NETWORK_SECURITY: "Network and security",
}


@dataclass(frozen=True, slots=True)
class ObjRef:
    """Identifies one object. `namespace` is "" for cluster-scoped objects."""

    kind: str
    namespace: str
    name: str

    @property
    def sort_key(self) -> tuple[str, str, str]:
        return (self.kind, self.namespace, self.name)

    @property
    def kind_name(self) -> str:
        """The bare kind ("ServiceMonitor" for "ServiceMonitor.monitoring.coreos.com")."""
        return self.kind.split(".", 1)[0]

    def __str__(self) -> str:
        if self.namespace:
            return f"{self.kind_name} {self.namespace}/{self.name}"
        return f"{self.kind_name} {self.name}"


class Outcome(Enum):
    """What a check says about one object it evaluated."""

    PASS = "pass"
    FAIL = "fail"


@dataclass(frozen=True, slots=True)
class Result:
    """One check's verdict on one object.

    `path` points at the field that decided it. `severity` overrides the check's default for
    this one result (for checks whose impact depends on what they found). `fix` holds values
    the check's remediation template needs beyond the object's kind, namespace and name.
    `pod_spec_path` is where the pod spec sits in the object (for results on pod templates), so
    that a remediation written as a pod-spec fragment can be given as a patch of the object.
    """

    outcome: Outcome
    ref: ObjRef
    message: str
    path: str = ""
    severity: Severity | None = None
    fix: Mapping[str, str] = field(default_factory=dict)
    pod_spec_path: str = ""


class CheckStatus(Enum):
    PASSED = "passed"
    FAILED = "failed"
    NOT_EVALUATED = "not_evaluated"
    ERROR = "error"


CheckFunction = Callable[["Snapshot"], Iterable[Result]]


@dataclass(frozen=True, slots=True)
class Check:
    """A check: metadata plus the pure function that evaluates a snapshot.

    `requires` lists what the check reads: each entry is a resource type, or a tuple of
    resource types of which any one is enough (for example all the workload kinds).
    `remediation_root` is "" when the remediation is written as it is to be applied (a whole
    object, a patch of the object, a command) and "pod_spec" when it is a fragment of a pod
    spec, which the engine nests under the template's path in the object at hand.
    """

    id: str
    title: str
    category: Category
    severity: Severity
    rationale: str
    remediation: str
    references: tuple[str, ...]
    requires: tuple[str | tuple[str, ...], ...]
    function: CheckFunction
    detection: str = ""
    origin: str = "gpu-audit"
    module: str = ""
    remediation_root: str = ""

    def run(self, snapshot: Snapshot) -> list[Result]:
        return list(self.function(snapshot))

    @property
    def required_types(self) -> frozenset[str]:
        types: set[str] = set()
        for entry in self.requires:
            types.update((entry,) if isinstance(entry, str) else entry)
        return frozenset(types)


@dataclass(frozen=True, slots=True)
class Exemption:
    """Why a failed result does not count, and where that was declared: an object's
    `gpu-audit.io/exempt` annotation (`source` "annotation") or entry `entry` (1-based) of an
    exemptions file (`source` "file"). `expires` is "" or YYYY-MM-DD."""

    source: str
    reason: str
    file: str = ""
    entry: int = 0
    expires: str = ""


@dataclass(frozen=True, slots=True)
class SourceLocation:
    """Where an object came from: a file (and document index in it) or a live cluster."""

    file: str
    document: int = 0

    def __str__(self) -> str:
        return f"{self.file} (document {self.document + 1})" if self.file else "live cluster"


@dataclass(frozen=True, slots=True)
class Resource:
    """One object, as raw camelCase data exactly as the API returns it or as written in YAML.

    Checks must treat `raw` as read-only: the snapshot is shared by every check.
    """

    ref: ObjRef
    api_version: str
    raw: Mapping[str, Any]
    source: SourceLocation
    # Built on first use: checks read labels of every object many times over.
    _labels: Mapping[str, str] | None = field(default=None, init=False, repr=False, compare=False)
    _annotations: Mapping[str, str] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    @property
    def metadata(self) -> Mapping[str, Any]:
        value = self.raw.get("metadata")
        return value if isinstance(value, Mapping) else {}

    @property
    def labels(self) -> Mapping[str, str]:
        if self._labels is None:
            object.__setattr__(self, "_labels", _str_mapping(self.metadata.get("labels")))
        return cast(Mapping[str, str], self._labels)

    @property
    def annotations(self) -> Mapping[str, str]:
        if self._annotations is None:
            value = _str_mapping(self.metadata.get("annotations"))
            object.__setattr__(self, "_annotations", value)
        return cast(Mapping[str, str], self._annotations)

    @property
    def spec(self) -> Mapping[str, Any]:
        value = self.raw.get("spec")
        return value if isinstance(value, Mapping) else {}

    @property
    def status(self) -> Mapping[str, Any]:
        value = self.raw.get("status")
        return value if isinstance(value, Mapping) else {}


def _str_mapping(value: object) -> Mapping[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): "" if v is None else str(v) for k, v in value.items()}
