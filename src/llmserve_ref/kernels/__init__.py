"""Kernels: attention as functions on tensors (PyTorch references and Triton kernels)."""
