"""One module per tool-call format family, each a state machine on ``workers.parser.core``."""
