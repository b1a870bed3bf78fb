"""Settings: Kafka names and defaults, precedence flag > env > file > default, clear refusals."""
from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cohort.coordinator.config import SETTINGS, ConfigError, CoordinatorConfig, HostPort, parse_host_port
from cohort.coordinator.config_sources import SourceKind, add_config_arguments, config_from_args, resolve_config

CONTRACT_DEFAULTS = {
    "listeners": "127.0.0.1:9092",
    "advertised_listeners": None,
    "data_dir": Path("./data"),
    "node_id": 0,
    "group_min_session_timeout_ms": 6000,
    "group_max_session_timeout_ms": 1800000,
    "group_initial_rebalance_delay_ms": 3000,
    "group_max_size": 2147483647,
    "group_new_member_join_timeout_ms": 300000,
    "group_consumer_session_timeout_ms": 45000,
    "group_consumer_min_session_timeout_ms": 45000,
    "group_consumer_max_session_timeout_ms": 60000,
    "group_consumer_heartbeat_interval_ms": 5000,
    "group_consumer_min_heartbeat_interval_ms": 5000,
    "group_consumer_max_heartbeat_interval_ms": 15000,
    "group_consumer_max_size": 2147483647,
    "group_consumer_assignment_interval_ms": 1000,
    "group_consumer_assignors": "uniform,range",
    "group_consumer_migration_policy": "bidirectional",
    "offset_metadata_max_bytes": 4096,
    "offsets_retention_minutes": 10080,
    "offsets_retention_check_interval_ms": 600000,
    "offsets_topic_num_partitions": 50,
    "offsets_topic_segment_bytes": 104857600,
    "offsets_commit_timeout_ms": 5000,
    "offsets_flush_policy": "always",
    "delete_retention_ms": 86400000,
    "log_cleaner_backoff_ms": 15000,
    "auto_create_topics_enable": True,
    "num_partitions": 1,
    "fetch_max_wait_cap_ms": 500,
    "socket_request_max_bytes": 104857600,
    "max_connections": 10000,
    "queued_max_requests_per_connection": 500,
    "connections_max_idle_ms": 600000,
    "metrics_listen": "127.0.0.1:9464",
    "log_format": "text",
    "log_level": "INFO",
}


def test_defaults_are_the_documented_kafka_defaults():
    config = CoordinatorConfig()
    for attr, expected in CONTRACT_DEFAULTS.items():
        assert getattr(config, attr) == expected, attr


def test_every_setting_has_a_kafka_style_name_env_var_and_doc():
    for spec in SETTINGS:
        assert spec.name == spec.attr.replace("_", ".")
        assert spec.env_var == "COHORT_" + spec.name.upper().replace(".", "_")
        assert spec.doc


def test_keyword_overrides_are_checked_and_normalised(tmp_path):
    config = CoordinatorConfig(group_initial_rebalance_delay_ms=0, data_dir=str(tmp_path), log_level="warn")
    assert config.group_initial_rebalance_delay_ms == 0
    assert config.data_dir == tmp_path
    assert config.log_level == "WARNING"


def test_config_is_immutable():
    config = CoordinatorConfig()
    with pytest.raises(AttributeError):
        config.node_id = 3  # type: ignore[misc]


def test_derived_addresses():
    config = CoordinatorConfig(listeners="PLAINTEXT://0.0.0.0:19092", advertised_listeners="broker.example:9092")
    assert config.listeners == "0.0.0.0:19092"
    assert config.listen_address == HostPort("0.0.0.0", 19092)
    assert config.advertised_address == HostPort("broker.example", 9092)
    assert CoordinatorConfig().advertised_address == HostPort("127.0.0.1", 9092)
    assert CoordinatorConfig(listeners="[::1]:0").listen_address == HostPort("::1", 0)


@pytest.mark.parametrize(
    "policy, interval", [("always", 0), ("never", None), ("250", 250), (" Never ", None)]
)
def test_flush_policy_forms(policy, interval):
    assert CoordinatorConfig(offsets_flush_policy=policy).offsets_flush_interval_ms == interval


