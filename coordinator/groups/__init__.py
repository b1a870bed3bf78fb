"""Group engines and the runtime that hosts them.

`classic.py` is Kafka's classic group protocol as a pure engine (events in, effects out);
`effects.py` holds the event and effect types every engine shares, so a KIP-848 consumer-group
engine can sit beside the classic one with its own table; `runtime.py` is the asyncio side that
parks requests, runs timers and appends records on the engines' behalf.
"""
