"""The asyncio side of the coordinator: `partition` (each offsets partition's load, replay, release and
writes), `group_runtime` (the host that feeds the engines events and executes their effects) and
`scheduler` (the clocks and timers the engines are told)."""
