"""Serving: the HTTP face. Its modules: see `llmserve_ref`'s map."""
