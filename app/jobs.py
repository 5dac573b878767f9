"""Generations for the API: the wait line (Gate) and one request's choices run one after
another on the loaded pair (Job): a worker thread waits its turn and relays the events that the
host's owner thread produces (app/host.py OwnedPair) to an asyncio queue."""
from __future__ import annotations

import asyncio
import logging
import threading
from contextlib import closing

from app.openai_io import ApiError
from models.pairs.catalog import PairError

log = logging.getLogger("duo.api")


class Gate:
    """Requests waiting or running; more than `limit` are refused."""

    def __init__(self, limit: int):
        self.limit, self.n, self._lock = limit, 0, threading.Lock()

    def enter(self) -> bool:
        with self._lock:
            if self.n >= self.limit:
                return False
            self.n += 1
            return True

    def leave(self) -> None:
        with self._lock:
            self.n -= 1


class Job:
    """A request's generations (one per choice, in order) in a worker thread; its events
    arrive as (choice index, event), then None. `ids`: each choice's prompt."""

    def __init__(self, host, name: str, ids: list, cfgs: list, gate: Gate):
        self.host, self.name, self.ids, self.cfgs, self.gate = host, name, ids, cfgs, gate
        self.cancel = threading.Event()
        self.events: asyncio.Queue = asyncio.Queue()
        self._loop = asyncio.get_running_loop()
        threading.Thread(target=self._work, daemon=True, name="api-generation").start()

    def _put(self, item) -> None:
        self._loop.call_soon_threadsafe(self.events.put_nowait, item)

    def _work(self) -> None:
        try:
            with self.host.running(self.name) as pair:
                for i, cfg in enumerate(self.cfgs):
                    if self.cancel.is_set():  # the client left (maybe while waiting its turn)
                        return
                    with closing(pair.generate(self.ids[i], cfg, stop=self.cancel.is_set)) as evs:
                        for ev in evs:
                            self._put((i, ev))
        except Exception as e:  # noqa: BLE001 - handed to the request, which reports it
            self._put(e)
        finally:
            self.gate.leave()
            self._put(None)

    async def next(self):
        """The next (index, event); None at the end; an engine error is raised here."""
        item = await self.events.get()
        if isinstance(item, Exception):
            raise as_api_error(item)
        return item


def as_api_error(e: Exception) -> ApiError:
    if isinstance(e, ApiError):
        return e
    if isinstance(e, (ValueError, PairError)):
        return ApiError(400, str(e))
    log.exception("generation failed", exc_info=e)
    return ApiError(500, f"generation failed: {e}", type="server_error")
