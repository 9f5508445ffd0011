"""OpenAI chat completions and models (``api``): request bodies shared with the session API
(``bodies``), session events -> chat completion chunks (``format``, a translator)."""
