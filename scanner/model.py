"""The value types that flow through the scanner: references, results, check metadata."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

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
    FABRIC = "fabric"

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
    Category.FABRIC: ("FAB",),
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
    Category.FABRIC: "Multi-node fabric (EFA, RDMA, GPUDirect)",
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


class RelatedRole(Enum):
    """How an object listed in a finding's `related` stands to the finding's object (which is
    always the object to change). Ordered: the order related objects are listed in.

    SYMPTOM: it shows the consequence, it is what a user notices (the nodes that advertise no
    GPUs because of a DaemonSet, the namespace whose GPU use a ResourceQuota fails to cap).
    SELECTED_BY: the finding's object selects it and so reaches it (the workloads a
    NetworkPolicy's podSelector cuts off from DNS).
    OWNER: it owns, generates or names the finding's object, so a change may have to be made
    through it or would be reverted by it (the ClusterPolicy behind an operator DaemonSet,
    the ClusterPolicy whose devicePlugin.config names a ConfigMap).
    CAUSE: it causes or contributes to what the finding reports (on a finding that stays on
    the victim because no single object to change could be told from the input).
    """

    SYMPTOM = "symptom"
    SELECTED_BY = "selected-by"
    OWNER = "owner"
    CAUSE = "cause"

    @property
    def rank(self) -> int:
        return _ROLE_ORDER[self]

    @classmethod
    def parse(cls, text: str) -> RelatedRole:
        try:
            return cls(text.lower())
        except ValueError:
            names = ", ".join(r.value for r in cls)
            raise ValueError(f"unknown related role {text!r} (expected one of {names})") from None


_ROLE_ORDER = {role: i for i, role in enumerate(RelatedRole)}


@dataclass(frozen=True, slots=True)
class RelatedRef:
    """An object a finding lists beside the object to change, and its role (RelatedRole)."""

    ref: ObjRef
    role: RelatedRole

    @property
    def sort_key(self) -> tuple[int, str, str, str]:
        return (self.role.rank, *self.ref.sort_key)


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
    `related` lists other objects that show the symptom or explain the finding (`ref` is always
    the object to change), without duplicates, in RelatedRef.sort_key order.
    `inherited` is, for a result on a pod template derived from another object's (a TrainJob's
    from its runtime's), the same result as the base template would give it: when the check
    gives the base exactly that, the problem comes from the base object and is reported there
    once, with this result's object as a symptom (gpu_audit.engine).
    """

    outcome: Outcome
    ref: ObjRef
    message: str
    path: str = ""
    severity: Severity | None = None
    fix: Mapping[str, str] = field(default_factory=dict)
    pod_spec_path: str = ""
    related: tuple[RelatedRef, ...] = ()
    inherited: Result | None = None


class CheckStatus(Enum):
    PASSED = "passed"
    FAILED = "failed"
    NOT_EVALUATED = "not_evaluated"
    ERROR = "error"


CheckFunction = Callable[["Snapshot"], Iterable[Result]]


class FixKind(Enum):
    """What a check's remediation is, so how a reader (or a tool) applies it.

    PATCH: YAML without apiVersion/kind, a patch of the object the finding names (`kubectl
    patch --patch-file`); a pod-spec fragment (root "pod_spec") is nested under the object's
    pod template, and for a custom resource, which takes no strategic merge patch, rendered as
    a `kubectl patch --type=json` command of the object (gpu_audit.k8s.cr_patches). COMMAND: shell command lines, `kubectl` or `helm`. MANIFEST: one or more
    whole objects with apiVersion and kind (`kubectl apply -f`). PROCEDURE: steps in prose.
    """

    PATCH = "patch"
    COMMAND = "command"
    MANIFEST = "manifest"
    PROCEDURE = "procedure"

    @classmethod
    def parse(cls, text: str) -> FixKind:
        try:
            return cls(text.lower())
        except ValueError:
            names = ", ".join(k.value for k in cls)
            raise ValueError(f"unknown fix kind {text!r} (expected one of {names})") from None


REMEDIATION_ROOTS = ("", "pod_spec")

