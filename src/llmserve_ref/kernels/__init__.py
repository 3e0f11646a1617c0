"""Kernels: attention as functions on tensors. Its modules: see `llmserve_ref`'s map."""
