"""Container image references, read without a registry: the repository with and without its
registry host. Both drop the tag and digest and lower-case the name.

`image_repository` gives one string (`registry.corp/nvidia/driver`) for allowlists and
pattern matches; `image_registry_and_path` splits off the host, defaulting it to `docker.io`
as the container runtimes do for Docker Hub short names.
"""

from __future__ import annotations


def image_repository(image: str) -> str:
    """`registry/path/name` of an image reference, without tag or digest, lower-cased."""
    ref = image.split("@", 1)[0]
    slash = ref.rfind("/")
    colon = ref.rfind(":")
    if colon > slash:
        ref = ref[:colon]
    return ref.lower()


def image_registry_and_path(image: str) -> tuple[str, str]:
    """(registry host, repository path), lower-cased, without tag or digest.

    The first component is a host only if it looks like one (a dot, a port or `localhost`),
    the same rule the container runtimes use for Docker Hub short names.
    """
    name = image.strip().lower().split("@", 1)[0]
    parts = name.split("/")
    last = parts[-1]
    if ":" in last:
        parts[-1] = last.split(":", 1)[0]
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        return parts[0], "/".join(parts[1:])
    return "docker.io", "/".join(parts)
