"""Connection-layer overhead: 8 pipelined Heartbeat frames per data_received, trivial handler, fake transport.

    python connection_overhead.py main   # with a venv of the current core (cohort.coordinator.connection)
    python connection_overhead.py base   # with a venv of the pre-redesign core (cohort.coordinator.server)

Prints process CPU time per request, three times (see report.md beside this file).
"""
import asyncio, sys, time, types
from cohort.protocol.framing import encode_request
from cohort.protocol.messages import HeartbeatRequest, HeartbeatResponse
from cohort.coordinator.metrics import CoordinatorMetrics
which = sys.argv[1]

class T:
    def __init__(self): self.n = 0
    def write(self, b): self.n += 1
    def get_extra_info(self, k, d=None): return ("127.0.0.1", 1) if k == "peername" else None
    def pause_reading(self): pass
    def resume_reading(self): pass
    def close(self): pass

RESP = HeartbeatResponse(throttle_time_ms=0, error_code=0)
def handler(req, version, ctx): return RESP

async def main():
    cfg = types.SimpleNamespace(socket_request_max_bytes=100 << 20, queued_max_requests_per_connection=1000,
                                connections_max_reauth_ms=0, connection_failed_authentication_delay_ms=100)
    try:
        metrics = CoordinatorMetrics()
    except TypeError:
        metrics = None
    frame = encode_request(HeartbeatRequest(group_id="bench-group-1", generation_id=1, member_id="m-1", group_instance_id=None), 4, 7, "bench")
    data = frame * 8
    if which == "main":
        from cohort.coordinator.connection import Connection, RebalancePacer, RequestBytesBudget
        from cohort.coordinator.handlers import Route
        srv = types.SimpleNamespace(handlers=types.SimpleNamespace(routes={12: Route(handler, False)}), metrics=metrics,
              request_budget=RequestBytesBudget(100 << 20), rebalance_pacer=RebalancePacer(), config=cfg, security=None,
              admit=lambda c: True, forget=lambda c, r: None, state="ready", handler_started=lambda t: None,
              handler_ended=lambda t: None, oauthbearer=None, hurry_appends=lambda: None)
        conn = Connection(srv)
    else:
        from cohort.coordinator.server import _Connection
        srv = types.SimpleNamespace(handlers=types.SimpleNamespace(routes={12: (handler, False)}), metrics=metrics, config=cfg, _admit=lambda c: True,
              _forget=lambda c, r: None, state="ready", _hold_request_bytes=lambda c, n: True,
              _release_request_bytes=lambda c: None, _waiting_for_budget=[], _inflight=set(), _handler_ended=lambda t: None)
        conn = _Connection(srv)
        # base routes: look up what it expects
    t = T()
    conn.connection_made(t)
    for rep in range(3):
        N = 20000
        t0 = time.process_time()
        for i in range(N):
            conn.data_received(data)
            await asyncio.sleep(0)  # let deferred writes run
        dt = time.process_time() - t0
        print(which, f"{dt / (N * 8) * 1e6:.3f} us/request", "writes", t.n)
import uvloop; uvloop.install()
asyncio.run(main())
