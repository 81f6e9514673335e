"""Micro-batching of one signature's TF calls (runs in the serving environment, .venv-serving): requests that
queue while a call runs are coalesced into the next call, and each gets its own rows of the outputs back."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

MAX_BATCH_ROWS = 512  # the most rows one coalesced call carries; a bigger request runs alone


class Batcher:
    """One signature's TF calls, one at a time in a worker thread. Requests that queue while a call runs are
    coalesced into the next call (at most MAX_BATCH_ROWS rows): one client waits for nothing, many share calls."""

    def __init__(self, call: Callable[[dict], dict], pool: ThreadPoolExecutor, max_rows: int = MAX_BATCH_ROWS):
        self._call, self._pool, self._max_rows = call, pool, max_rows
        self._queue: collections.deque = collections.deque()
        self._busy = False

    async def run(self, inputs: dict[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._queue.append((inputs, rows, future))
        if not self._busy:
            self._busy = True
            loop.create_task(self._drain(loop))
        return await future

    async def _drain(self, loop) -> None:
        try:
            while self._queue:
                await self._run_jobs(loop, self._take())
        finally:
            self._busy = False

    def _take(self) -> list:
        jobs, rows = [], 0
        while self._queue and (not jobs or rows + self._queue[0][1] <= self._max_rows):
            jobs.append(self._queue.popleft())
            rows += jobs[-1][1]
        return jobs

    async def _run_jobs(self, loop, jobs: list) -> None:
        try:
            outputs = await loop.run_in_executor(self._pool, self._call, _merge([job[0] for job in jobs]))
            parts = _split(outputs, [job[1] for job in jobs])
        except Exception as exc:
            if len(jobs) == 1:
                _settle(jobs[0][2], exception=exc)
                return
            for job in jobs:  # one request's problem (a malformed tf.Example, say) must not fail the others
                await self._run_jobs(loop, [job])
            return
        for job, part in zip(jobs, parts, strict=True):
            _settle(job[2], part)


def _merge(inputs: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    if len(inputs) == 1:
        return inputs[0]
    return {key: np.concatenate([one[key] for one in inputs]) for key in inputs[0]}


def _split(outputs: dict[str, np.ndarray], rows: list[int]) -> list[dict[str, np.ndarray]]:
    """Each request's rows of a coalesced call's outputs."""
    if len(rows) == 1:
        return [outputs]
    if any(np.ndim(value) == 0 or len(value) != sum(rows) for value in outputs.values()):
        raise ValueError("an output is not one entry per row: the requests run one by one")
    bounds = np.cumsum([0, *rows])
    return [{key: value[start:end] for key, value in outputs.items()}
            for start, end in zip(bounds[:-1], bounds[1:], strict=True)]


def _settle(future: asyncio.Future, result=None, exception: BaseException | None = None) -> None:
    if future.done():  # the client went away
        return
    if exception is not None:
        future.set_exception(exception)
    else:
        future.set_result(result)
