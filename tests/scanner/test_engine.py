from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import yaml

from gpu_audit.api import (
    Category,
    Result,
    Severity,
    Snapshot,
    check,
    failed,
    gpu_pod_templates,
    passed,
)
from gpu_audit.engine import run_check
from gpu_audit.model import CheckStatus, ObjRef, Resource, SourceLocation
from gpu_audit.snapshot import CollectionGap
from gpu_audit.sources.files import load_files


def node(name: str) -> Resource:
    raw = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
    return Resource(ObjRef("Node", "", name), "v1", raw, SourceLocation("n.yaml"))


def make(
    function: object,
    requires: tuple[str | tuple[str, ...], ...] = ("Node",),
    remediation: str = "kubectl label node $name x=$value",
) -> object:
    return check(
        id="TEST-NODE-001",
        title="Nodes are fine",
        category=Category.NODES,
        severity=Severity.HIGH,
        rationale="r",
        remediation=remediation,
        references=("https://example.invalid/",),
        requires=requires,
    )(function)  # type: ignore[arg-type]


def test_results_are_sorted_and_remediation_rendered_per_object() -> None:
    def nodes(snap: Snapshot) -> Iterator[Result]:
        for n in reversed(snap.of("Node")):
            yield (
                failed(n, "is bad", fix={"value": n.ref.name.upper()})
                if n.ref.name == "b"
                else passed(n, "ok")
            )

    run = run_check(make(nodes), Snapshot([node("a"), node("b")]))  # type: ignore[arg-type]
    assert run.status is CheckStatus.FAILED
    assert [r.ref.name for r in run.results] == ["a", "b"]
    assert run.findings[0].remediation == "kubectl label node b x=B"
    assert run.findings[0].result.message == "Node b is bad"
    assert run.findings[0].severity is Severity.HIGH


def test_a_raising_check_is_an_error_not_a_crash() -> None:
    def boom(snap: Snapshot) -> Iterator[Result]:
        yield from ()
        raise KeyError("spec")

    run = run_check(make(boom), Snapshot([node("a")]))  # type: ignore[arg-type]
    assert run.status is CheckStatus.ERROR
    assert run.reason == "check raised KeyError: 'spec'"
    assert "Traceback" in run.error_detail


def test_missing_inputs_and_gaps_make_a_check_not_evaluated() -> None:
    def never(snap: Snapshot) -> Iterator[Result]:
        yield from ()
        raise AssertionError("must not run")

    c = make(never, requires=("Node", ("Pod", "Deployment")))
    run = run_check(c, Snapshot([node("a")]))  # type: ignore[arg-type]
    assert (run.status, run.reason, run.applicable) == (
        CheckStatus.NOT_EVALUATED,
        "no Pod or Deployment in the input",
        True,
    )
    gap = Snapshot([], available={"Pod"}, gaps=[CollectionGap("Node", "forbidden: list nodes")])
    assert run_check(c, gap).reason == "forbidden: list nodes"  # type: ignore[arg-type]


def test_no_result_means_not_applicable() -> None:
    def nothing(snap: Snapshot) -> Iterator[Result]:
        return iter(())

    run = run_check(make(nothing), Snapshot([node("a")]))  # type: ignore[arg-type]
    assert run.status is CheckStatus.NOT_EVALUATED and not run.applicable


def test_a_broken_remediation_template_is_an_error() -> None:
    def bad(snap: Snapshot) -> Iterator[Result]:
        yield failed(snap.of("Node")[0], "is bad")

    run = run_check(make(bad, remediation="set $missing"), Snapshot([node("a")]))  # type: ignore[arg-type]
    assert run.status is CheckStatus.ERROR and "missing" in run.reason


def test_a_pod_spec_remediation_becomes_a_patch_of_the_owning_object(tmp_path: Path) -> None:
    cron = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "nightly", "namespace": "ml"},
        "spec": {
            "schedule": "@daily",
            "jobTemplate": {
                "spec": {
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "train",
                                    "image": "x",
                                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                                }
                            ]
                        }
                    }
                }
            },
        },
    }

    def templates(snap: Snapshot) -> Iterator[Result]:
        for template in gpu_pod_templates(snap):
            yield failed(template.containers()[0], "needs a fix")

    pod_spec_check = check(
        id="TEST-NODE-001",
        title="t",
        category=Category.NODES,
        severity=Severity.LOW,
        rationale="r",
        remediation="# fix $kind $name\ncontainers:\n  - name: train\n    image: x:1",
        references=("https://example.invalid/",),
        requires=("CronJob",),
        remediation_root="pod_spec",
    )(templates)
    (tmp_path / "cron.yaml").write_text(yaml.safe_dump(cron))
    run = run_check(pod_spec_check, load_files([str(tmp_path / "cron.yaml")]))
    text = run.findings[0].remediation
    assert text.splitlines()[0] == "# fix CronJob nightly"
    assert yaml.safe_load(text) == {
        "spec": {
            "jobTemplate": {
                "spec": {"template": {"spec": {"containers": [{"name": "train", "image": "x:1"}]}}}
            }
        }
    }
