"""Security settings with `--workers N` and cluster mode: what is refused at start-up with one line (listeners
whose per-worker ports meet, the worker link's reserved listener name), and what a plaintext worker
answers (the ACL APIs SECURITY_DISABLED without an authorizer; the SCRAM APIs, kept by worker 0).
"""
from __future__ import annotations

import pytest

from cohort_process import free_port, run_cohort
from server_harness import RawClient  # tests/coordinator is on the path (its conftest)
from workers_harness import WorkersServer

from cohort.protocol.errors import ErrorCode
from cohort.protocol.messages import (
    AlterUserScramCredentialsRequest, ApiVersionsRequest, CreateAclsRequest, DescribeAclsRequest,
    DescribeUserScramCredentialsRequest, SaslHandshakeRequest,
)

pytestmark = pytest.mark.timeout(120)


def assert_one_line_refusal(result, fragment: str) -> None:
    assert result.returncode != 0, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("cohort: error: ") and fragment in lines[0], lines[0]


@pytest.mark.parametrize("flags, fragment", [
    (["--workers", "2", "--listeners", "PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{next_port}"],
     "both need port"),
    (["--workers", "2", "--listeners", "COHORT_WORKER_LINK://127.0.0.1:{port}", "--listener.security.protocol.map",
      "COHORT_WORKER_LINK:PLAINTEXT"], "COHORT_WORKER_LINK is the name of the workers' own link"),
])
def test_serve_refuses_listener_setups_of_multi_process_modes_with_one_line(tmp_path, flags, fragment):
    port, port2 = free_port(), free_port()
    data = tmp_path / "data"
    args = [f.format(port=port, port2=port2, next_port=port + 1) for f in flags]
    result = run_cohort("serve", "--data-dir", str(data), "--metrics", f"127.0.0.1:{free_port()}", *args)
    assert_one_line_refusal(result, fragment)
    assert result.returncode == 2
    assert not data.exists()


def test_a_plaintext_worker_answers_acl_apis_security_disabled_and_offers_the_scram_apis(tmp_path):
    server = WorkersServer(tmp_path / "data", 2).start()
    try:
        for worker in range(2):
            client = RawClient(server.ports[worker])
            try:
                versions = client.request(ApiVersionsRequest(), 0)
                keys = {k.api_key for k in versions.api_keys}
                assert DescribeAclsRequest.API_KEY in keys and SaslHandshakeRequest.API_KEY in keys
                assert DescribeUserScramCredentialsRequest.API_KEY in keys
                assert AlterUserScramCredentialsRequest.API_KEY in keys
                created = client.request(CreateAclsRequest(creations=[CreateAclsRequest.AclCreation(
                    resource_type=3, resource_name="g", principal="User:x", host="*",
                    operation=3, permission_type=3)]), 3)
                assert [r.error_code for r in created.results] == [ErrorCode.SECURITY_DISABLED]
            finally:
                client.sock.close()
    finally:
        server.stop()