def test_precedence_flag_over_env_over_file_over_default(tmp_path):
    config_file = tmp_path / "cohort.toml"
    config_file.write_text(
        'group.initial.rebalance.delay.ms = 100\n'
        '"offsets.retention.minutes" = 60\n'
        'node.id = 7\n'
        '[offsets.topic]\nnum.partitions = 10\n'
    )
    env = {"COHORT_OFFSETS_RETENTION_MINUTES": "120", "COHORT_NODE_ID": "8", "PATH": "/bin"}
    flags = {"node.id": ("9", "--node-id")}
    effective = resolve_config(flags, env, config_file)
    config, sources = effective.config, effective.sources

    assert config.group_initial_rebalance_delay_ms == 100
    assert sources["group.initial.rebalance.delay.ms"].kind is SourceKind.FILE
    assert config.offsets_topic_num_partitions == 10
    assert config.offsets_retention_minutes == 120
    assert str(sources["offsets.retention.minutes"]) == "env COHORT_OFFSETS_RETENTION_MINUTES"
    assert config.node_id == 9
    assert str(sources["node.id"]) == "flag --node-id"
    assert config.group_max_size == 2147483647
    assert sources["group.max.size"].kind is SourceKind.DEFAULT


def test_config_file_can_come_from_the_environment(tmp_path):
    config_file = tmp_path / "c.toml"
    config_file.write_text("num.partitions = 3\n")
    effective = resolve_config({}, {"COHORT_CONFIG": str(config_file)})
    assert effective.config.num_partitions == 3
    assert effective.config_file == config_file


def test_argparse_flags_and_short_aliases_record_their_spelling(tmp_path):
    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    args = parser.parse_args(
        ["--listen", "127.0.0.1:0", "--group.initial.rebalance.delay.ms", "0", "--data-dir", str(tmp_path),
         "--auto.create.topics.enable", "false"]
    )
    effective = config_from_args(args, environ={})
    assert effective.config.listeners == "127.0.0.1:0"
    assert effective.config.group_initial_rebalance_delay_ms == 0
    assert effective.config.data_dir == tmp_path
    assert effective.config.auto_create_topics_enable is False
    assert str(effective.sources["listeners"]) == "flag --listen"
    assert str(effective.sources["group.initial.rebalance.delay.ms"]) == "flag --group.initial.rebalance.delay.ms"


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        ({"group_min_session_timeout_ms": -1}, "group.min.session.timeout.ms"),
        ({"group_min_session_timeout_ms": 10, "group_max_session_timeout_ms": 5}, "above group.max.session.timeout.ms"),
        ({"listeners": "localhost"}, "listeners"),
        ({"listeners": "localhost:70000"}, "port must be"),
        ({"listeners": "SSL://localhost:9093"}, "ssl.keystore.location must be set"),
        ({"listeners": "PLAINTEXT://localhost:1,PLAINTEXT://localhost:2"}, "appears more than once"),
        ({"listeners": "PLAINTEXT://localhost:1,SASL_PLAINTEXT://localhost:1"}, "port 1 is used by two listeners"),
        ({"listeners": "INTERNAL://localhost:1"}, "no entry in listener.security.protocol.map"),
        ({"listener_security_protocol_map": "A:KERBEROS"}, "listener.security.protocol.map"),
        ({"advertised_listeners": "SSL://h:1"}, "listener SSL is not in listeners"),
        ({"sasl_enabled_mechanisms": "GSSAPI"}, "sasl.enabled.mechanisms"),
        ({"listeners": "SASL_PLAINTEXT://localhost:1", "sasl_enabled_mechanisms": ""}, "sasl.enabled.mechanisms"),
        ({"authorizer_class_name": "com.example.Mine"}, "authorizer.class.name"),
        ({"ssl_client_auth": "maybe"}, "ssl.client.auth"),
        ({"listeners": "SSL://localhost:1", "ssl_keystore_location": "k.pem", "ssl_client_auth": "required"},
         "ssl.truststore.location must be set"),
        ({"advertised_listeners": "host:0"}, "advertised.listeners"),
        ({"listeners": "0.0.0.0:9092"}, "advertised.listeners must be set"),
        ({"offsets_flush_policy": "sometimes"}, "offsets.flush.policy"),
        ({"offsets_flush_policy": "0"}, "offsets.flush.policy"),
        ({"log_format": "xml"}, "log.format"),
        ({"num_partitions": 0}, "num.partitions"),
        ({"auto_create_topics_enable": "maybe"}, "auto.create.topics.enable"),
        ({"node_id": True}, "node.id"),
        ({"socket_request_max_bytes": 2**31}, "socket.request.max.bytes"),
        ({"workers": 2, "listeners": "PLAINTEXT://localhost:1,SASL_PLAINTEXT://localhost:2"},
         "listeners PLAINTEXT and SASL_PLAINTEXT both need port 2"),
        ({"workers": 2, "listeners": "COHORT_WORKER_LINK://localhost:1",
          "listener_security_protocol_map": "COHORT_WORKER_LINK:PLAINTEXT"},
         "COHORT_WORKER_LINK is the name of the workers' own link"),
        ({"group_consumer_session_timeout_ms": 3000},
         "invalid group.consumer.session.timeout.ms: 3000 is outside [group.consumer.min.session.timeout.ms 45000"),
        ({"group_consumer_min_heartbeat_interval_ms": 20000},
         "invalid group.consumer.min.heartbeat.interval.ms: 20000 is above group.consumer.max.heartbeat.interval.ms"),
        ({"group_consumer_heartbeat_interval_ms": 15000, "group_consumer_session_timeout_ms": 15000,
          "group_consumer_min_session_timeout_ms": 1000},
         "group.consumer.heartbeat.interval.ms: 15000 must be below group.consumer.session.timeout.ms (15000)"),
        ({"group_consumer_assignors": "uniform,sticky"}, "invalid group.consumer.assignors: 'sticky' must be one of"),
        ({"group_consumer_migration_policy": "sideways"}, "invalid group.consumer.migration.policy"),
    ],
)
def test_invalid_values_are_refused_with_one_line_naming_the_setting(overrides, fragment):
    with pytest.raises(ConfigError) as info:
        CoordinatorConfig(**overrides)
    message = str(info.value)
    assert fragment in message
    assert "\n" not in message


