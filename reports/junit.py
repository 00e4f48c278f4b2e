"""JUnit XML for CI test reports: a testsuite per category, a testcase per check and object.

The report lists failed objects one by one but passed ones only as a count per check, so a
failed check gives one failing testcase per finding, and a passed check one passing testcase.
Not evaluated checks and exempted findings are skipped testcases, checks that raised are
errors. No timestamps or durations: the same report gives the same bytes.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Any

from gpu_audit.reports.base import Document, Renderer, related_lines

# Characters XML 1.0 cannot hold even escaped; a cluster string may carry them.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml_text(text: str) -> str:
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _object_name(finding: Mapping[str, Any]) -> str:
    resource = finding["resource"]
    ns = f"{resource['namespace']}/" if resource["namespace"] else ""
    name = f"{resource['kind']} {ns}{resource['name']}"
    return f"{name} at {finding['path']}" if finding["path"] else name


def _testcase(suite: ET.Element, check: Mapping[str, Any], name: str) -> ET.Element:
    return ET.SubElement(suite, "testcase", {"classname": check["id"], "name": name})


def _failure(case: ET.Element, finding: Mapping[str, Any]) -> None:
    failure = ET.SubElement(
        case, "failure", {"message": finding["message"], "type": finding["severity"]}
    )
    # The related objects (schema 1.2), one line per role, between message and remediation.
    lines = related_lines(finding)
    related = "\n\n" + "\n".join(lines) if lines else ""
    failure.text = f"{finding['message']}{related}\n\nRemediation:\n{finding['remediation']}\n"


def _check_cases(
    suite: ET.Element,
    check: Mapping[str, Any],
    findings: list[Mapping[str, Any]],
    exempted: list[Mapping[str, Any]],
) -> None:
    title = f"{check['id']}: {check['title']}"
    status = check["status"]
    if status == "not_evaluated":
        case = _testcase(suite, check, title)
        ET.SubElement(case, "skipped", {"message": check["reason"] or "not evaluated"})
    elif status == "error":
        case = _testcase(suite, check, title)
        ET.SubElement(case, "error", {"message": check["reason"] or "error"})
    elif not findings:  # passed, or failed only through exempted findings
        _testcase(suite, check, title)
    for finding in findings:
        _failure(_testcase(suite, check, _object_name(finding)), finding)
    for finding in exempted:
        case = _testcase(suite, check, _object_name(finding))
        ET.SubElement(case, "skipped", {"message": f"exempted: {finding['exemption']['reason']}"})


def _count(element: ET.Element, cases: list[ET.Element], skipped: bool = True) -> None:
    """The counts of `cases` as attributes. The Jenkins xUnit schema (junit-10.xsd, which
    pytest's output follows too) has `skipped` on a testsuite but not on testsuites."""
    element.set("tests", str(len(cases)))
    element.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
    element.set("errors", str(sum(1 for c in cases if c.find("error") is not None)))
    if skipped:
        element.set("skipped", str(sum(1 for c in cases if c.find("skipped") is not None)))


def build_junit(document: Document) -> ET.Element:
    by_check: dict[str, list[Mapping[str, Any]]] = {}
    for finding in document["findings"]:
        by_check.setdefault(finding["check_id"], []).append(finding)
    exempted_by_check: dict[str, list[Mapping[str, Any]]] = {}
    for finding in document.get("exempted_findings", []):
        exempted_by_check.setdefault(finding["check_id"], []).append(finding)
    suites = ET.Element("testsuites", {"name": document["tool"]["name"]})
    by_category: dict[str, ET.Element] = {}
    for check in document["checks"]:
        category = check["category"]
        if category not in by_category:
            by_category[category] = ET.SubElement(
                suites, "testsuite", {"name": f"{document['tool']['name']}.{category}"}
            )
        _check_cases(
            by_category[category],
            check,
            by_check.get(check["id"], []),
            exempted_by_check.get(check["id"], []),
        )
    for suite in by_category.values():
        _count(suite, suite.findall("testcase"))
    _count(suites, suites.findall("testsuite/testcase"), skipped=False)
    return suites


def render_junit(document: Document, color: bool = False) -> str:
    root = build_junit(document)
    for element in root.iter():
        element.attrib = {key: _xml_text(value) for key, value in element.attrib.items()}
        if element.text:
            element.text = _xml_text(element.text)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, "unicode") + "\n"


JUNIT = Renderer("junit", "junit.xml", render_junit, "JUnit XML for CI test reports")
