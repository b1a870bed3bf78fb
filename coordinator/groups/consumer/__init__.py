"""KIP-848 consumer groups (ConsumerGroupHeartbeat) as a pure engine.

`engine` (the group, its epochs and transition table), `events`, `heartbeat` (checks before any state is
read), `member`, `assignment` (target and current assignment builders), `topics` (subscriptions over the
topic image), `classic_members` (classic members inside a consumer group), `migration` (online upgrade of
a classic group), `journal` (what the operator journal learns), `assignors/` (server-side assignors).
"""
