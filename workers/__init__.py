"""turnstream workers: one folder per worker type (decode, parser, tools)."""
