"""turnstream workers: the bus, the decode, parser and tool workers, and the CLI."""
