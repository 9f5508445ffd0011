"""A Hugging Face hub cache laid out exactly as ``huggingface_hub`` lays it out, built from a local
checkpoint, for tests that resolve hub ids offline (CI has no hub):

    <HF_HOME>/hub/models--ORG--NAME/
        blobs/<sha256 of the file>            the files' bytes, once each
        refs/main                             the commit the branch points at (no newline)
        snapshots/<commit>/<file>             -> ../../blobs/<sha256>  (relative symlinks)
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TINY_AGENT = REPO / "models" / "tiny-agent"
# what loading the bundled model needs (its training-history files stay out of the cache)
TINY_AGENT_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                    "model.safetensors", "README.md")


def add_snapshot(hf_home: Path, repo_id: str, src: Path = TINY_AGENT, files: tuple[str, ...] = TINY_AGENT_FILES,
                 revision: str = "main", commit: str | None = None) -> Path:
    """``src``'s ``files`` as the snapshot of ``repo_id`` at ``revision`` in the cache under ``hf_home``;
    returns the snapshot directory.  The commit is a hash of the revision and files unless given."""
    repo = hf_home / "hub" / f"models--{repo_id.replace('/', '--')}"
    digest = hashlib.sha1(f"{repo_id}@{revision}:{','.join(files)}".encode())
    commit = commit or digest.hexdigest()
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo / "blobs").mkdir(exist_ok=True)
    for name in files:
        blob = repo / "blobs" / hashlib.sha256((src / name).read_bytes()).hexdigest()
        if not blob.exists():
            shutil.copyfile(src / name, blob)
        link = snapshot / name
        if not link.is_symlink():
            link.symlink_to(os.path.relpath(blob, snapshot))
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / revision).write_text(commit)
    return snapshot
