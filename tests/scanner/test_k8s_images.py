"""Image references are split one way (gpu_audit.k8s.images): the copies in the monitoring and
serving checks and in GPU-WL-006 used to parse them on their own."""

from __future__ import annotations

import pytest

from gpu_audit.k8s.images import image_registry_and_path, image_repository, image_tag

_DIGEST = "sha256:" + "a" * 64


@pytest.mark.parametrize(
    ("image", "repository", "registry", "path", "tag"),
    [
        ("nvidia/cuda:12.4.1-base", "nvidia/cuda", "docker.io", "nvidia/cuda", "12.4.1-base"),
        ("busybox", "busybox", "docker.io", "busybox", ""),
        # A registry port is not a tag, with or without a tag and a digest after the name.
        (
            f"registry.local:5000/nvidia/dcgm-exporter@{_DIGEST}",
            "registry.local:5000/nvidia/dcgm-exporter",
            "registry.local:5000",
            "nvidia/dcgm-exporter",
            "",
        ),
        (
            f"registry.local:5000/nvidia/dcgm-exporter:4.2.3-4.1.3@{_DIGEST}",
            "registry.local:5000/nvidia/dcgm-exporter",
            "registry.local:5000",
            "nvidia/dcgm-exporter",
            "4.2.3-4.1.3",
        ),
        ("localhost:5000/triton", "localhost:5000/triton", "localhost:5000", "triton", ""),
        ("NVCR.io/NVIDIA/Driver:550", "nvcr.io/nvidia/driver", "nvcr.io", "nvidia/driver", "550"),
    ],
)
def test_reference_parts(image: str, repository: str, registry: str, path: str, tag: str) -> None:
    assert image_repository(image) == repository
    assert image_registry_and_path(image) == (registry, path)
    assert image_tag(image) == tag


def test_a_name_ends_at_the_first_colon_of_its_last_component() -> None:
    """The drift: scanner/k8s/images.py cut the tag at the last colon (`repo:1:2` -> `repo:1`),
    the monitoring copy at the first (`repo`). No path component may hold a colon, so the name
    is `repo` and `1:2` is the (malformed) tag; every reader now says so."""
    image = "registry.local:5000/nvidia/dcgm-exporter:4.2:extra"
    assert image_repository(image) == "registry.local:5000/nvidia/dcgm-exporter"
    assert image_registry_and_path(image) == ("registry.local:5000", "nvidia/dcgm-exporter")
    assert image_tag(image) == "4.2:extra"


def test_surrounding_white_space_is_not_part_of_the_reference() -> None:
    """image_registry_and_path and the serving copy stripped it, image_repository did not."""
    assert image_repository(" nvcr.io/nvidia/k8s/dcgm-exporter:4.2 ") == (
        "nvcr.io/nvidia/k8s/dcgm-exporter"
    )
    assert image_tag(" nvcr.io/nvidia/k8s/dcgm-exporter:4.2 ") == "4.2"
