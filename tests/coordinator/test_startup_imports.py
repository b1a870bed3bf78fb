"""What a plain `cohort serve` imports: start-up time is part of how fast a restarted node serves again."""
from __future__ import annotations

from cohort_process import CohortServer, clean_env

# Imported only when a node needs them: SCRAM (scramp pulls in asn1crypto, ~13 ms).
NOT_FOR_A_PLAIN_NODE = ("scramp", "asn1crypto")


def test_a_plain_node_serves_without_importing_what_only_scram_needs(tmp_path):
    server = CohortServer(tmp_path / "data", env=clean_env(PYTHONPROFILEIMPORTTIME="1")).start()
    assert server.stop() == 0
    imported = {line.rsplit("|", 1)[1].strip() for line in server.stderr().splitlines()
                if line.startswith("import time:") and "|" in line}
    assert {"cohort.coordinator.server.node", "cohort.coordinator.security.sasl"} <= imported  # the list is complete
    assert sorted(m for m in imported if m.split(".")[0] in NOT_FOR_A_PLAIN_NODE) == []
