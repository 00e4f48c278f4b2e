from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from gpu_audit.errors import InputError
from gpu_audit.model import ObjRef
from gpu_audit.redact import REDACTED
from gpu_audit.sources.files import load_files

POD = """\
apiVersion: v1
kind: Pod
metadata: {name: p1, namespace: ml}
spec: {containers: [{name: c, image: busybox}]}
"""


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def problems(paths: list[str], stdin: str | None = None) -> tuple[str, ...]:
    with pytest.raises(InputError) as info:
        load_files(paths, io.StringIO(stdin) if stdin is not None else None)
    return info.value.problems


def test_multi_document_yaml_and_empty_documents(tmp_path: Path) -> None:
    text = "---\n# only a comment\n---\n" + POD + "---\n" + POD.replace("p1", "p2") + "---\n"
    snap = load_files([write(tmp_path, "pods.yaml", text)])
    assert [r.ref.name for r in snap.of("Pod")] == ["p1", "p2"]
    assert snap.of("Pod")[0].source.document == 1  # 0-based: the second document


def test_kubectl_list_json_on_stdin_is_flattened() -> None:
    dump = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1", "namespace": "x"}},
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "ds"}},
        ],
    }
    snap = load_files(["-"], io.StringIO(json.dumps(dump)))
    # Nodes are cluster-scoped whatever the dump says; namespaced kinds default to "default".
    assert snap.get("Node", "", "gpu-1") is not None
    assert snap.get("DaemonSet", "default", "ds") is not None
    assert snap.source.inputs == ("<stdin>",)


def test_typed_lists_such_as_podlist_are_flattened(tmp_path: Path) -> None:
    text = "apiVersion: v1\nkind: PodList\nitems:\n" + "".join(
        "- " + line + "\n" if i == 0 else "  " + line + "\n"
        for i, line in enumerate(POD.splitlines())
    )
    snap = load_files([write(tmp_path, "list.yaml", text)])
    assert snap.count("Pod") == 1


def test_directory_walk_is_sorted_and_skips_hidden_and_other_files(tmp_path: Path) -> None:
    write(tmp_path, "b/pod.yml", POD.replace("p1", "from-b"))
    write(tmp_path, "a/pod.yaml", POD.replace("p1", "from-a"))
    write(tmp_path, ".hidden/pod.yaml", POD.replace("p1", "hidden"))
    write(tmp_path, "notes.txt", "not yaml: [")
    write(
        tmp_path,
        "c.json",
        json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}}),
    )
    snap = load_files([str(tmp_path)])
    assert [r.ref.name for r in snap.of("Pod")] == ["from-a", "from-b"]
    assert snap.get("Namespace", "", "ml") is not None
    assert len(snap) == 3


def test_custom_resources_get_a_group_qualified_type(tmp_path: Path) -> None:
    text = (
        "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: j, namespace: ml}\n---\n"
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, namespace: ml}\n"
    )
    snap = load_files([write(tmp_path, "jobs.yaml", text)])
    assert snap.get("Job", "ml", "j") is not None
    assert snap.get("Job.batch.volcano.sh", "ml", "j") is not None


def test_managed_fields_dropped_and_secret_values_never_kept(tmp_path: Path) -> None:
    text = (
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\n  namespace: ml\n"
        "  managedFields: [{manager: kubectl}]\n"
        "  annotations: {kubectl.kubernetes.io/last-applied-configuration: 'hunter2'}\n"
        "data: {token: aHVudGVyMg==}\nstringData: {password: hunter2}\n"
    )
    snap = load_files([write(tmp_path, "secret.yaml", text)])
    secret = snap.get("Secret", "ml", "creds")
    assert secret is not None
    assert "managedFields" not in secret.metadata
    assert secret.raw["data"] == {"token": REDACTED}
    assert secret.raw["stringData"] == {"password": REDACTED}
    assert "hunter2" not in json.dumps(secret.raw)
    assert "aHVudGVyMg" not in json.dumps(secret.raw)


def test_duplicate_objects_keep_the_first_and_warn(tmp_path: Path) -> None:
    first = write(tmp_path, "a.yaml", POD)
    second = write(tmp_path, "b.yaml", POD.replace("busybox", "other"))
    snap = load_files([first, second])
    pod = snap.get("Pod", "ml", "p1")
    assert pod is not None and pod.source.file == first
    assert len(snap.source.warnings) == 1 and "b.yaml" in snap.source.warnings[0]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "apiVersion: v1\nkind: Pod\nmetadata: {name: [unclosed\n",
            "document 1: invalid YAML at line",
        ),
        ("- just\n- a list\n", "document 1: is a list, not a Kubernetes object"),
        ("apiVersion: v1\nmetadata: {name: x}\n", "document 1: missing kind"),
        ("kind: Pod\nmetadata: {name: x}\n", "document 1: Pod has no apiVersion"),
        (
            "apiVersion: v1\nkind: Pod\nmetadata: {namespace: ml}\n",
            "document 1: Pod has no metadata.name",
        ),
        ("apiVersion: v1\nkind: Pod\n", "document 1: Pod has no metadata"),
        ("apiVersion: v1\nkind: List\nitems: {a: 1}\n", "List.items is a dict, not a list"),
        ("apiVersion: v1\nkind: List\nitems: [42]\n", "document 1, item 1: is a int"),
        # Explicit tags on values that do not fit them: PyYAML raises IndexError/ValueError
        # from its constructors, not a YAMLError (found by the fuzzer).
        ("!!int \n", "document 1: invalid YAML at line 1 column 1: a value does not fit its tag"),
        ("!!float \n", "document 1: invalid YAML at line 1 column 1: a value does not fit"),
        ("a: !!timestamp \n", "document 1: invalid YAML at line 1 column 4: a value does not"),
        ("a: !!int x\n", "document 1: invalid YAML at line 1 column 4: a value does not fit"),
    ],
)
def test_bad_documents_name_the_file_and_document(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, "bad.yaml", text)
    found = problems([path])
    assert any(p.startswith(f"{path}: ") and expected in p for p in found), found


def test_all_problems_are_reported_together(tmp_path: Path) -> None:
    bad = write(tmp_path, "bad.yaml", "apiVersion: v1\nmetadata: {name: x}\n---\n- 1\n")
    found = problems([bad, str(tmp_path / "missing.yaml")])
    assert len(found) == 3
    # Path problems are found before any file is read.
    assert found[0] == f"{tmp_path / 'missing.yaml'}: no such file or directory"


def test_invalid_json_and_non_utf8(tmp_path: Path) -> None:
    assert "invalid JSON at line 1" in problems([write(tmp_path, "x.json", '{"kind": ')])[0]
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00kind")
    assert problems([str(binary)]) == (f"{binary}: not UTF-8 text (byte 0)",)


def test_generate_name_objects_are_kept(tmp_path: Path) -> None:
    text = "apiVersion: batch/v1\nkind: Job\nmetadata: {generateName: hook-, namespace: ml}\n"
    snap = load_files([write(tmp_path, "hook.yaml", text)])
    assert snap.get("Job", "ml", "hook-") is not None


def test_refs_sort_and_index(tmp_path: Path) -> None:
    text = POD.replace("p1", "zeta") + "---\n" + POD.replace("p1", "alpha").replace("ml", "aaa")
    snap = load_files([write(tmp_path, "p.yaml", text)])
    assert [r.ref for r in snap.of("Pod")] == [
        ObjRef("Pod", "aaa", "alpha"),
        ObjRef("Pod", "ml", "zeta"),
    ]
    assert snap.available == frozenset({"Pod"})
