"""SARIF 2.1.0: one rule per check, one result per finding, for code-scanning dashboards.

Follows GitHub's reading of SARIF
(https://docs.github.com/en/code-security/code-scanning/integrating-with-code-scanning/sarif-support-for-code-scanning):
`properties.security-severity` on each rule puts the alert in GitHub's critical (9.0 and
over), high (7.0-8.9), medium (4.0-6.9) or low (0.1-3.9) band, and `partialFingerprints`
keeps an alert the same alert from one scan to the next.

The report knows the file and the document (1-based, within a multi-document YAML file) an
offline object came from, not its line, so a physical location names the file only and
carries the document number as a property; live objects have a logical location only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import quote

from gpu_audit.report import fingerprints
from gpu_audit.reports.base import (
    RELATED_LABELS,
    Document,
    Renderer,
    object_name,
    related_lines,
)

SARIF_SCHEMA = (
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
)
FINGERPRINT_KEY = "gpuAuditFinding/v1"
LEVELS = {"critical": "error", "high": "error", "medium": "warning", "low": "note", "info": "note"}
# One point inside each of GitHub's bands; info has no band, so no security-severity at all.
SECURITY_SEVERITY = {"critical": "9.5", "high": "8.0", "medium": "5.5", "low": "2.0"}
# An exemption annotation sits on the object itself, in the manifest: SARIF's "inSource".
SUPPRESSION_KINDS = {"annotation": "inSource", "file": "external"}
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~])")


def _escape_markdown(text: str) -> str:
    """Cluster text is shown as text: every character markdown could act on is escaped."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


