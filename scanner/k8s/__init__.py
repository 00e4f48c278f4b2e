"""Kubernetes and GPU-domain knowledge, written once: pure functions of raw objects.

Generic Kubernetes semantics (objects, quantities, selectors, scheduling, pods, kinds) sit
beside what is known about the GPU ecosystem (GPU resources and hosts, the GPU Operator and
its stack, Karpenter, training jobs, model servers, images, node lifecycle, spot capacity).
Checks reach all of it through `gpu_audit.api`; nothing here knows about checks or reports.
"""
