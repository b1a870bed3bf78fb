"""Groups and committed offsets: what the group coordinator knows, by concern.

* `classic/` and `consumer/`: the group engines (Kafka's classic protocol and KIP-848 consumer groups), pure:
  events in, effects out, every legal transition one table at the top of its engine;
* `offsets/`: the committed offsets in memory and the offset APIs;
* `runtime/`: the asyncio side: the partition runtime (load, replay, writes answered once durable) and the
  host that feeds the engines events and executes their effects;
* `reports/`: what operators read (the journal, offset history, health, lag, the console's group list);
* `shard.py`: one offsets partition's groups and offsets (Kafka's shard), made and dropped by the partition
  runtime; `shard_views.py` takes a group id to its partition's shard;
* `coordinator.py` composes them (Kafka's group coordinator service), `group_manager.py` serves the group
  APIs, `effects.py` is what every engine takes in and gives back, `responses.py` shapes answers per
  api_version.
"""
