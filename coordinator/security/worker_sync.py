"""`--workers N`: every worker holds worker 0's credentials and ACLs, relayed by the supervisor.

Credentials and ACL bindings are records in offsets partition 0, which worker 0 owns, so worker 0 is
the authority. After loading partition 0 and after every change it sends its whole security state
(its records) up its status pipe; the supervisor keeps the latest state and passes it down the
control pipe of every other worker (and of a worker it starts or restarts, before anything else), and
each worker replaces its registry with it. A worker other than 0 serves no client before it has one.

A change asked of worker K (CreateAcls, DeleteAcls, AlterUserScramCredentials) is authorized and
validated on K against that copy; its records then go the same way to worker 0, which appends them
to partition 0 (durable), applies them, sends its new state and then the acknowledgement. Pipes keep
order, so K holds the new state when it answers its client; every other worker holds it as soon as
the supervisor has relayed it (a few milliseconds; docs state a bound of one second). No password
crosses a network: the pipes join the processes of one supervisor only.

Pipe lines are JSON objects: ``{"security_state": RECORDS}`` (worker 0 -> supervisor -> others),
``{"security_append": RECORDS, "id": N}`` (worker K -> supervisor, which adds ``"from": K`` -> worker 0)
and ``{"security_appended": N, "to": K, "error": null | TEXT}`` (worker 0 -> supervisor -> worker K).
RECORDS is a list of ``[key, value]`` in base64 (value null for a tombstone).
"""
from __future__ import annotations

import asyncio
import base64
import itertools
import logging
from collections.abc import Callable, Sequence
from typing import Any

from cohort.coordinator.contracts.store import StorageError
from cohort.coordinator.records.types import Record, decode_record, encode_record
from cohort.coordinator.security.registry import SECURITY_RECORD_TYPES, SecurityRegistry

log = logging.getLogger("cohort.coordinator.process.worker")

STATE = "security_state"
APPEND = "security_append"
APPENDED = "security_appended"
AUTHORITY = 0  # the worker that owns offsets partition 0
APPEND_TIMEOUT_S = 30.0  # worker 0 restarting takes well under this; then the change answers an error


def encode_records(records: Sequence[Record]) -> list[list[str | None]]:
    rows = []
    for record in records:
        key, value = encode_record(record)
        rows.append([base64.b64encode(key).decode(), None if value is None else base64.b64encode(value).decode()])
    return rows


def decode_records(rows: Sequence[Sequence[str | None]]) -> list[Record]:
    return [decode_record(base64.b64decode(key), None if value is None else base64.b64decode(value))
            for key, value in rows]


class WorkerSecurity:
    """One worker's end of the relay; `send(doc)` writes a line up to the supervisor."""

    def __init__(self, index: int, send: Callable[[dict[str, Any]], None]) -> None:
        self.index = index
        self._send = send
        self._registry: SecurityRegistry | None = None
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future] = {}
        self._tasks: set[asyncio.Task] = set()
        self.has_state = asyncio.Event()  # worker 0: partition 0 loaded; others: a state received

    @property
    def is_authority(self) -> bool:
        return self.index == AUTHORITY

    def attach(self, registry: SecurityRegistry) -> None:
        """Make `registry` this worker's copy: worker 0 publishes its changes, the others persist at worker 0."""
        self._registry = registry
        if self.is_authority:
            registry.on_change = self.publish
        else:
            registry.persist = self._append_at_authority

    def loaded(self) -> None:
        """Worker 0 loaded partition 0: its registry is the state to show everyone."""
        if self.is_authority:
            self.publish()
            self.has_state.set()

    def publish(self) -> None:
        assert self._registry is not None
        self._send({STATE: encode_records(self._registry.records())})

    async def _append_at_authority(self, records: Sequence[Record]) -> None:
        request_id = next(self._ids)
        answer = self._waiting[request_id] = asyncio.get_running_loop().create_future()
        try:
            self._send({APPEND: encode_records(records), "id": request_id})
            error = await asyncio.wait_for(answer, APPEND_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise StorageError(f"worker {AUTHORITY} (owner of offsets partition 0) did not confirm the change "
                               f"within {APPEND_TIMEOUT_S:.0f} s") from None
        finally:
            self._waiting.pop(request_id, None)
        if error is not None:
            raise StorageError(error)

    def on_message(self, doc: dict[str, Any]) -> bool:
        """Handle one line from the supervisor if it is about security; False if it is not."""
        if STATE in doc:
            if self._registry is not None and not self.is_authority:
                self._registry.replace(decode_records(doc[STATE]))
                self.has_state.set()
        elif APPENDED in doc:
            answer = self._waiting.get(int(doc[APPENDED]))
            if answer is not None and not answer.done():
                answer.set_result(doc.get("error"))
        elif APPEND in doc:
            task = asyncio.get_running_loop().create_task(self._append_for(doc))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        else:
            return False
        return True

    async def _append_for(self, doc: dict[str, Any]) -> None:
        """Worker 0: make another worker's change durable here, show the new state, then confirm."""
        error = None
        try:
            if self._registry is None or not self.is_authority or not self.has_state.is_set():
                raise StorageError(f"worker {self.index} does not hold offsets partition 0 now")
            records = decode_records(doc[APPEND])
            if not all(isinstance(r, SECURITY_RECORD_TYPES) for r in records):
                raise ValueError("not a security record")
            await self._registry.append(records)
        except StorageError as exc:
            error = str(exc)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("unreadable security change from worker %s: %s", doc.get("from"), type(exc).__name__)
            error = "unreadable change"
        self._send({APPENDED: doc.get("id"), "to": doc.get("from"), "error": error})
