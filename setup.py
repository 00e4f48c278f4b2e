"""The folders scanner/, checks/ and reports/ install as gpu_audit, gpu_audit.checks and
gpu_audit.reports, so no generic top-level name lands in site-packages. Sub-packages are found
here rather than listed in pyproject.toml, so adding a check category touches no build file."""

from setuptools import find_packages, setup

FOLDERS = {"scanner": "gpu_audit", "checks": "gpu_audit.checks", "reports": "gpu_audit.reports"}


def _packages() -> list[str]:
    found = []
    for folder, package in FOLDERS.items():
        found.append(package)
        found.extend(f"{package}.{sub}" for sub in find_packages(folder))
    return found


setup(
    packages=_packages(),
    package_dir={package: folder for folder, package in FOLDERS.items()},
)
