"""Container image references, read without a registry: the repository with and without its
registry host, and the tag.

`image_repository` gives one string (`registry.corp/nvidia/driver`) for allowlists and
pattern matches; `image_registry_and_path` splits off the host, defaulting it to `docker.io`
as the container runtimes do for Docker Hub short names; `image_tag` is what follows the name.
All three read a reference the same way, by the grammar of distribution/reference
(https://github.com/distribution/reference/blob/main/reference.go):
`[host[:port]/]path[:tag][@digest]`. A path component never holds a colon, so the tag starts
at the first colon after the last slash (the one in `host:port` comes before a slash).
"""

from __future__ import annotations


def _name_and_tag(image: str) -> tuple[str, str]:
    """(name, tag) of a reference, without the digest; the tag is "" when there is none."""
    name = image.strip().split("@", 1)[0]
    colon = name.find(":", name.rfind("/") + 1)
    if colon < 0:
        return name, ""
    return name[:colon], name[colon + 1 :]


def image_repository(image: str) -> str:
    """`registry/path/name` of an image reference, without tag or digest, lower-cased."""
    return _name_and_tag(image)[0].lower()


def image_tag(image: str) -> str:
    """The tag of an image reference as written ("" when it has none, digest or not)."""
    return _name_and_tag(image)[1]


def image_registry_and_path(image: str) -> tuple[str, str]:
    """(registry host, repository path), lower-cased, without tag or digest.

    The first component is a host only if it looks like one (a dot, a port or `localhost`),
    the same rule the container runtimes use for Docker Hub short names.
    """
    parts = image_repository(image).split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        return parts[0], "/".join(parts[1:])
    return "docker.io", "/".join(parts)
