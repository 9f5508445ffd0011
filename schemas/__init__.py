"""turnstream's wire contract: events, keys, codec."""

from schemas.events import *  # noqa: F401,F403
from schemas.events import SCHEMA_VERSION  # noqa: F401
