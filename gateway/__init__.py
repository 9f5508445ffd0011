"""turnstream's edge: the FastAPI gateway (session API, OpenAI API, event relay)."""
