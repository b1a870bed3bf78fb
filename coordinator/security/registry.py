"""The node's security state: SCRAM credentials and ACL bindings, rebuilt from the log and changed through it.

Like the topic registry, every change follows the coordinator's rule: make
records → append them (durable) → apply them to memory → answer. The records
(`ScramCredentialRecord`, `AclRecord` and their tombstones) live in offsets
partition 0 with the topic registry, so they survive restarts. Every change is
one line on the ``cohort.audit`` logger (who, what), never with a secret.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from cohort.coordinator.records.types import AclRecord, AclTombstone, Record, ScramCredentialRecord, ScramCredentialTombstone
from cohort.coordinator.security.authorizer import AclBinding, Authorizer, binding_from_wire
from cohort.coordinator.security.credentials import CredentialStore, ScramCredential, ScramMechanism

audit = logging.getLogger("cohort.audit")

SECURITY_RECORD_TYPES = (ScramCredentialRecord, ScramCredentialTombstone, AclRecord, AclTombstone)
PersistRecords = Callable[[Sequence[Record]], Awaitable[None]]
SecurityRecord = ScramCredentialRecord | ScramCredentialTombstone | AclRecord | AclTombstone


def acl_record(binding: AclBinding, tombstone: bool = False) -> AclRecord | AclTombstone:
    key = (int(binding.resource_type), binding.resource_name, int(binding.pattern_type), binding.principal,
           binding.host, int(binding.operation), int(binding.permission))
    return AclTombstone(*key) if tombstone else AclRecord(*key, created_ms=int(time.time() * 1000))


def describe_binding(b: AclBinding) -> str:
    """kafka-acls.sh's way of printing a binding, for audit lines and the CLI."""
    return (f"(principal={b.principal}, host={b.host}, operation={b.operation.name}, "
            f"permissionType={b.permission.name}) on ResourcePattern(resourceType={b.resource_type.name}, "
            f"name={b.resource_name}, patternType={b.pattern_type.name})")


class SecurityRegistry:
    """Credentials (always) and ACL bindings (used for decisions when an authorizer is configured)."""

    def __init__(self, persist: PersistRecords, authorizer: Authorizer,
                 on_change: Callable[[], None] | None = None) -> None:
        """`persist(records)` makes changes durable (where partition 0 lives); `on_change()` is called after
        each change is applied (a `--workers` worker 0 then shows the others its new state)."""
        self.persist = persist
        self.on_change = on_change
        self.credentials = CredentialStore()
        self.authorizer = authorizer
        self._lock = asyncio.Lock()

    def apply(self, record: Record) -> None:
        """Replay one record (at load, or after an append)."""
        if isinstance(record, (ScramCredentialRecord, ScramCredentialTombstone)):
            self.credentials.apply(record)
        elif isinstance(record, (AclRecord, AclTombstone)):
            binding = binding_from_wire(record.resource_type, record.resource_name, record.pattern_type,
                                        record.principal, record.host, record.operation, record.permission)
            if isinstance(record, AclTombstone):
                self.authorizer.remove(binding)
            else:
                self.authorizer.add(binding)

    def records(self) -> list[SecurityRecord]:
        """The whole state as records: replaying them into an empty registry gives this one."""
        acls: list[SecurityRecord] = [acl_record(b) for b in self.authorizer]
        return [c.record() for c in self.credentials] + acls

    def replace(self, records: Sequence[Record]) -> None:
        """Become exactly what `records` (another registry's `records()`) describe, in place.

        Open connections keep using the same credential store and authorizer objects, so they see the
        new state at once."""
        self.credentials.replace([r for r in records if isinstance(r, ScramCredentialRecord)])
        wanted = {binding_from_wire(r.resource_type, r.resource_name, r.pattern_type, r.principal, r.host,
                                    r.operation, r.permission) for r in records if isinstance(r, AclRecord)}
        for gone in [b for b in self.authorizer if b not in wanted]:
            self.authorizer.remove(gone)
        for binding in wanted:
            self.authorizer.add(binding)

    async def append(self, records: Sequence[Record]) -> None:
        """Persist and apply records decided elsewhere (another worker's change, made durable here)."""
        async with self._lock:
            await self._write(list(records))

    async def _write(self, records: list[Record]) -> None:
        if records:
            await self.persist(records)
            for r in records:
                self.apply(r)
            if self.on_change is not None:
                self.on_change()

    async def add_acls(self, bindings: Sequence[AclBinding], principal: str) -> None:
        async with self._lock:
            new = [b for b in dict.fromkeys(bindings) if b not in self.authorizer]
            await self._write([acl_record(b) for b in new])
        for b in new:
            audit.info("ACL added: %s", describe_binding(b), extra={"principal": principal})

    async def remove_acls(self, bindings: Sequence[AclBinding], principal: str) -> None:
        async with self._lock:
            gone = [b for b in dict.fromkeys(bindings) if b in self.authorizer]
            await self._write([acl_record(b, tombstone=True) for b in gone])
        for b in gone:
            audit.info("ACL removed: %s", describe_binding(b), extra={"principal": principal})

    async def alter_credentials(self, upserts: Sequence[ScramCredential],
                                deletions: Sequence[tuple[str, ScramMechanism]], principal: str) -> None:
        async with self._lock:
            records: list[Record] = [ScramCredentialTombstone(user, int(m)) for user, m in deletions]
            records += [c.record() for c in upserts]
            await self._write(records)
        for user, mechanism in deletions:
            audit.info("SCRAM credential deleted", extra={"principal": principal, "user": user,
                                                         "mechanism": mechanism.mechanism_name})
        for c in upserts:
            audit.info("SCRAM credential set", extra={"principal": principal, "user": c.user,
                                                     "mechanism": c.mechanism.mechanism_name,
                                                     "iterations": c.iterations})
