"""One load, run by several forked worker processes: each with its own event loop, client and core.

Why: a Python event loop is one core. When the streams of a run need more than that, the client
itself becomes the bottleneck and every latency it reports is partly its own. The load runner
(`benchmarks.harness.load`) splits the load into shares and hands each to a job run here; this
module only knows processes: fork (so the request factory, a closure, needs no pickling), a
fresh thread in the child (the parent's running event loop is not the child's), results and
progress back over a pipe, and the parent's cancel passed down. Linux only (fork).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import sys
import threading
from multiprocessing.connection import Connection
from typing import Any, Awaitable, Callable

Job = Callable[[int, Callable[[], bool], Callable[[dict[str, Any]], None]], Awaitable[Any]]
CancelCheck = Callable[[], Awaitable[bool]]
RunCoroutine = Callable[[Awaitable[Any]], Any]


class WorkerFailed(RuntimeError):
    """A worker process died or raised; the message says which and why."""


def fork_available() -> bool:
    return sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()


def usable_cores() -> int:
    """Cores this process may run on (its affinity), not the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _child(job: Job, run: RunCoroutine, worker: int, stop: Any, conn: Connection) -> None:
    """In the forked process: run the job on a new thread's event loop; send progress and the result."""
    lock = threading.Lock()

    def send(message: tuple[str, Any]) -> None:
        with lock:
            conn.send(message)

    def main() -> None:
        try:
            result = run(job(worker, stop.is_set, lambda payload: send(("progress", payload))))
        except BaseException as exc:  # reported to the parent, which raises it
            send(("error", f"{type(exc).__name__}: {exc}"))
            return
        send(("result", result))

    thread = threading.Thread(target=main, name=f"kvselect-load-worker-{worker}")
    thread.start()
    thread.join()
    conn.close()


async def run_forked(
    job: Job,
    workers: int,
    run: RunCoroutine,
    cancel_requested: CancelCheck,
    on_progress: Callable[[int, dict[str, Any]], None],
    poll_s: float = 0.1,
) -> list[Any]:
    """Run `job(worker, stopped, report)` in `workers` forked processes; their results in worker order.

    `run` runs a coroutine to completion on a new event loop (the child's). `cancel_requested` (awaited) is
    polled every `poll_s` and, once true, `stopped()` turns true in every child. Raises
    WorkerFailed when a worker raised or died without a result.
    """
    context = multiprocessing.get_context("fork")
    stop = context.Event()
    pipes, processes = [], []
    for worker in range(workers):
        parent_end, child_end = context.Pipe(duplex=False)
        process = context.Process(
            target=_child, args=(job, run, worker, stop, child_end), daemon=True, name=f"kvselect-load-worker-{worker}"
        )
        process.start()
        child_end.close()
        pipes.append(parent_end)
        processes.append(process)
    results: dict[int, Any] = {}
    errors: dict[int, str] = {}
    try:
        while len(results) + len(errors) < workers:
            if not stop.is_set() and await cancel_requested():
                stop.set()
            for worker, pipe in enumerate(pipes):
                if worker in results or worker in errors:
                    continue
                try:
                    while pipe.poll():  # also true at end of file, once the worker has gone
                        kind, payload = pipe.recv()
                        if kind == "progress":
                            on_progress(worker, payload)
                            continue
                        if kind == "result":
                            results[worker] = payload
                        else:
                            errors[worker] = payload
                        break
                except EOFError:
                    errors.setdefault(worker, f"exited with code {processes[worker].exitcode} without a result")
            await asyncio.sleep(poll_s)
    finally:
        stop.set()
        for process in processes:
            process.join(5)
            if process.is_alive():
                process.kill()
        for pipe in pipes:
            pipe.close()
    if errors:
        raise WorkerFailed("; ".join(f"load worker {worker}: {message}" for worker, message in sorted(errors.items())))
    return [results[worker] for worker in range(workers)]
