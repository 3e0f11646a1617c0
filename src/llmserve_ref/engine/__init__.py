"""The engine: many requests on one model (scheduler, KV blocks, engines, speculative decoding)."""
