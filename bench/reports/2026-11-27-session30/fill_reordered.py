"""fill_reordered.py COHORT_BIN DATA_DIR: the restart workload's fill (3 M records, 300 000 offsets), each pass committing every group's partitions in a new order (no batch repeats a key run). Run with PYTHONPATH=<checkout>."""
import asyncio, random, sys
from pathlib import Path
from bench.workloads.restart import layout, _Topic, _Partition, PARTITIONS_PER_TOPIC
from bench.closed_loop import run_closed_loop
from bench.targets import CohortServer
from bench.wire import KafkaSession, RequestTemplate, SEQUENCE_SENTINEL
from cohort.protocol.messages import OffsetCommitRequest
def req(group, topics, rnd):
    ts = list(range(topics)); rnd.shuffle(ts)
    out = []
    for t in ts:
        ps = list(range(PARTITIONS_PER_TOPIC)); rnd.shuffle(ps)
        out.append(_Topic(name=f"bench-t{t}", partitions=[_Partition(partition_index=p, committed_offset=SEQUENCE_SENTINEL, committed_metadata="") for p in ps]))
    return OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=out)
async def main(exe, data_dir, records=3_000_000, distinct=300_000):
    groups, topics = layout(distinct); passes = records // (groups*topics*10); rnd = random.Random(7)
    with CohortServer(data_dir=Path(data_dir), settings={"offsets.flush.policy": "never"}, executable=[exe]) as f:
        s = await KafkaSession.open(f.host, f.port); v = s.pick_version(OffsetCommitRequest.API_KEY, 2); await s.close()
        t = [RequestTemplate(req(f"bench-restart-{g}", topics, rnd), v) for _ in range(passes) for g in range(groups)]
        r = await run_closed_loop(f, t, connections=4, depth=4, duration_s=3600, max_ops=groups*passes)
        print(r.operations, r.errors)
asyncio.run(main(sys.argv[1], sys.argv[2]))
