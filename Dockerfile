# gpu-audit as a container image, for the Helm chart's CronJob (deploy/helm/gpu-audit).
#
#   docker build -t REGISTRY/gpu-audit:0.1.0 .      (or: podman build / buildah bud / kaniko)
#   docker push REGISTRY/gpu-audit:0.1.0
#
# Two stages: the first builds the wheel and installs it with its dependencies into a venv;
# the second holds only that venv on the slim Python base, runs as an unprivileged user and
# writes nothing to its root filesystem (bytecode is compiled at build time), so it runs with
# readOnlyRootFilesystem: true. Pin the base by digest (python:3.11-slim@sha256:...) for
# reproducible builds.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY scanner/ scanner/
COPY checks/ checks/
COPY reports/ reports/
RUN python -m venv /opt/gpu-audit \
 && /opt/gpu-audit/bin/pip install --upgrade pip \
 && /opt/gpu-audit/bin/pip wheel --no-deps --wheel-dir /tmp/wheels . \
 && /opt/gpu-audit/bin/pip install /tmp/wheels/gpu_audit-*.whl \
 && /opt/gpu-audit/bin/pip uninstall --yes pip \
 && /opt/gpu-audit/bin/python -m compileall -q /opt/gpu-audit \
 && /opt/gpu-audit/bin/gpu-audit --version

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="gpu-audit" \
      org.opencontainers.image.description="Audit Kubernetes clusters that run GPU and AI workloads" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/gpu-audit /opt/gpu-audit
# 65532: the conventional "nonroot" uid/gid; numeric, so runAsNonRoot can verify it.
USER 65532:65532
ENV PATH=/opt/gpu-audit/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
WORKDIR /tmp
ENTRYPOINT ["gpu-audit"]
CMD ["--help"]
