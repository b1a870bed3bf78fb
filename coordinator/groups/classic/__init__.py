"""Kafka's classic group protocol (JoinGroup/SyncGroup/Heartbeat/LeaveGroup) as a pure engine.

`engine` (the group, its states and transition table), `events` (what goes in and comes out), `member`
(a member and the membership), `rebalance` (why a group rebalances, what the journal learns), `timers`
(sessions, the join phase, the pending-sync wait).
"""