def _code_block(text: str) -> str:
    """A fence longer than any run of backticks inside, so the text cannot close it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text}\n{fence}"


def _rule_name(title: str) -> str:
    return "".join(word[:1].upper() + word[1:] for word in re.findall(r"[A-Za-z0-9]+", title))


def _rule(check: Mapping[str, Any]) -> dict[str, Any]:
    severity = check["severity"]
    remediation = check.get("remediation", "")
    references = check["references"]
    text = [check["rationale"]]
    markdown = [_escape_markdown(check["rationale"])]
    if check.get("detection"):
        text.append(f"Detection: {check['detection']}")
        markdown.append(f"**Detection.** {_escape_markdown(check['detection'])}")
    if remediation:
        text.append(f"Remediation (filled in for each result):\n{remediation}")
        markdown.append(
            f"**Remediation** (filled in for each result):\n\n{_code_block(remediation)}"
        )
    if references:
        text.append("References:\n" + "\n".join(references))
        markdown.append("**References**\n\n" + "\n".join(f"- <{url}>" for url in references))
    properties: dict[str, Any] = {"tags": [check["category"]], "severity": severity}
    if severity in SECURITY_SEVERITY:
        properties["security-severity"] = SECURITY_SEVERITY[severity]
    rule: dict[str, Any] = {
        "id": check["id"],
        "name": _rule_name(check["title"]),
        "shortDescription": {"text": check["title"]},
        "fullDescription": {"text": check["rationale"]},
        "help": {"text": "\n\n".join(text), "markdown": "\n\n".join(markdown)},
        "defaultConfiguration": {"level": LEVELS[severity]},
        "properties": properties,
    }
    if references:
        rule["helpUri"] = references[0]
    return rule


def _artifact_uri(file: str) -> str:
    path = PurePosixPath(file)
    return path.as_uri() if path.is_absolute() else quote(path.as_posix(), safe="/")


def _read_from_a_file(name: str) -> bool:
    """What was read from no file is named in angle brackets: <stdin>, <helm template CHART>."""
    return not (name.startswith("<") and name.endswith(">"))


def _qualified_name(resource: Mapping[str, Any]) -> str:
    ns = resource["namespace"]
    return (
        f"{ns}/{resource['type']}/{resource['name']}"
        if ns
        else f"{resource['type']}/{resource['name']}"
    )


def _location(finding: Mapping[str, Any]) -> dict[str, Any]:
    resource = finding["resource"]
    logical: dict[str, Any] = {
        "name": resource["name"],
        "fullyQualifiedName": _qualified_name(resource),
        "kind": "resource",
        "properties": {
            "apiVersion": resource["api_version"],
            "kind": resource["kind"],
            "namespace": resource["namespace"],
        },
    }
    location: dict[str, Any] = {"logicalLocations": [logical]}
    source = resource["source"]
    if source is not None and _read_from_a_file(source["file"]):
        location["physicalLocation"] = {
            "artifactLocation": {"uri": _artifact_uri(source["file"])},
            "properties": {"document": source["document"]},
        }
    return location


def _related_location(index: int, item: Mapping[str, Any]) -> dict[str, Any]:
    """A related object (schema 1.2) as a related location: logical only, since the report
    names the object but not where it was read from; its role is the message and a property."""
    role = str(item["role"])
    return {
        "id": index,
        "message": {"text": f"{RELATED_LABELS.get(role, role)}: {object_name(item)}"},
        "logicalLocations": [
            {
                "name": item["name"],
                "fullyQualifiedName": _qualified_name(item),
                "kind": "resource",
                "properties": {"kind": item["kind"], "namespace": item["namespace"]},
            }
        ],
        "properties": {"role": role},
    }


def _suppression(exemption: Mapping[str, Any]) -> dict[str, Any]:
    suppression: dict[str, Any] = {
        "kind": SUPPRESSION_KINDS.get(exemption["source"], "external"),
        "status": "accepted",
        "justification": exemption["reason"],
    }
    if exemption.get("file"):
        suppression["location"] = {
            "physicalLocation": {"artifactLocation": {"uri": _artifact_uri(exemption["file"])}}
        }
    details = {k: exemption.get(k) for k in ("source", "entry", "expires") if exemption.get(k)}
    suppression["properties"] = details
    return suppression


def _result(finding: Mapping[str, Any], fingerprint: str, rule_index: int) -> dict[str, Any]:
    # The related objects are named in the message too: dashboards show logical locations
    # seldom, and the text is what a reader sees.
    message = "\n".join([finding["message"], *related_lines(finding)])
    remediation = finding["remediation"]
    result: dict[str, Any] = {
        "ruleId": finding["check_id"],
        "ruleIndex": rule_index,
        "level": LEVELS[finding["severity"]],
        "message": {
            "text": f"{message}\n\nRemediation:\n{remediation}" if remediation else message,
            "markdown": _escape_markdown(message)
            + (f"\n\n**Remediation**\n\n{_code_block(remediation)}" if remediation else ""),
        },
        "locations": [_location(finding)],
        "partialFingerprints": {FINGERPRINT_KEY: fingerprint},
        "properties": {
            "severity": finding["severity"],
            "category": finding["category"],
            "path": finding["path"],
        },
    }
    related = finding.get("related") or []  # absent before schema 1.2
    if related:
        result["relatedLocations"] = [
            _related_location(i, item) for i, item in enumerate(related, 1)
        ]
    if "exemption" in finding:
        result["suppressions"] = [_suppression(finding["exemption"])]
    return result


def _fingerprints(items: Sequence[Mapping[str, Any]]) -> list[str]:
    """The report's own fingerprints; reports written before they existed get them derived the
    way build_report derives them."""
    if all("fingerprint" in item for item in items):
        return [item["fingerprint"] for item in items]
    return fingerprints(items)


def _notifications(document: Document, rule_index: Mapping[str, int]) -> list[dict[str, Any]]:
    """What was not assessed: checks not evaluated or in error, input that was not collected,
    and the warnings of the input and of the exemptions."""
    notes: list[dict[str, Any]] = []
    for check in document["checks"]:
        if check["status"] not in ("not_evaluated", "error"):
            continue
        if check["status"] == "error":
            level = "error"
        else:  # a check with nothing to apply to is no gap in the scan
            level = "warning" if check["applicable"] else "note"
        notes.append(
            {
                "level": level,
                "message": {"text": f"{check['id']}: {check['reason']}"},
                "associatedRule": {"id": check["id"], "index": rule_index[check["id"]]},
                "properties": {"status": check["status"], "applicable": check["applicable"]},
            }
        )
    source = document["source"]
    notes.extend(
        {"level": "error", "message": {"text": f"not collected: {gap['type']}: {gap['reason']}"}}
        for gap in source["gaps"]
    )
    warnings = [*source["warnings"], *document.get("exemptions", {}).get("warnings", [])]
    notes.extend({"level": "warning", "message": {"text": str(w)}} for w in warnings)
    return notes


def build_sarif(document: Document) -> dict[str, Any]:
    checks = document["checks"]
    rule_index = {check["id"]: i for i, check in enumerate(checks)}
    items = [*document["findings"], *document.get("exempted_findings", [])]
    results = [
        _result(item, fp, rule_index[item["check_id"]])
        for item, fp in zip(items, _fingerprints(items), strict=True)
    ]
    score, coverage = document["score"], document["coverage"]
    invocation: dict[str, Any] = {
        "executionSuccessful": document["complete"],
        "toolExecutionNotifications": _notifications(document, rule_index),
        "properties": {
            "score": score["overall"],
            "grade": score["grade"],
            "cappedBy": score["capped_by"],
            "coverage": coverage["ratio"],
            "checks": document["summary"]["checks"],
            "complete": document["complete"],
            "inputs": document["source"]["inputs"],
        },
    }
    if document["generated_at"]:
        invocation["endTimeUtc"] = document["generated_at"]
    tool = document["tool"]
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": tool["name"],
                        "version": tool["version"],
                        "rules": [_rule(check) for check in checks],
                    }
                },
                "invocations": [invocation],
                "results": results,
                "properties": {"reportSchemaVersion": document["schema_version"]},
            }
        ],
    }


def render_sarif(document: Document, color: bool = False) -> str:
    # Sorted keys: maps passed through from the report (summary counts) come back from saved
    # JSON in sorted order, and `render` must give the same bytes as `scan`.
    return json.dumps(build_sarif(document), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


SARIF = Renderer("sarif", "sarif", render_sarif, "SARIF 2.1.0 for code-scanning dashboards")