def test_unknown_file_key_is_refused_with_a_suggestion(tmp_path):
    config_file = tmp_path / "c.toml"
    config_file.write_text("group.initial.rebalance.delay = 0\n")
    with pytest.raises(ConfigError, match=r"unknown setting 'group.initial.rebalance.delay'.*did you mean group.initial.rebalance.delay.ms"):
        resolve_config({}, {}, config_file)


def test_unknown_cohort_env_var_is_refused():
    with pytest.raises(ConfigError, match="COHORT_NUM_PARTITION"):
        resolve_config({}, {"COHORT_NUM_PARTITION": "3"})


def test_invalid_env_value_names_its_source():
    with pytest.raises(ConfigError, match=r"invalid group.min.session.timeout.ms \(from env COHORT_GROUP_MIN_SESSION_TIMEOUT_MS\)"):
        resolve_config({}, {"COHORT_GROUP_MIN_SESSION_TIMEOUT_MS": "-5"})


def test_wrong_type_in_file_names_the_file(tmp_path):
    config_file = tmp_path / "c.toml"
    config_file.write_text('max.connections = "lots"\n')
    with pytest.raises(ConfigError, match=rf"invalid max.connections \(from file {tmp_path}"):
        resolve_config({}, {}, config_file)


@pytest.mark.parametrize("content, fragment", [("x = = 1", "not valid TOML"), (None, "does not exist")])
def test_broken_or_missing_config_file(tmp_path, content, fragment):
    config_file = tmp_path / "c.toml"
    if content is not None:
        config_file.write_text(content)
    with pytest.raises(ConfigError, match=fragment):
        resolve_config({}, {}, config_file)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(SETTINGS), st.text(max_size=30))
def test_any_env_text_either_resolves_or_raises_config_error(spec, text):
    """Whatever an operator types, the answer is a config or one ConfigError line, never a crash."""
    if "\x00" in text:
        text = text.replace("\x00", "")
    env = {spec.env_var: text}
    if spec.name == "listeners":
        env["COHORT_ADVERTISED_LISTENERS"] = "example.com:9092"
    try:
        effective = resolve_config({}, env)
    except ConfigError as exc:
        assert "\n" not in str(exc)
    else:
        assert effective.sources[spec.name].kind is SourceKind.ENV


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=0, max_value=2**31 - 1), st.integers(min_value=0, max_value=2**31 - 1))
def test_session_timeout_bounds_accepted_exactly_when_ordered(low, high):
    env = {"COHORT_GROUP_MIN_SESSION_TIMEOUT_MS": str(low), "COHORT_GROUP_MAX_SESSION_TIMEOUT_MS": str(high)}
    if low <= high:
        config = resolve_config({}, env).config
        assert (config.group_min_session_timeout_ms, config.group_max_session_timeout_ms) == (low, high)
    else:
        with pytest.raises(ConfigError):
            resolve_config({}, env)


@given(st.sampled_from(["localhost", "10.0.0.1", "[::1]", "broker-1.example"]), st.integers(1, 65535))
def test_host_port_round_trips(host, port):
    parsed = parse_host_port(f"{host}:{port}")
    assert str(parsed) == f"{host}:{port}"


