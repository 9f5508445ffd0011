"""The native decode engine: paged KV cache with pinned sessions, continuous batching, and
Llama / Qwen2 / Qwen3 models in plain torch (``engine.NativeEngine`` is the entry point)."""