# A string.Template placeholder ($name, ${name}) or its escape ($$).
_PLACEHOLDER = re.compile(r"\$(?:\$|([A-Za-z_][A-Za-z0-9_]*)|\{([A-Za-z_][A-Za-z0-9_]*)\})")
# A comment: a # at the start of a line or after white space, to the end of the line.
_COMMENT = re.compile(r"(^|\s)#.*$")
# Command words that say nothing about the fix without their arguments.
_BARE_COMMANDS = re.compile(r"\b(kubectl|helm)\b")
# A placeholder of a generic form: <node>, <the valid parameters>.
_ANGLE = re.compile(r"<[A-Za-z_][\w.\- ]*>")
# Strategic-merge-patch directives: real keys of a patch, not placeholders.
_SMP_DIRECTIVE = re.compile(
    r"\$(?:patch|retainKeys)(?=\s*:)|\$(?:setElementOrder|deleteFromPrimitiveList)/"
)


def _substance(line: str) -> str:
    """A template line without its comment, its placeholders and bare command words."""
    text = _COMMENT.sub("", _PLACEHOLDER.sub(lambda m: "$" if m.group(0) == "$$" else " ", line))
    return _BARE_COMMANDS.sub("", text)


def placeholder_only(template: str) -> bool:
    """True when a remediation template has no line with something of its own to say: only
    comments, $placeholders and bare `kubectl`/`helm` (`$command   # $summary`, `$snippet`,
    `kubectl $command`). Its documented form cannot be derived from it."""
    return not any(re.search(r"[A-Za-z0-9]", _substance(line)) for line in template.splitlines())


