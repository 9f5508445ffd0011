"""The few exception types of the native decode engine."""

from __future__ import annotations

from runtime import chat_template


class EngineError(Exception):
    """Base class of native-engine errors."""


class RequestTooLarge(EngineError):
    """A request can never fit: its prompt exceeds the model length or the whole KV pool."""


class PromptError(EngineError, chat_template.PromptError):
    """The chat template could not render the conversation (it raised, or the model has none)."""


class DuplicateRequest(EngineError):
    """A request id is already live in the engine."""


class NoFreeBlocks(EngineError):
    """An allocation was attempted without checking ``can_allocate`` first."""


class BlockIntegrityError(EngineError):
    """The block manager's bookkeeping violates one of its invariants."""


class ModelLoadError(EngineError, chat_template.ModelFilesError):
    """A checkpoint directory is missing a file, has an unsupported architecture or bad weights."""
