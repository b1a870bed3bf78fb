"""The checks every smoke result must pass: well-formed, zero errors, no timing assertions."""
from __future__ import annotations

import json

from bench.stats import Result


def assert_well_formed(result: Result, *, closed_loop: bool = True, server=None) -> None:
    """What every result promises: counts, a sane latency summary, usage probes, provenance, no errors
    (`server`, a target the suite started: its log's end goes into the message when some request failed)."""
    assert result.errors == {}, (f"{result.workload}/{result.variant} on {result.target}: {result.errors} "
                                 f"{result.extra.get('error_examples', '')}{_log_end(server)}")
    assert result.operations > 0
    assert result.duration_s > 0 and result.throughput_per_s > 0
    json.dumps(result.to_dict())  # serialisable as the report expects
    assert result.target_info["command"] and result.target_info["version"]
    if closed_loop:
        lat = result.latency_ms
        assert lat["count"] == result.operations
        assert 0 < lat["p50"] <= lat["p99"] <= lat["p999"] <= lat["max"]
        cdf = lat["cdf"]
        assert cdf[-1][0] == 1.0
        assert all(a[0] <= b[0] and a[1] <= b[1] for a, b in zip(cdf, cdf[1:]))
        assert result.generator["cpu_seconds"] is not None
        assert result.server["cpu_seconds"] is not None and result.server["rss_peak_bytes"] > 0


def _log_end(server, size: int = 4000) -> str:
    path = getattr(server, "log_path", None)
    if path is None or not path.exists():
        return ""
    return "\nthe server's log ends:\n" + path.read_text(errors="replace")[-size:]
