"""When a load stops early because the engine is gone.

A dead engine refuses connections at once, so a closed loop would otherwise retry as fast as the
loop turns (about a thousand connections a second) until the planned end. A load stops early,
keeping the data it has, when either rule holds (numbers in `LIMITS`):

- `consecutive_connection_failures` requests in a row failed to connect or lost their connection
  (error classes `connect` and `disconnect`) with no success in between;
- `seconds_without_success` passed since the last successful request (or the start) while every
  request that ended in that time failed (at least one did): a slow but healthy engine, whose
  long requests are still in flight, is never stopped.

The caller ends the test failed with `reason`.
"""

from __future__ import annotations

from dataclasses import dataclass

from selection.domain.messages import Message
from selection.domain.messages import marked as _

CONNECTION_ERRORS = frozenset({"connect", "disconnect"})
LIMITS = {"consecutive_connection_failures": 50, "seconds_without_success": 30.0}
# why the load stopped, as a message (`reason` is its English text); `last` is the last error as the client saw it
CONNECTIONS_LOST = _(
    "%(n)s consecutive requests could not connect or lost their connection (last: %(last)s); the engine is not "
    "answering"
)
NO_SUCCESS = _("no request succeeded for %(seconds)s s while %(failed)s failed (last: %(last)s)")


@dataclass
class EarlyStop:
    """The two rules, fed with each finished request and checked against the clock."""

    consecutive_connection_failures: int | None = LIMITS["consecutive_connection_failures"]
    seconds_without_success: float | None = LIMITS["seconds_without_success"]
    reason: str | None = None
    reason_message: Message | None = None
    _consecutive: int = 0
    _failed_since_success: int = 0
    _last_success: float | None = None
    _last_error: str = ""

    def start(self, now: float) -> None:
        self._last_success = now

    def observe(self, ok: bool, error_class: str | None, error: str | None, now: float) -> bool:
        """One request ended; True when the load must stop now."""
        if ok:
            self._consecutive = self._failed_since_success = 0
            self._last_success = now
            return False
        if error_class == "cancelled":
            return False
        self._failed_since_success += 1
        self._last_error = f"{error_class}: {error}" if error else str(error_class)
        self._consecutive = self._consecutive + 1 if error_class in CONNECTION_ERRORS else 0
        limit = self.consecutive_connection_failures
        if limit and self._consecutive >= limit and self.reason is None:
            self._stop(Message(CONNECTIONS_LOST, {"n": self._consecutive, "last": self._last_error[:200]}))
        return self.reason is not None

    def check(self, now: float) -> bool:
        """The clock rule; True when the load must stop now."""
        limit = self.seconds_without_success
        if limit and self.reason is None and self._failed_since_success and self._last_success is not None:
            if now - self._last_success >= limit:
                figures = {"seconds": f"{now - self._last_success:.0f}", "failed": self._failed_since_success}
                self._stop(Message(NO_SUCCESS, {**figures, "last": self._last_error[:200]}))
        return self.reason is not None

    def _stop(self, why: Message) -> None:
        self.reason_message, self.reason = why, str(why)