def test_several_listeners_with_kafka_names_and_their_advertised_addresses():
    config = CoordinatorConfig(
        listeners="PLAINTEXT://127.0.0.1:9092,SASL_SSL://0.0.0.0:9093",
        advertised_listeners="SASL_SSL://broker.example:19093",
        ssl_keystore_location="server.pem", sasl_enabled_mechanisms="scram-sha-512,PLAIN",
    )
    assert [(e.name, e.host, e.port) for e in config.endpoints] == [
        ("PLAINTEXT", "127.0.0.1", 9092), ("SASL_SSL", "0.0.0.0", 9093)]
    assert config.listen_address == HostPort("127.0.0.1", 9092)
    assert config.advertised_endpoint("PLAINTEXT") == HostPort("127.0.0.1", 9092)
    assert config.advertised_endpoint("SASL_SSL") == HostPort("broker.example", 19093)
    assert config.security_protocol("SASL_SSL") == "SASL_SSL"
    assert config.enabled_mechanisms == ("SCRAM-SHA-512", "PLAIN")


def test_custom_listener_names_map_to_security_protocols():
    config = CoordinatorConfig(listeners="INTERNAL://127.0.0.1:1,EXTERNAL://127.0.0.1:2",
                               listener_security_protocol_map="INTERNAL:PLAINTEXT,EXTERNAL:SASL_PLAINTEXT")
    assert config.security_protocol("EXTERNAL") == "SASL_PLAINTEXT"


def test_authorizer_names_and_super_users_follow_kafka():
    assert CoordinatorConfig(authorizer_class_name="org.apache.kafka.metadata.authorizer.StandardAuthorizer"
                             ).authorizer_class_name == "acl"
    assert CoordinatorConfig(authorizer_class_name="acl").authorizer_class_name == "acl"
    assert CoordinatorConfig().authorizer_class_name == ""
    assert CoordinatorConfig(super_users="User:admin; User:ops").super_user_principals == ("User:admin", "User:ops")
    assert CoordinatorConfig().connection_failed_authentication_delay_ms == 100
    assert CoordinatorConfig().allow_everyone_if_no_acl_found is False


def test_the_key_password_is_never_shown():
    effective = resolve_config({}, {"COHORT_SSL_KEY_PASSWORD": "hunter2"})
    assert effective.config.ssl_key_password == "hunter2"
    assert dict((name, value) for name, value, _ in effective.rows())["ssl.key.password"] == "[hidden]"


def test_short_consumer_group_session_timeouts_need_lower_bounds_too(tmp_path):
    effective = resolve_config({}, {"COHORT_GROUP_CONSUMER_SESSION_TIMEOUT_MS": "3000",
                                          "COHORT_GROUP_CONSUMER_MIN_SESSION_TIMEOUT_MS": "1000",
                                          "COHORT_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS": "500",
                                          "COHORT_GROUP_CONSUMER_MIN_HEARTBEAT_INTERVAL_MS": "100",
                                          "COHORT_GROUP_CONSUMER_ASSIGNORS": "range,uniform"}, None)
    config, sources = effective.config, effective.sources
    assert (config.group_consumer_session_timeout_ms, config.group_consumer_heartbeat_interval_ms) == (3000, 500)
    assert config.group_consumer_assignors == "range,uniform"
    assert sources["group.consumer.session.timeout.ms"].kind is SourceKind.ENV


@pytest.mark.parametrize("module", ["config.py", "config_sources.py"])
def test_settings_import_nothing_of_the_modules_they_configure(module):
    """Settings sit below everything that reads them: security imports config, never the other way round."""
    import ast

    import cohort.coordinator as coordinator
    tree = ast.parse((Path(coordinator.__file__).parent / module).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    ours = {name for name in imported if name.startswith("cohort.")}
    assert ours <= {"cohort.protocol.compiled", "cohort.coordinator.config"}, ours


def test_an_oauthbearer_jwks_url_must_be_a_file_url_only_when_oauthbearer_is_on(tmp_path):
    https = {"sasl_oauthbearer_jwks_endpoint_url": "https://idp.example/jwks"}
    assert CoordinatorConfig(**https).sasl_oauthbearer_jwks_endpoint_url == https["sasl_oauthbearer_jwks_endpoint_url"]
    with pytest.raises(ConfigError, match=r"^invalid sasl\.oauthbearer\.jwks\.endpoint\.url: .* is not a file:// URL"):
        CoordinatorConfig(listeners="SASL_PLAINTEXT://127.0.0.1:0", sasl_enabled_mechanisms="OAUTHBEARER",
                          data_dir=tmp_path, **https)
