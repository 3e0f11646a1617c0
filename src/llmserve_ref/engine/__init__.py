"""The engine: many requests on one model. Its modules: see `llmserve_ref`'s map."""
