"""The errors the simulated engine answers a request with, each with its HTTP status (the server
and the offline simulator map them the same way)."""

from __future__ import annotations


class EngineError(Exception):
    """Base of errors the engine returns for a request."""

    status = 500


class RequestRejected(EngineError):
    """Admission limit reached under the 429 rejection policy."""

    status = 429


class RequestTooLarge(EngineError, ValueError):
    """The request can never fit (context length or KV pool)."""

    status = 400


class EngineOOM(EngineError):
    """Injected out-of-memory fault."""

    status = 500


class EngineCrashed(EngineOOM):
    """Out of memory with `oom_without_admission="crash"`: the engine process dies."""

    status = 503