def generic_from_template(template: str) -> str:
    """The documented form of a template: each $placeholder as <placeholder>, $$ as $."""

    def angle(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return f"<{name}>" if name else "$"

    return _PLACEHOLDER.sub(angle, template)


def infer_fix_kind(generic: str, root: str = "") -> FixKind:
    """The kind a remediation's generic form reads as, for checks that do not declare one
    (third-party checks written before fix kinds existed)."""
    if root == "pod_spec":
        return FixKind.PATCH
    lines = [ln.strip() for ln in generic.splitlines()]
    code = [ln for ln in lines if ln and not ln.startswith("#")]
    if not code:
        return FixKind.PROCEDURE
    if code[0].startswith(("kubectl ", "helm ")):
        return FixKind.COMMAND
    top_level = {ln.split(":", 1)[0] for ln in generic.splitlines() if ":" in ln}
    if {"apiVersion", "kind"} <= top_level:
        return FixKind.MANIFEST
    if re.match(r"^[\w.\-\"'<>/]+:(\s|$)", code[0]):
        return FixKind.PATCH
    return FixKind.PROCEDURE


@dataclass(frozen=True, slots=True)
class Remediation:
    """How to fix what a check finds.

    `template` is the string.Template the engine renders for each failed result (`$kind`,
    `$namespace`, `$name` and the keys of the result's `fix`). `generic` is the readable form
    for the check reference and `checks show`: real YAML or commands with <angle-bracket>
    placeholders (`<node>`, `<namespace>`), never $placeholders. `root` is "" when the
    template is written as it is to be applied (a whole object, a patch of the object, a
    command) and "pod_spec" when it is a fragment of a pod spec, which the engine nests under
    the template's path in the object at hand.
    """

    kind: FixKind
    template: str
    generic: str
    root: str = ""

    def __post_init__(self) -> None:
        if self.root not in REMEDIATION_ROOTS:
            raise ValueError(f"remediation_root must be one of {REMEDIATION_ROOTS}")

    @classmethod
    def declare(
        cls, template: str, *, kind: FixKind | None = None, generic: str = "", root: str = ""
    ) -> Remediation:
        """A remediation as a check declares it; the generic form defaults to the template
        with <placeholders>. Raises ValueError (naming the argument) when a placeholder-only
        template has no generic form, or a generic form keeps a $placeholder."""
        if root not in REMEDIATION_ROOTS:
            raise ValueError(f"remediation_root must be one of {REMEDIATION_ROOTS}")
        if not generic.strip():
            if placeholder_only(template):
                raise ValueError(
                    "remediation_generic is required: the remediation template is only "
                    "placeholders and comments, so the check reference would say nothing"
                )
            generic = generic_from_template(template)
        else:
            left = sorted(
                name
                for m in _PLACEHOLDER.finditer(_SMP_DIRECTIVE.sub(" ", generic))
                if (name := m.group(1) or m.group(2))
            )
            if left:
                raise ValueError(
                    f"remediation_generic uses ${left[0]}: write placeholders as <{left[0]}>"
                )
            if placeholder_only(_ANGLE.sub(" ", generic)):
                raise ValueError(
                    "remediation_generic is only placeholders and comments: show the YAML or "
                    "the commands that fix it"
                )
        return cls(kind or infer_fix_kind(generic, root), template, generic, root)


ADMISSION_SCOPES = ("object", "pod", "container")


@dataclass(frozen=True, slots=True)
class AdmissionRule:
    """A check's form at admission: CEL that decides it from the one object being admitted
    (`gpu-audit admission` renders it as a ValidatingAdmissionPolicy, gpu_audit.admission).

    `scope` "object": `valid` is evaluated on `object` (of the resource types in `kinds`).
    "pod": on each pod template `t` (`t.metadata`, `t.spec`) of a workload; "container": on
    each container and init container `c` of each template `t`. `valid` is true when the
    subject complies; `where` (optional) selects the subjects it applies to. Both may use the
    macros of gpu_audit.admission (`@gpu(c)`, `@stack_agent(t)`...). `severity` is the
    severity of what the CEL decides when it is not the check's (a part of the check), and
    `note` says which part that is, for the check reference.
    """

    scope: str
    valid: str
    message: str
    kinds: tuple[str, ...] = ()
    where: str = ""
    severity: Severity | None = None
    note: str = ""

    def __post_init__(self) -> None:
        if self.scope not in ADMISSION_SCOPES:
            raise ValueError(f"admission scope must be one of {', '.join(ADMISSION_SCOPES)}")
        if self.scope == "object" and not self.kinds:
            raise ValueError("admission scope object needs the resource types in `kinds`")
        if not self.valid.strip() or not self.message.strip():
            raise ValueError("admission needs a `valid` CEL expression and a `message`")


@dataclass(frozen=True, slots=True)
class Check:
    """A check: metadata plus the pure function that evaluates a snapshot.

    `requires` lists what the check reads: each entry is a resource type, or a tuple of
    resource types of which any one is enough (for example all the workload kinds).
    `remediation` is its fix: the kind, the per-object template and the generic form.
    """

    id: str
    title: str
    category: Category
    severity: Severity
    rationale: str
    remediation: Remediation
    references: tuple[str, ...]
    requires: tuple[str | tuple[str, ...], ...]
    function: CheckFunction
    detection: str = ""
    severity_evidence: str = ""
    origin: str = "gpu-audit"
    module: str = ""
    admission: AdmissionRule | None = None

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
    # The pod templates it carries, kept by gpu_audit.k8s.pods.templates_of (which this
    # module cannot import): checks ask for them of every object many times over.
    pod_templates_cache: tuple[Any, ...] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    @property
    def metadata(self) -> Mapping[str, Any]:
        value = self.raw.get("metadata")
        return value if value.__class__ is dict or isinstance(value, Mapping) else {}

    @property
    def labels(self) -> Mapping[str, str]:
        # Read millions of times in a large scan: no call beyond the first.
        labels = self._labels
        if labels is None:
            labels = _str_mapping(self.metadata.get("labels"))
            object.__setattr__(self, "_labels", labels)
        return labels

    @property
    def annotations(self) -> Mapping[str, str]:
        annotations = self._annotations
        if annotations is None:
            annotations = _str_mapping(self.metadata.get("annotations"))
            object.__setattr__(self, "_annotations", annotations)
        return annotations

    @property
    def spec(self) -> Mapping[str, Any]:
        value = self.raw.get("spec")
        return value if value.__class__ is dict or isinstance(value, Mapping) else {}

    @property
    def status(self) -> Mapping[str, Any]:
        value = self.raw.get("status")
        return value if value.__class__ is dict or isinstance(value, Mapping) else {}


def _str_mapping(value: object) -> Mapping[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): "" if v is None else str(v) for k, v in value.items()}
