"""Outages of the database and the broker, as a worker or the web app lives through them.

An outage is one event, not one per task: `Outage` logs one warning when a dependency first fails
and one line when it answers again (with how long it was away), however many tasks or requests
met it in between (a 6-s PostgreSQL stop once failed 612 queued rescorings with ~50,000 log lines).

`retry_database` runs a database operation and, while the database is away (a restart, a
failover), waits with exponential back-off on a fresh connection and runs it again, up to a budget
(KVSELECT_STORE_RETRY_S). A task that waits holds its worker thread, so a worker whose database
is down stops taking messages instead of burning its queue.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from django.conf import settings
from django.db import InterfaceError, OperationalError, close_old_connections, connection

logger = logging.getLogger("kvselect.outage")

T = TypeVar("T")
DATABASE_ERRORS = (OperationalError, InterfaceError)
# SQLite reports a missing table or column as an OperationalError too: a schema problem, never an outage
SCHEMA_ERRORS = ("no such table", "no such column", "has no column named")
BACKOFF_FIRST_S = 0.25
BACKOFF_MAX_S = 8.0


class Outage:
    """One dependency's state in this process: up, or down since when. Thread-safe."""

    def __init__(self, name: str, meanwhile: str) -> None:
        self.name, self.meanwhile = name, meanwhile
        self._lock = threading.Lock()
        self._since: float | None = None
        self._waiting = 0  # operations that met this outage (reported when it ends)
        self.last_failure = 0.0  # time.monotonic() of the latest failure

    @property
    def down(self) -> bool:
        return self._since is not None

    def failed(self, error: BaseException, what: str) -> None:
        """An operation met the outage: the first one of an outage logs it, the others count."""
        with self._lock:
            self._waiting += 1
            self.last_failure = time.monotonic()
            if self._since is not None:
                return
            self._since = self.last_failure
        logger.warning(
            "%s unavailable (first seen by %s: %s); %s; one line when it is back",
            self.name,
            what,
            f"{type(error).__name__}: {error}".strip()[:300],
            self.meanwhile,
        )

    def recovered(self) -> None:
        """An operation succeeded: an outage in progress ends here (logged once)."""
        if self._since is None:  # the common case, without the lock
            return
        with self._lock:
            if self._since is None:
                return
            seconds, waiting = time.monotonic() - self._since, self._waiting
            self._since, self._waiting = None, 0
        logger.warning("%s back after %.1f s (%d failed attempt(s) meanwhile)", self.name, seconds, waiting)

    def reset(self) -> None:
        with self._lock:
            self._since, self._waiting = None, 0


DATABASE = Outage("database", "tasks wait and retry with back-off")


def backoff_delays():
    """0.25, 0.5, 1, 2, 4, 8, 8, … seconds, each with up to 20 % jitter (workers do not retry in step)."""
    delay = BACKOFF_FIRST_S
    while True:
        yield delay * (1 + random.random() * 0.2)
        delay = min(delay * 2, BACKOFF_MAX_S)


def is_outage(error: BaseException) -> bool:
    """A database that is away (worth waiting for), not a query it will never accept."""
    return isinstance(error, DATABASE_ERRORS) and not any(text in str(error) for text in SCHEMA_ERRORS)


def reconnect() -> None:
    """Never reuse a connection a restart killed: the next query opens a fresh one."""
    close_old_connections()
    connection.close()


def retry_database(operation: Callable[[], T], what: str, budget_s: float | None = None) -> T:
    """Run `operation`; while the database is away, wait with back-off and run it again, for up to
    `budget_s` (KVSELECT_STORE_RETRY_S), then raise the last error. `operation` must be safe to run
    again (a transaction that failed rolled back); called inside a transaction, it raises at once."""
    budget = float(settings.KVSELECT_STORE_RETRY_S) if budget_s is None else budget_s
    deadline = time.monotonic() + budget
    delays = backoff_delays()
    while True:
        try:
            result = operation()
        except DATABASE_ERRORS as exc:
            delay = next(delays)
            if time.monotonic() + delay > deadline or not is_outage(exc) or connection.in_atomic_block:
                raise  # (inside a caller's transaction, the caller's whole transaction must run again)
            DATABASE.failed(exc, what)
            logger.debug("%s: database unavailable, retrying in %.2f s: %s", what, delay, exc)
            reconnect()
            time.sleep(delay)
            continue
        DATABASE.recovered()
        return result
