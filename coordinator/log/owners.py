"""Several processes sharing one data dir, each owning some offsets partitions (`cohort serve --workers N`).

The partition directories (``__consumer_offsets-P``) are the data: their layout never depends on who
owns them. What an owner writes besides them -- its commit journal and its ``checkpoint.json`` --
lives in its own *state dir*, so two processes never write the same file:

* the single-node server (owner of all partitions) keeps them in the data dir itself (as always);
* worker K keeps them in ``<data dir>/owners/worker-K/``.

Exactly one process owns a partition directory at a time: the owner holds an exclusive ``flock`` on
``<partition dir>/.owner.lock`` (released by the kernel however the process ends).

Changing the split (another N, or single node <-> workers) is safe because of `settle`: before the new
owners start, every owner whose partition set changed is opened once with its old set (recovery
replays its journal into the partition files) and closed (the final checkpoint fsyncs them), then its
journal and checkpoint are removed. The partition files then hold everything acknowledged, fsynced,
and the new owners recover them like a log with no checkpoint. ``owners.json`` in the data dir
records the split that is running; it is written only after every settle, so a crash mid-way settles
again on the next start (settling is idempotent).
"""
from __future__ import annotations

import asyncio
import errno
import fcntl
import json
import logging
import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

from cohort.coordinator.log.journal import CHECKPOINT_NAME, list_journals
from cohort.coordinator.log.segments import fsync_dir, partition_dir

log = logging.getLogger("cohort.log")

OWNERS_FILE = "owners.json"
OWNERS_DIR = "owners"
PARTITION_LOCK_NAME = ".owner.lock"
SINGLE_NODE_OWNER = "node"  # the single-node server: state in the data dir itself


class PartitionOwnedElsewhere(Exception):
    """Another live process holds a partition directory this one was asked to own."""


def worker_owner(index: int) -> str:
    return f"worker-{index}"


def state_dir(data_dir: Path, owner: str) -> Path:
    """Where `owner` keeps its journal and checkpoint."""
    data_dir = Path(data_dir)
    return data_dir if owner == SINGLE_NODE_OWNER else data_dir / OWNERS_DIR / owner


class PartitionLocks:
    """Exclusive flocks on the partition directories one process owns."""

    def __init__(self, data_dir: Path, partitions: Iterable[int]) -> None:
        self.data_dir = Path(data_dir)
        self.partitions = sorted(set(partitions))
        self._fds: list[int] = []

    def acquire(self) -> None:
        """Lock every partition dir (creating it) or none; PartitionOwnedElsewhere names the first taken one."""
        try:
            for p in self.partitions:
                pdir = partition_dir(self.data_dir, p)
                pdir.mkdir(parents=True, exist_ok=True)
                path = pdir / PARTITION_LOCK_NAME
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as exc:
                    holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
                    os.close(fd)
                    if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                        by = f" (pid {holder})" if holder else ""
                        raise PartitionOwnedElsewhere(
                            f"offsets partition {p} ({pdir}) is owned by another process{by}") from None
                    raise
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
                self._fds.append(fd)
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds = []


def read_owners(data_dir: Path) -> dict[str, list[int]] | None:
    """The split recorded by the last start (owner -> partitions), or None if none was recorded."""
    try:
        doc = json.loads((Path(data_dir) / OWNERS_FILE).read_text())
        return {str(owner): sorted(int(p) for p in parts) for owner, parts in doc["owners"].items()}
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{Path(data_dir) / OWNERS_FILE} is damaged: {exc}") from None


def write_owners(data_dir: Path, owners: Mapping[str, Iterable[int]]) -> None:
    data_dir = Path(data_dir)
    tmp = data_dir / (OWNERS_FILE + ".tmp")
    with open(tmp, "w") as f:
        json.dump({"owners": {o: sorted(ps) for o, ps in sorted(owners.items())}}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, data_dir / OWNERS_FILE)
    fsync_dir(data_dir)


def _has_state(path: Path) -> bool:
    return (path / CHECKPOINT_NAME).exists() or bool(list_journals(path))


def _recorded_or_found(data_dir: Path, num_partitions: int) -> dict[str, list[int]]:
    """The previous split; without owners.json, what state dirs exist (an older single-node data dir)."""
    recorded = read_owners(data_dir)
    if recorded is not None:
        return recorded
    found: dict[str, list[int]] = {}
    if _has_state(data_dir):
        found[SINGLE_NODE_OWNER] = list(range(num_partitions))
    return found


async def settle(data_dir: Path, owners: Mapping[str, Iterable[int]], open_log) -> list[str]:
    """Make the partition files hold everything before `owners` (the new split) start; record it.

    `open_log(state_dir, partitions)` builds an `OffsetsLog` for one old owner. Returns the owners that
    were settled. The caller holds the data-dir lock (no old owner can be running).
    """
    data_dir = Path(data_dir)
    wanted = {o: sorted(set(ps)) for o, ps in owners.items()}
    num_partitions = sum(len(ps) for ps in wanted.values())
    previous = _recorded_or_found(data_dir, num_partitions)
    settled = []
    for owner, partitions in sorted(previous.items()):
        if wanted.get(owner) == partitions:
            continue
        directory = state_dir(data_dir, owner)
        if directory.exists() and _has_state(directory):
            offsets_log = open_log(directory, partitions)
            locks = PartitionLocks(data_dir, partitions)
            locks.acquire()
            try:
                try:
                    await offsets_log.open(None)
                finally:
                    await offsets_log.close()
            finally:
                locks.release()
            log.info("offsets partitions of %s handed over (journal replayed into the partition files)", owner)
        _forget_state(data_dir, owner)
        settled.append(owner)
    # Leftover state dirs of owners not in the record (a crash between settling and recording).
    owners_root = data_dir / OWNERS_DIR
    if owners_root.is_dir():
        for entry in sorted(owners_root.iterdir()):
            if entry.name not in wanted and entry.name not in previous and _has_state(entry):
                raise ValueError(f"{entry} holds a journal of an owner this data dir has no record of; "
                                 "restart with the previous --workers to hand it over")
    write_owners(data_dir, wanted)
    return settled


def _forget_state(data_dir: Path, owner: str) -> None:
    """Remove an old owner's journal and checkpoint (the partition files now hold what they vouched for)."""
    directory = state_dir(data_dir, owner)
    if owner == SINGLE_NODE_OWNER:
        for _, path in list_journals(directory):
            path.unlink(missing_ok=True)
        (directory / CHECKPOINT_NAME).unlink(missing_ok=True)
        fsync_dir(directory)
    elif directory.exists():
        shutil.rmtree(directory)
        fsync_dir(directory.parent)


def settle_sync(data_dir: Path, owners: Mapping[str, Iterable[int]], open_log) -> list[str]:
    """`settle` from synchronous code (the supervisor, before any worker runs)."""
    return asyncio.run(settle(data_dir, owners, open_log))
