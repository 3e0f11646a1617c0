"""Serving: the HTTP face (OpenAI-compatible server, metrics, benchmark client, GGUF export)."""
