"""The offsets log: Kafka's ``__consumer_offsets`` idea as a local storage engine.

Storage knows keys and records, not groups: a record is ``(key: bytes,
value: bytes | None)`` (None = tombstone; keys and values are never empty),
and compaction keeps the latest value per key.  What the bytes mean is `cohort.coordinator.records.types`' business; which
partition a group's records go to is the caller's
(`cohort.protocol.partitioning.partition_for`).

Using it as the coordinator's `cohort.coordinator.contracts.store.Store` (one partition at a time)::

    log = OffsetsLog(data_dir, num_partitions=50, flush_policy="always", partitions=())
    await log.open()                           # this instance's journal, fsync helpers, cleaner
    async for chunk in log.load(p, epoch):     # lock p's directory, recover p, its live records
        replay(chunk)
    last_offset = await log.append(p, [(key, value), ...])   # durable on return
    await log.release(p)                       # p's appends finish, p marked and unlocked
    await log.close()

or all at once (tools, tests): ``OffsetsLog(data_dir)`` then ``await log.open(on_partition_loaded)``
loads every partition (or those given as ``partitions``).

Several instances, in several processes, may share one data dir, each owning some partitions
(`cohort serve --workers N`): a partition directory has one owner at a time (an exclusive lock
in it), each instance writes its own journals, and each partition's checkpoint mark lives in
its own directory and names the journals that continue it, so the layout never depends on the
split and a partition's next owner replays it from whichever instance journaled it
(`cohort.coordinator.log.journal`).

Replay contract: ``on_partition_loaded(partition, records)`` is called on the
event loop once per partition (`load` yields the same records in chunks), with ``records`` = a list of ``(key, value)``:
the latest value of every key whose latest value is not a tombstone, each key
once, in no particular order.  That is exactly the state a sequential replay
would build, because every record type is keyed by what it replaces (Kafka's
own loader does the same).  The dedup happens on raw bytes before anything is
decoded, newest segment first, so a record whose key was rewritten later is
never even cut out of its batch.  Decode the survivors with
`cohort.coordinator.records.types.decode_for_load(records)`: it yields offset commits as
column-wise `OffsetCommitRun`s (store them with `OffsetsTable.put_run`, no
per-record Python) and every other record as a typed record;
`decode_records` is the simple per-record alternative.  Until its callback
has returned (its last chunk was taken) a partition is LOADING (answer COORDINATOR_LOAD_IN_PROGRESS),
then LOADED, or FAILED on damage (see `LogLoadError`); RELEASING while `release` lets its accepted
appends finish, UNOWNED before it is loaded and after. These are the shared partition lifecycle's
states (`cohort.coordinator.contracts.partition_lifecycle`), kept in `states`: the node's one tracker,
which the partition runtime and the ownership read and move too (the runtime takes the store's).

Durability: `append` returns the offset of its last record once the batch is
on disk per the flush policy ("always": fsynced; "<ms>": written, fsynced
within that interval; "never": written).  Appends that arrive while a write is
in flight share the next write and fsync (group commit).  The fsync is of one
file, the commit journal, whatever partitions the round wrote; checkpoints
make the partition files durable on their own (`cohort.coordinator.log.journal`).  A failed write
raises `StorageError` (``error_code`` = the Kafka error to map) and leaves
nothing behind; the next append tries again.

Modules, one job each: `recovery` (a partition back to its checkpoint mark plus its journaled
batches), `commit_rounds` (appends, group commit, fsync rounds), `checkpoints` (journal switches,
marks, rolls, compaction), `journal` (the journal and mark formats), `segments`, `batch`,
`compaction`, `partition_lock`, `fsync_process`; `offsets_log` is the facade.

Tools and readers: `list_segments(data_dir)`, `read_segment(path)` and
`read_partition(data_dir, p)` read segment files without the server's
cooperation (safe while it runs; a torn or in-progress tail is skipped;
`read_partition` also copes with a concurrent compaction); `cohort log
dump|verify|compact` is built on them (`cohort.coordinator.cli.log`).
"""
from cohort.coordinator.log.compaction import CompactionResult, compact_closed_segments
from cohort.coordinator.log.offsets_log import OffsetsLog
from cohort.coordinator.log.state import FlushPolicy
from cohort.coordinator.log.segments import (
    CorruptLogError,
    list_partitions,
    list_segments,
    read_partition,
    read_segment,
)

__all__ = [
    "OffsetsLog",
    "CorruptLogError",
    "FlushPolicy",
    "CompactionResult",
    "compact_closed_segments",
    "list_segments",
    "list_partitions",
    "read_segment",
    "read_partition",
]
