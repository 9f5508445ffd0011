"""Where a model's files are: a local directory as given, or a Hugging Face hub id resolved once into
the hub's standard cache.

    local_dir("models/tiny-agent")                -> that directory; nothing is downloaded
    local_dir("Qwen/Qwen3-8B", weights=True)      -> <HF_HOME>/hub/models--Qwen--Qwen3-8B/snapshots/<commit>
    local_dir("Qwen/Qwen3-8B")                    -> the same snapshot, tokenizer and config files only

``huggingface_hub.snapshot_download`` does the work, so the cache is the one vLLM, transformers and
``hf download`` share, and ``HF_HOME``/``HF_HUB_CACHE``, ``HF_HUB_OFFLINE``, ``HF_TOKEN`` and its
progress bars behave as there.  Only the decoder needs the weights; the gateway and the parser read
the tokenizer, the chat template and config.json.  Every failure is one ``ModelSourceError`` line
(the CLI prints it and exits 2): an id not in the cache while offline, a missing, private or gated
repository, a revision that does not exist, a hub that cannot be reached.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# what the gateway and the parser read (tokenizer, chat template, config); trust_remote_code tokenizers
# (Kimi's tiktoken) bring their own code and vocabulary files
TOKENIZER_FILES = ("*.json", "*.jinja", "*.txt", "*.model", "*.tiktoken", "tokenization_*.py")
WEIGHT_FILES = ("*.safetensors",)


class ModelSourceError(ValueError):
    """A model is neither a local directory nor a hub repository this machine can get."""


def is_local(model: str) -> bool:
    return Path(model).expanduser().is_dir()


def local_dir(model: str, revision: str = "", weights: bool = False) -> Path:
    """The local directory holding ``model``'s files (its weights too when ``weights``)."""
    if is_local(model):
        return Path(model).expanduser()
    _check_id(model)
    patterns = [*TOKENIZER_FILES, *(WEIGHT_FILES if weights else ())]
    path = Path(_download(model, revision or None, patterns))
    if weights and not any(path.glob("*.safetensors")):
        raise ModelSourceError(f"model: {model!r} has no *.safetensors weights (in {path})")
    return path


def resolve(cfg: Any, weights: bool) -> Any:
    """``cfg`` (a ``runtime.config.Config``) with ``model`` a local directory; a hub id becomes the
    served model name unless one is set, so clients keep asking for ``ORG/NAME``."""
    if is_local(cfg.model):
        return cfg
    path = local_dir(cfg.model, cfg.revision, weights)
    return cfg.replace(model=str(path), served_model_name=cfg.served_model_name or cfg.model)


def _check_id(model: str) -> None:
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(model)
    except HFValidationError:
        raise ModelSourceError(f"model: {model!r} is neither a local directory nor a hub id (ORG/NAME)") from None


def _download(model: str, revision: str | None, patterns: list[str]) -> str:
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import (GatedRepoError, LocalEntryNotFoundError, RepositoryNotFoundError,
                                        RevisionNotFoundError)

    at = f"{model}@{revision}" if revision else model
    try:
        return snapshot_download(model, revision=revision, allow_patterns=patterns)
    except GatedRepoError:
        raise ModelSourceError(f"model: {model!r} is gated: accept its terms on https://huggingface.co/{model} "
                               "and set HF_TOKEN") from None
    except RepositoryNotFoundError:
        raise ModelSourceError(f"model: {model!r} is not a local directory, nor a hub repository this token can "
                               "see (a private one needs HF_TOKEN)") from None
    except RevisionNotFoundError:
        raise ModelSourceError(f"model: {model!r} has no revision {revision!r}") from None
    except LocalEntryNotFoundError as exc:
        if partial := getattr(exc, "snapshot_path", None):  # IncompleteSnapshotError (huggingface_hub >= 1.x)
            raise ModelSourceError(f"model: the cached snapshot of {at!r} misses files and the hub cannot be "
                                   f"reached ({partial})") from None
        if constants.HF_HUB_OFFLINE:
            raise ModelSourceError(f"model: {at!r} is not in the hub cache ({constants.HF_HUB_CACHE}) and "
                                   "HF_HUB_OFFLINE is set: download it once online, or unset HF_HUB_OFFLINE") from None
        raise ModelSourceError(f"model: {at!r} is not in the hub cache ({constants.HF_HUB_CACHE}) and the hub "
                               "cannot be reached") from None
