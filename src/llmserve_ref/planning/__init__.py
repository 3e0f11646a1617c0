"""Planning: numbers before hardware. Its modules: see `llmserve_ref`'s map."""
