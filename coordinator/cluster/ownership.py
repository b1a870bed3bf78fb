"""`EtcdOwnership`: which node coordinates which offsets partition, decided through etcd.

Theory of operation. Each node holds a lease (TTL `cluster.lease.ttl.ms`) and keeps `nodes/<id>`
under it. A partition p belongs to whoever created `owner/<p>` (a create-if-absent transaction, the
key under the creator's lease); the key's create revision is the ownership epoch that fences every
write (`EtcdStore`). The preferred owner of p is the live node with the highest rendezvous hash of
(p, node id), so a joining node takes about 1/N of the partitions and a leaving one spreads its share.

This node watches `nodes/` and `owner/` and reconciles on every change (and every TTL/4):
unowned and preferred here -> claim; owned here but another live node is preferred -> hand over
(stop serving, let in-flight writes finish, delete the key; the preferred node sees the delete and
claims); `owner/<p>` gone or re-created by someone else, a fenced write, or the lease lapsed -> lost.
An unowned partition whose preferred node does not claim it within one TTL is claimed by anyone.

Each partition's state is the node's one tracker (`cohort.coordinator.contracts.partition_lifecycle`),
the listener's `states`, which the ownership reads and moves with it: the ownership moves a partition
UNOWNED -> CLAIMING (the create-if-absent transaction) and back when the claim is lost; won, the
listener's `acquired` moves it on to LOADING, then LOADED or FAILED (its load retried), `lost` to
RELEASING and, once the store let it go, UNOWNED. The ownership follows those moves through the
tracker's watch: it publishes `load/<p>`, gives up a partition whose loads all failed (the listener let
it go while `owner/<p>` is still ours) and claims what was released. What it holds in etcd is its
epochs (the create revisions of its `owner/<p>` keys): a partition stops being this node's the moment
its epoch is forgotten (its key gone or taken, a fenced write, the lease's deadline passed), and the
listener is told at once. LOADING and LOADED are served.

After an etcd leader change the node moves its keys (`nodes/<id>`, and `owner/<p>` and `load/<p>`
of what it serves, each fenced by its epoch, so the epochs stay) to a lease granted in the new raft
term, and lets the old lease lapse: a deposed etcd leader that revokes the old one on resuming then
deletes nothing (`cohort.coordinator.cluster.lease` says why it may).

For `cohort cluster status` the owner also keeps `load/<p>` under its lease: the state's name,
"loading" from the claim (same transaction), "loaded", "releasing" while a handoff drains; fenced by
the epoch like every write, at most one small write per change.
"""
from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

from cohort.coordinator.cluster import keys
from cohort.coordinator.cluster.etcd import (
    ETCD_MAX_TXN_OPS,
    EtcdClient,
    EtcdUnavailable,
    KeyValue,
    compare_create_revision,
    compare_lease,
    compare_mod_revision,
    op_delete,
    op_put,
    op_range,
    prefix_end,
)
from cohort.coordinator.cluster.lease import NodeLease, SpareLease
from cohort.coordinator.contracts.ownership import Node, OwnershipListener
from cohort.coordinator.contracts.partition_lifecycle import PartitionLifecycle, PartitionStates

log = logging.getLogger("cohort.cluster")


L = PartitionLifecycle
SERVED = (L.LOADING, L.LOADED)  # this node answers for the partition (while its lease lives)
KEPT = (*SERVED, L.FAILED)  # owner/<p> is ours and the listener holds the partition (FAILED: its load retries)


def _published(state: PartitionLifecycle) -> bytes:
    """What `load/<p>` holds in `state`."""
    return state.value.encode()


