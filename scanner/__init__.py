"""gpu-audit: audit Kubernetes clusters that run GPU and AI workloads."""

__version__ = "0.1.0"
