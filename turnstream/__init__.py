"""Process orchestration: the ``turnstream`` command, the one-machine stack, the embedded
Redis-compatible server and the live chat transcript."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("turnstream")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"