def rendezvous_score(partition: int, node_id: int) -> int:
    digest = hashlib.blake2b(b"%d:%d" % (partition, node_id), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def preferred_owner(partition: int, node_ids: Iterable[int]) -> int | None:
    """Rendezvous (highest random weight) hashing: the live node that should own `partition`."""
    return max(node_ids, key=lambda n: (rendezvous_score(partition, n), n), default=None)


@dataclass(frozen=True, slots=True)
class OwnerEntry:
    node_id: int
    epoch: int  # create revision of owner/<p>
    lease: int


def parse_address(value: bytes) -> tuple[str, int] | None:
    """`nodes/<id>`'s first line: the node's first advertised address."""
    host, sep, port = value.decode(errors="replace").split("\n", 1)[0].rpartition(":")
    return (host, int(port)) if sep and port.isdigit() else None


def node_value(node: Node) -> bytes:
    """What `nodes/<id>` holds: the first advertised address, then "NAME=host:port" per listener."""
    return "\n".join([f"{node.host}:{node.port}", *(f"{name}={host}:{port}" for name, host, port in node.listeners)]
                     ).encode()


def parse_node(node_id: int, value: bytes) -> Node | None:
    address = parse_address(value)
    if address is None:
        return None
    listeners = []
    for line in value.decode(errors="replace").split("\n")[1:]:
        name, sep, rest = line.partition("=")
        host, colon, port = rest.rpartition(":")
        if sep and colon and port.isdigit():
            listeners.append((name, host, int(port)))
    return Node(node_id, *address, tuple(listeners))


@dataclass(slots=True)
class OwnershipStats:
    ownership_changes: int = 0
    claims: int = 0
    handoffs: int = 0
    losses: int = 0
    lease_moves: int = 0


class EtcdOwnership:
    def __init__(self, etcd: EtcdClient, local: Node, *, store=None, num_partitions: int = 50,
                 lease_ttl_ms: int = 6000) -> None:
        self.etcd = etcd
        self.local = local
        self.store = store  # an EtcdStore: tells us when a write was fenced, or its outcome stayed unknown
        self.num_partitions = num_partitions
        self.lease = NodeLease(etcd, lease_ttl_ms, on_deadline=self._lease_deadline_moved,
                               on_new_term=self._new_etcd_term)
        self.stats = OwnershipStats()
        self._nodes: dict[int, Node] = {}
        self._owners: dict[int, OwnerEntry] = {}
        self._states = PartitionStates()  # the listener's, from `start` on (every partition UNOWNED until then)
        self._epochs: dict[int, int] = {}  # partition -> epoch of the owner/<p> this node holds
        self._unowned_since: dict[int, float] = {}
        self._load_wanted: dict[int, tuple[int, bytes]] = {}  # partition -> (epoch, load state to publish)
        self._load_published: dict[int, tuple[int, bytes]] = {}
        self._claim_not_before: dict[int, float] = {}  # given up here: another node gets the first chance
        # Claimed though another node is preferred (it left the partition unowned for a TTL: it may have given
        # it up): handed to the preferred node only once loaded here.
        self._standing_in: set[int] = set()
        self._listener: OwnershipListener | None = None
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._stopping = False
        self._lease_move_wanted = False
        self._spare: SpareLease | None = None  # granted for a move that did not finish
        self._deadline_timer: asyncio.TimerHandle | None = None
        if store is not None:
            store.on_fenced = self._fenced
            store.on_stale = self._stale
            store.serving_until = lambda: self.lease.deadline

    # --- the Ownership interface ---------------------------------------------------------------

    def owner(self, partition: int) -> Node | None:
        """The node to send the partition's groups to. While nobody serves it (a handoff, a failover),
        the node that claims it next, its preferred live node, so clients wait there (for the claim and the
        load) instead of looking for a coordinator again and again."""
        if self._states[partition] in SERVED and self.lease.alive():
            return self.local
        me = self.local.node_id
        entry = self._owners.get(partition)
        if entry is not None and entry.node_id != me:
            return self._nodes.get(entry.node_id)
        live = (set(self._nodes) - {me}) | ({me} if self.lease.alive() else set())
        preferred = preferred_owner(partition, live)
        if preferred != me:
            return self._nodes.get(preferred)  # (a handoff from here: our key until its delete lands)
        return self.local if entry is None else None  # about to claim it; or our key, not served yet

    def nodes(self) -> list[Node]:
        return sorted(self._nodes.values(), key=lambda n: n.node_id)

    def owned(self) -> list[int]:
        return self._states.partitions(*SERVED)

    def partition_state(self, partition: int) -> PartitionLifecycle:
        """Where `partition` is in its lifecycle, as this node sees it."""
        return self._states[partition]

    async def start(self, listener: OwnershipListener) -> None:
        self._listener = listener
        self._states = listener.states  # the one tracker: its loads and releases move it too
        self._states.watch(self._tracked)
        listener.serve_until(0.0)  # nothing is served before the first lease
        await self.etcd.connect()
        await self.lease.grant()
        revision = await self._resync()
        self._tasks = [
            asyncio.create_task(self._watch(keys.NODES, revision), name="etcd-watch-nodes"),
            asyncio.create_task(self._watch(keys.OWNERS, revision), name="etcd-watch-owners"),
            asyncio.create_task(self._reconcile_loop(), name="etcd-reconcile"),
        ]
        await self._register()
        self.lease.start_keepalive()
        self._wake.set()

    async def stop(self) -> None:
        """Hand every partition over (no lease wait): lost, writes drained, then the lease revoked."""
        self._stopping = True
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
        for task in self._tasks:
            task.cancel()
        # grpc may turn a cancelled watch into an RPC error: the loops also stop on `_stopping`.
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5)
        self._tasks = []
        # Stop serving everything first, then let every partition's in-flight writes finish together.
        held = sorted(set(self._epochs).union(self._states.partitions(L.CLAIMING)))
        await asyncio.gather(*(self._let_go(p, "shutdown") for p in held))
        log.info("node %d: %d partitions handed over (shutdown)", self.local.node_id, len(held))
        # Revoking the lease deletes nodes/<id> and every owner/<p> under it in one step.
        await self.lease.revoke()
        await self._revoke_spare()
        # Left behind (etcd unreachable: not worth more of the shutdown), status shows this node as gone.
        with contextlib.suppress(EtcdUnavailable, asyncio.TimeoutError, TimeoutError):
            await asyncio.wait_for(self.etcd.txn([], [op_delete(keys.seen_key(self.local.node_id))]), 1.0)

    # --- etcd state ----------------------------------------------------------------------------

    async def _register(self) -> None:
        await self.etcd.txn([], [self._node_entry(self.lease.lease_id),
                                 op_put(keys.seen_key(self.local.node_id), f"{self.local.host}:{self.local.port}".encode())])

    def _node_entry(self, lease_id: int):
        """The put of `nodes/<id>` under `lease_id`."""
        return op_put(keys.node_key(self.local.node_id), node_value(self.local), lease=lease_id)

    async def _resync(self) -> int:
        """Read nodes/ and owner/ at one revision; the revision to watch from."""
        _, revision, responses = await self.etcd.txn([], [
            op_range(keys.NODES, range_end=prefix_end(keys.NODES)),
            op_range(keys.OWNERS, range_end=prefix_end(keys.OWNERS)),
        ])
        nodes_kvs = [KeyValue(kv.key, kv.value, kv.create_revision, kv.mod_revision, kv.lease)
                     for kv in responses[0].response_range.kvs]
        owner_kvs = [KeyValue(kv.key, kv.value, kv.create_revision, kv.mod_revision, kv.lease)
                     for kv in responses[1].response_range.kvs]
        self._nodes = {}
        self._owners = {}
        for kv in nodes_kvs:
            self._node_put(kv)
        for kv in owner_kvs:
            self._owner_put(kv)
        self._wake.set()
        return revision

    def _node_put(self, kv: KeyValue) -> None:
        node_id = keys.id_of(kv.key, keys.NODES)
        node = parse_node(node_id, kv.value) if node_id is not None else None
        if node is not None:
            self._nodes[node_id] = node

    def _owner_put(self, kv: KeyValue) -> None:
        partition = keys.id_of(kv.key, keys.OWNERS)
        if partition is not None and partition < self.num_partitions and kv.value.isdigit():
            self._owners[partition] = OwnerEntry(int(kv.value), kv.create_revision, kv.lease)
            self._unowned_since.pop(partition, None)

    async def _watch(self, prefix: bytes, revision: int) -> None:
        while not self._stopping:
            try:
                async for events in self.etcd.watch_prefix(prefix, revision + 1):
                    for kind, kv in events:
                        revision = max(revision, kv.mod_revision)
                        self._apply_event(prefix, kind, kv)
                    self._wake.set()
            except EtcdUnavailable as exc:
                if self._stopping:
                    return
                log.info("etcd watch of %s interrupted (%s); resynchronising", prefix.decode(), exc)
            await asyncio.sleep(0.2)
            with contextlib.suppress(EtcdUnavailable):
                revision = await self._resync()

    def _apply_event(self, prefix: bytes, kind: int, kv: KeyValue) -> None:
        deleted = kind == 1
        if prefix == keys.NODES:
            node_id = keys.id_of(kv.key, keys.NODES)
            if deleted:
                self._nodes.pop(node_id, None)
            else:
                self._node_put(kv)
            return
        partition = keys.id_of(kv.key, keys.OWNERS)
        if partition is None:
            return
        if deleted:
            self._owners.pop(partition, None)
        else:
            self._owner_put(kv)

    # --- reconciling ---------------------------------------------------------------------------

    async def _reconcile_loop(self) -> None:
        period = self.lease.ttl_ms / 1000 / 4
        while not self._stopping:
            with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                await asyncio.wait_for(self._wake.wait(), period)
            self._wake.clear()
            try:
                await self._reconcile()
            except EtcdUnavailable as exc:
                log.debug("reconcile postponed: %s", exc)
            except Exception:
                log.exception("reconcile failed")

    async def _reconcile(self) -> None:
        if self._stopping:
            return
        now = time.monotonic()
        me = self.local.node_id
        if not self.lease.alive():
            await self._rejoin()
            return
        if self._lease_move_wanted:
            await self._move_to_fresh_lease()
        live = set(self._nodes) | {me}
        for partition in range(self.num_partitions):
            state = self._states[partition]
            entry = self._owners.get(partition)
            if state in KEPT:
                if entry is None or entry.epoch != self._epochs.get(partition):
                    await self._let_go(partition, "owner key gone or taken")
                elif ((preferred := preferred_owner(partition, live)) != me and preferred in self._nodes
                      and (state is L.LOADED or partition not in self._standing_in)):
                    await self._hand_over(partition, preferred)
            elif partition in self._epochs:
                if state is L.RELEASING or state is L.UNOWNED:  # the listener let it go: its loads all failed
                    await self._give_up(partition)
            elif state is L.UNOWNED:
                if entry is not None:
                    if entry.node_id == me and entry.lease == self.lease.lease_id:
                        await self._adopt(partition, entry)
                    continue
                if now < self._claim_not_before.get(partition, 0.0):
                    continue
                since = self._unowned_since.setdefault(partition, now)
                if preferred_owner(partition, live) == me:
                    await self._claim(partition)
                elif now - since > self.lease.ttl_ms / 1000:
                    self._standing_in.add(partition)
                    await self._claim(partition)
        await self._publish_load_states()

    def _new_etcd_term(self) -> None:
        self._lease_move_wanted = True
        self._wake.set()

    async def _move_to_fresh_lease(self) -> None:
        """Put `nodes/<id>` and the served partitions' keys under a lease of the current raft term (the
        module docstring says why). Runs inside the reconcile, so no claim or handoff uses the lease
        meanwhile; a partition lost meanwhile fails its guard and is left to the reconcile.

        Every move compares the key's lease with the lease in force, so a move transaction of an earlier
        attempt that was held up on a stalled link and lands late moves nothing back under a lease this
        node no longer refreshes; a key found under the spare already was moved by such a transaction."""
        self._lease_move_wanted = False
        old = self.lease.lease_id
        spare = await self._spare_for_move()
        served = [(p, self._epochs[p]) for p in self._states.partitions(*KEPT) if p in self._epochs]
        load_states = {p: self._load_state(p, epoch) for p, epoch in served}
        me = str(self.local.node_id).encode()

        def move(batch: list[tuple[int, int]]) -> tuple[list, list, list]:
            return ([guard for p, epoch in batch for guard in (compare_create_revision(keys.owner_key(p), epoch),
                                                               compare_lease(keys.owner_key(p), old))],
                    [op for p, epoch in batch for op in (
                        op_put(keys.owner_key(p), me, lease=spare.lease_id),
                        op_put(keys.load_key(p), load_states[p][1], lease=spare.lease_id))],
                    [op_range(keys.owner_key(p)) for p, _ in batch])

        def moved_already(responses: list, epoch: int) -> bool:
            kvs = responses[0].response_range.kvs
            return bool(kvs) and kvs[0].create_revision == epoch and kvs[0].lease == spare.lease_id
        moved = []
        try:
            if not await self._move_node_entry(old, spare):
                self._lease_move_wanted = True
                return
            per_txn = ETCD_MAX_TXN_OPS // 2
            for i in range(0, len(served), per_txn):
                batch = served[i:i + per_txn]
                held, _, _ = await self.etcd.txn(*move(batch))
                if held:
                    moved += batch
                    continue
                for one in batch:  # some partition moved meanwhile: the others one by one
                    held, _, responses = await self.etcd.txn(*move([one]))
                    if held or moved_already(responses, one[1]):
                        moved.append(one)
        except EtcdUnavailable:
            self._lease_move_wanted = True  # again at the next reconcile, with the same spare lease
            raise
        self._spare = None
        self.lease.use(spare)
        for p, epoch in moved:
            if self._epochs.get(p) == epoch:  # (not lost while the keys moved)
                self._owners[p] = OwnerEntry(self.local.node_id, epoch, spare.lease_id)
                self._load_published[p] = load_states[p]
        self.stats.lease_moves += 1
        log.info("node %d: etcd raft term %d: %d partitions moved from lease %x to lease %x", self.local.node_id,
                 spare.term, len(moved), old, spare.lease_id)

    async def _spare_for_move(self) -> SpareLease:
        """The lease a move puts keys under: the spare of an unfinished move, refreshed when half its TTL
        is gone (never given up while it lives: a held move transaction may still land under it), else
        a new one."""
        spare = self._spare
        if spare is not None and spare.deadline - time.monotonic() < self.lease.ttl_ms / 1000 / 2:
            spare = await self.lease.refresh_spare(spare)
        if spare is None:
            spare = await self.lease.grant_spare()
        self._spare = spare
        return spare

    async def _move_node_entry(self, old: int, spare: SpareLease) -> bool:
        """Put `nodes/<id>` under `spare` if it is under the lease in force; False when it changed under us."""
        key = keys.node_key(self.local.node_id)
        held, _, responses = await self.etcd.txn([compare_lease(key, old)], [self._node_entry(spare.lease_id)],
                                                 [op_range(key)])
        if held:
            return True
        kvs = responses[0].response_range.kvs
        if kvs and kvs[0].lease == spare.lease_id:
            return True  # an earlier attempt's transaction landed
        # gone (the lease in force was revoked under us) or under another lease: put it, unless it changes
        held, _, _ = await self.etcd.txn([compare_mod_revision(key, kvs[0].mod_revision if kvs else 0)],
                                         [self._node_entry(spare.lease_id)])
        return held

    async def _revoke_spare(self) -> None:
        """Give a spare lease this node no longer needs back to etcd (with whatever a late move put under it)."""
        spare, self._spare = self._spare, None
        if spare is not None:
            with contextlib.suppress(EtcdUnavailable):
                await self.etcd.revoke(spare.lease_id)

    def _load_state(self, partition: int, epoch: int) -> tuple[int, bytes]:
        """The `load/<p>` value to keep under a moved lease: the one published, else the one wanted."""
        published = self._load_published.get(partition)
        if published is not None and published[0] == epoch:
            return published
        return self._load_wanted.get(partition, (epoch, _published(self._states[partition])))

    def _move(self, partition: int, to: PartitionLifecycle) -> None:
        """Move the tracker along the lifecycle's table (IllegalPartitionTransition off it)."""
        self._states.move(partition, to)

    async def _claim(self, partition: int) -> None:
        self._move(partition, L.CLAIMING)
        key = keys.owner_key(partition)
        try:
            won, revision, _ = await self.etcd.txn(
                [compare_create_revision(key, 0)],
                [op_put(key, str(self.local.node_id).encode(), lease=self.lease.lease_id),
                 op_put(keys.load_key(partition), _published(L.LOADING), lease=self.lease.lease_id)])
        except EtcdUnavailable:
            self._unclaimed(partition)
            raise
        if not won or self._stopping:
            self._unclaimed(partition)
            return
        self._owners[partition] = OwnerEntry(self.local.node_id, revision, self.lease.lease_id)
        self._load_wanted[partition] = self._load_published[partition] = (revision, _published(L.LOADING))
        self._acquired(partition, revision)
        self.stats.claims += 1

    def _unclaimed(self, partition: int) -> None:
        if self._states[partition] is L.CLAIMING:  # (not if the node closed meanwhile)
            self._move(partition, L.UNOWNED)
        self._standing_in.discard(partition)

    async def _adopt(self, partition: int, entry: OwnerEntry) -> None:
        """Our key under our live lease (we dropped it while etcd was unreachable): serve it again."""
        self._move(partition, L.CLAIMING)
        self._load_wanted[partition] = (entry.epoch, _published(L.LOADING))
        self._acquired(partition, entry.epoch)

    def _acquired(self, partition: int, epoch: int) -> None:
        """Won: the listener moves it on to LOADING and loads it."""
        self._epochs[partition] = epoch
        self.stats.ownership_changes += 1
        log.info("partition %d: owned here (epoch %d)", partition, epoch)
        self._listener.acquired(partition, epoch)

    async def _hand_over(self, partition: int, preferred: int) -> None:
        epoch = self._epochs[partition]
        self._listener.lost(partition)  # RELEASING: no more answers here, its store's appends drain
        key = keys.owner_key(partition)
        with contextlib.suppress(EtcdUnavailable):  # only what status shows; the delete below decides
            await self.etcd.txn([compare_create_revision(key, epoch)],
                                [op_put(keys.load_key(partition), _published(L.RELEASING), lease=self.lease.lease_id)])
        await self._listener.released(partition)
        if self._epochs.get(partition) != epoch:
            return  # let go meanwhile (the lease's deadline passed): the key goes with the lease
        self._forget(partition)
        try:
            await self.etcd.txn([compare_create_revision(key, epoch)],
                                [op_delete(key), op_delete(keys.load_key(partition))])
        except EtcdUnavailable:
            return  # the key stays ours: the next reconcile adopts it and tries again
        self._drop_entry(partition, epoch)
        self.stats.handoffs += 1
        log.info("partition %d: handed over to node %d", partition, preferred)

    def _tracked(self, partition: int, old: PartitionLifecycle, new: PartitionLifecycle) -> None:
        """The tracker moved: what `load/<p>` shows follows a partition this node holds (loaded, failed,
        loading again), and the reconcile runs (a partition let go is claimed, or given up)."""
        epoch = self._epochs.get(partition)
        if epoch is not None and new in KEPT:
            self._load_wanted[partition] = (epoch, _published(new))
        self._wake.set()

    async def _give_up(self, partition: int) -> None:
        """A partition whose loads all failed, let go by the listener: delete owner/<p> so that another node
        takes it; this one claims it again only after the others had a lease TTL to."""
        epoch = self._epochs[partition]
        await self._listener.released(partition)
        if self._epochs.get(partition) != epoch:
            return  # let go meanwhile (the lease's deadline passed): the key goes with the lease
        self._forget(partition)
        self._claim_not_before[partition] = time.monotonic() + 2 * self.lease.ttl_ms / 1000
        key = keys.owner_key(partition)
        try:
            await self.etcd.txn([compare_create_revision(key, epoch)],
                                [op_delete(key), op_delete(keys.load_key(partition))])
        except EtcdUnavailable:
            return  # the key stays ours: the next reconcile adopts it and loads it again
        self._drop_entry(partition, epoch)
        self.stats.losses += 1
        log.warning("partition %d: given up after its loads failed; another node may take it", partition)

    async def _let_go(self, partition: int, why: str) -> None:
        """Stop serving `partition` (lost, or shutdown); its key, if still ours, goes with the lease."""
        if self._states[partition] is L.CLAIMING:
            self._unclaimed(partition)
        if partition not in self._epochs:
            return
        self._forget(partition)
        if why != "shutdown":
            self.stats.losses += 1
            log.info("partition %d: no longer owned here (%s)", partition, why)
        self._listener.lost(partition)
        await self._listener.released(partition)

    def _forget(self, partition: int) -> None:
        """No longer this node's in etcd (the listener is told by the caller, if it holds the partition)."""
        self._standing_in.discard(partition)
        self._epochs.pop(partition, None)
        self._load_wanted.pop(partition, None)
        self._load_published.pop(partition, None)
        self.stats.ownership_changes += 1

    def _drop_entry(self, partition: int, epoch: int) -> None:
        """Forget our own `owner/<p>` entry before the watch reports its end (so it is not adopted)."""
        entry = self._owners.get(partition)
        if entry is not None and entry.epoch == epoch:
            del self._owners[partition]

    def _fenced(self, partition: int) -> None:
        """A write for `partition` was refused by its guard: another node owns it."""
        if partition in self._epochs and self._states[partition] in KEPT:
            self._drop_entry(partition, self._epochs[partition])
            self._forget(partition)
            self.stats.losses += 1
            self._listener.lost(partition)
        self._wake.set()

    async def _publish_load_states(self) -> None:
        """Write the load states that changed since last published, each fenced by its epoch."""
        changed = {p: wanted for p, wanted in self._load_wanted.items()
                   if self._load_published.get(p) != wanted and self._states[p] in KEPT}
        guards = {p: compare_create_revision(keys.owner_key(p), epoch) for p, (epoch, _) in changed.items()}
        puts = {p: op_put(keys.load_key(p), state, lease=self.lease.lease_id) for p, (_, state) in changed.items()}
        batches = [list(changed)[i:i + ETCD_MAX_TXN_OPS // 2] for i in range(0, len(changed), ETCD_MAX_TXN_OPS // 2)]
        for batch in batches:
            held, _, _ = await self.etcd.txn([guards[p] for p in batch], [puts[p] for p in batch])
            if not held:  # some partition moved meanwhile: the others one by one
                for p in batch:
                    await self.etcd.txn([guards[p]], [puts[p]])
            for p in batch:
                if self._load_wanted.get(p) == changed[p]:
                    self._load_published[p] = changed[p]

    def _lease_deadline_moved(self, deadline: float) -> None:
        """Every request is checked against the new deadline; the moment it passes, everything goes."""
        if self._listener is not None:
            self._listener.serve_until(deadline)
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
        loop = asyncio.get_running_loop()
        # loop.time() is time.monotonic(): the deadline is on the loop's clock
        self._deadline_timer = loop.call_at(deadline, self._lease_deadline_passed)

    def _lease_deadline_passed(self) -> None:
        """The lease may have lapsed: stop serving every partition at once, before any await (a
        release lets in-flight writes finish in the background; fenced writes fail by themselves)."""
        self._deadline_timer = None
        if self.lease.alive() or self._stopping:
            return
        held = sorted(self._epochs)
        for partition in held:
            # (a handoff or a give-up told the listener already; a closed node's listener still releases it)
            served = self._states[partition] in KEPT or self._states[partition] is L.CLOSED
            self._forget(partition)
            if served:
                self.stats.losses += 1
                self._listener.lost(partition)
        if held:
            log.warning("node %d: lease deadline passed without an answered keepalive: %d partitions no "
                        "longer served here", self.local.node_id, len(held))
        self._wake.set()

    def _stale(self, partition: int) -> None:
        """The store gave `partition` up (a write's outcome stayed unknown, or its write fence moved):
        stop serving it now; while `owner/<p>` is still ours the next reconcile adopts and loads it again."""
        if partition in self._epochs and self._states[partition] in KEPT:
            self._forget(partition)
            self._listener.lost(partition)
        self._wake.set()

    async def _rejoin(self) -> None:
        """The lease lapsed (or may have): drop everything; with a new lease, register again."""
        for partition in sorted(self._epochs):
            await self._let_go(partition, "lease lapsed")
        if self.lease.lease_id:
            return  # unknown yet: etcd unreachable; keepalive tells when the lease is confirmed alive
        self._lease_move_wanted = False
        await self._revoke_spare()  # a move's keys go with what they held
        await self.lease.grant()
        await self._register()
        log.info("node %d registered again with a new lease", self.local.node_id)
