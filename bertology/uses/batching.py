"""Dynamic micro-batching: concurrent requests share one forward pass.

A model answers 32 texts in one batch much faster than in 32 calls, but an HTTP server
gets them one request at a time. `MicroBatcher` queues every request's items; one worker
takes the first waiting item, then gathers more until it has `max_batch` items or
`max_wait_ms` have passed since that first one, runs the whole batch in a worker thread
(PyTorch releases the GIL, so the event loop keeps accepting requests meanwhile) and
hands each request its own results. Under light load a request waits at most
`max_wait_ms`; under heavy load batches fill up at once. `max_batch=1` turns batching off."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any


class Overloaded(Exception):
    """The queue is full (or the batcher is shutting down): the request is refused, not queued."""


@dataclass
class BatchStats:
    """What the worker has done so far, for /info and tests."""

    batches: int = 0
    items: int = 0
    largest_batch: int = 0


@dataclass
class _Entry:
    key: Hashable  # items of one call to `run` share a key (e.g. the same pooling)
    item: Any
    future: asyncio.Future


class MicroBatcher:
    """Groups items submitted concurrently into batches for `run(key, items) -> results`.

    Args:
        run: computes one result per item, in order, for items of the same key; it runs
            in `executor`, so give every batcher of one model the same single-thread
            executor and forward passes never overlap.
        max_batch: most items per call of `run`.
        max_wait_ms: how long the first item of a batch waits for company.
        max_queue: most items waiting; more are refused with `Overloaded`.
    """

    def __init__(self, run: Callable[[Hashable, list], list], executor: Executor, max_batch: int = 64,
                 max_wait_ms: float = 5.0, max_queue: int = 1024):
        self.run, self.executor = run, executor
        self.max_batch, self.max_wait, self.max_queue = max_batch, max_wait_ms / 1000, max_queue
        self.stats = BatchStats()
        self._queue: asyncio.Queue[_Entry | None] = asyncio.Queue()
        self._waiting = 0  # items submitted and not yet answered
        self._worker: asyncio.Task | None = None
        self._closed = False

    @property
    def waiting(self) -> int:
        """Items submitted and not yet answered."""
        return self._waiting

    def start(self) -> None:
        """Start the worker (inside the running event loop)."""
        self._worker = asyncio.get_running_loop().create_task(self._work())

    async def close(self) -> None:
        """Refuse new items, answer every queued one, then stop the worker."""
        self._closed = True
        if self._worker is not None:
            self._queue.put_nowait(None)  # behind every queued item, so they are all answered first
            await self._worker

    async def submit(self, items: list, key: Hashable = None) -> list:
        """Queue one request's items; returns their results in order (or raises what `run` raised)."""
        if self._closed:
            raise Overloaded("the server is shutting down")
        if self._waiting + len(items) > self.max_queue:
            raise Overloaded(f"{self._waiting} texts are already waiting (the limit is {self.max_queue}); retry later")
        loop = asyncio.get_running_loop()
        entries = [_Entry(key, item, loop.create_future()) for item in items]
        self._waiting += len(entries)
        for entry in entries:
            self._queue.put_nowait(entry)
        try:
            return list(await asyncio.gather(*(e.future for e in entries)))
        finally:
            self._waiting -= len(entries)

    async def _work(self) -> None:
        """Take a batch, run it, answer it; until `close`."""
        loop = asyncio.get_running_loop()
        stopping = False
        while not stopping:
            first = await self._queue.get()
            if first is None:
                return
            batch, deadline = [first], loop.time() + self.max_wait
            while len(batch) < self.max_batch:
                try:
                    entry = self._queue.get_nowait()
                except asyncio.QueueEmpty:
                    try:
                        entry = await asyncio.wait_for(self._queue.get(), deadline - loop.time())
                    except asyncio.TimeoutError:  # not the builtin TimeoutError before Python 3.11
                        break
                if entry is None:
                    stopping = True
                    break
                batch.append(entry)
            await self._run_batch(batch)

    async def _run_batch(self, batch: list[_Entry]) -> None:
        """Run the live entries of a batch (one call per key) and resolve their futures."""
        live = [e for e in batch if not e.future.done()]  # a client that went away needs no answer
        if not live:
            return
        groups: dict[Hashable, list[_Entry]] = {}
        for entry in live:
            groups.setdefault(entry.key, []).append(entry)
        loop = asyncio.get_running_loop()
        for key, entries in groups.items():
            try:
                results = await loop.run_in_executor(self.executor, self.run, key, [e.item for e in entries])
            except Exception as err:  # noqa: BLE001 - the requests of this batch fail; the worker lives on
                results, error = None, err
            for n, entry in enumerate(entries):
                if entry.future.done():
                    continue
                if results is None:
                    entry.future.set_exception(error)
                else:
                    entry.future.set_result(results[n])
        self.stats.batches += 1
        self.stats.items += len(live)
        self.stats.largest_batch = max(self.stats.largest_batch, len(live))
