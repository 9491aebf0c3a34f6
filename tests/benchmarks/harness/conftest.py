"""Helpers for harness tests: run coroutines (no pytest-asyncio here) against the in-process mock."""

import asyncio
from typing import Any, Awaitable, Callable

import pytest

from benchmarks.simulator.mock_server import MockConfig, MockServer


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(coro)


@pytest.fixture
def with_mock() -> Callable[..., Any]:
    """with_mock(config, fn): start the mock, await fn(server), stop it; returns fn's result."""

    def runner(config: MockConfig | None, fn: Callable[[MockServer], Awaitable[Any]]) -> Any:
        async def main() -> Any:
            async with MockServer(config or MockConfig()) as server:
                return await fn(server)

        return asyncio.run(main())

    return runner
