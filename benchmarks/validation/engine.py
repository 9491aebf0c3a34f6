"""The candidate's engine as a process the worker starts from its launch recipe."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import tempfile
import time

from benchmarks.validation.target import ValidationError, healthy
from selection.domain.messages import LABEL_SEPARATOR, Code, Join, Message
from selection.domain.messages import marked as _

COULD_NOT_START = _("could not start %(program)s: %(why)s")
EXITED_EARLY = _("the engine exited with status %(status)s before it was healthy; last log lines: %(tail)s")
NOT_HEALTHY = _("not healthy within %(seconds)s s")


def launch_problem(message: Message) -> Join:
    """A launch recipe's failure as the run page shows it: the field as code, then why."""
    return Join([Code("launch_recipe"), message], LABEL_SEPARATOR)


class EngineUnavailable(RuntimeError):
    """The engine did not answer before the load started (the task may retry). `message`, when given, is the
    same reason as a message the run page renders in its language; the English text is the API's."""

    def __init__(self, text: str, message=None):
        super().__init__(text)
        self.message = message


class LaunchedEngine:
    """The candidate's launch recipe, run by the worker: start, wait for /health, stop, keep the log.

    The recipe is an argument list (shlex-split, never a shell) that only the selection's
    architects can set; its output goes to a log file that becomes the run's `engine_log`
    artifact and is parsed for the KV capacity the engine really allocated.
    """

    def __init__(self, recipe: str, endpoint_url: str, startup_timeout_s: float = 600.0) -> None:
        self.argv = shlex.split(recipe)
        if not self.argv:
            raise ValidationError("launch_recipe: empty command")
        self.endpoint_url = endpoint_url
        self.startup_timeout_s = startup_timeout_s
        self.log = tempfile.NamedTemporaryFile(prefix="kvselect-engine-", suffix=".log", delete=False)
        self.process = None

    def __enter__(self) -> "LaunchedEngine":
        try:
            self.process = subprocess.Popen(
                self.argv, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        except OSError as exc:
            why = exc.strerror or exc
            raise EngineUnavailable(
                f"launch_recipe: could not start {self.argv[0]!r}: {why}",
                launch_problem(Message(COULD_NOT_START, {"program": Code(self.argv[0]), "why": Code(str(why))})),
            ) from exc
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self.tail()
                raise EngineUnavailable(
                    f"launch_recipe: the engine exited with status {self.process.returncode} "
                    f"before it was healthy; last log lines: {tail}",
                    launch_problem(Message(EXITED_EARLY, {"status": self.process.returncode, "tail": Code(tail)})),
                )
            if healthy(self.endpoint_url):
                return self
            time.sleep(1.0)
        self.stop()
        seconds = f"{self.startup_timeout_s:.0f}"
        raise EngineUnavailable(
            f"launch_recipe: not healthy within {seconds} s",
            launch_problem(Message(NOT_HEALTHY, {"seconds": seconds})),
        )

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout=30)
            except (ProcessLookupError, PermissionError):
                pass
            except Exception:  # still alive after 30 s
                os.killpg(self.process.pid, signal.SIGKILL)
        self.log.flush()

    def text(self) -> str:
        with open(self.log.name, "rb") as handle:
            return handle.read().decode("utf-8", "replace")

    def tail(self, lines: int = 5) -> str:
        return " | ".join(self.text().strip().splitlines()[-lines:])
