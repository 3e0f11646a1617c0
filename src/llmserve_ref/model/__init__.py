"""The model: the tiny Llama and what runs one sequence. Its modules: see `llmserve_ref`'s map."""
