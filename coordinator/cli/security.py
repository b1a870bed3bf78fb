"""``cohort users …`` and ``cohort acls …``: SCRAM credentials and ACLs, with Kafka's tool conventions.

``cohort users add NAME --mechanism SCRAM-SHA-512 --password-file FILE`` either
writes the credential straight into a data dir no server is running on
(``--data-dir``: the first credential, Kafka's ``kafka-storage format
--add-scram`` idea), or into a cluster's etcd (``--cluster etcd://…``, where
every node follows it, running or not), or asks a running server (``--bootstrap-server``:
AlterUserScramCredentials, salted and hashed here, so the password never
leaves this process). ``cohort acls`` follows ``kafka-acls.sh`` (``--add``,
``--remove``, ``--list`` as ``add``/``remove``/``list``; ``--allow-principal``,
``--deny-principal``, ``--operation``, ``--group``, ``--topic``,
``--cluster``, ``--resource-pattern-type``, ``--allow-host``, ``--deny-host``): ``remove``
needs a resource, asks y/N unless ``--force`` (no stdin: nothing removed), and a principal's host is
part of its filter; an ACL host is an IP address or ``*``.
Both take ``--command-config FILE`` (Kafka client properties) for secured servers.

Errors are one line on stderr; exit codes as the other admin commands: 0 ok,
1 refused or failed, 2 bad input, 3 server unreachable.
"""
from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
from pathlib import Path

from cohort.client.cli.output import error, print_json
from cohort.client.cli.runner import (
    EXIT_FAILED, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE, CommandError, OneLineArgumentParser, add_connection_options,
    run_admin_command,
)
from cohort.coordinator.security.authorizer import (
    CLUSTER_NAME, AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType, binding_problem,
    host_problem,
)
from cohort.coordinator.security.credentials import (
    DEFAULT_ITERATIONS, CredentialStore, ScramMechanism, credential_from_password, iterations_problem,
    salted_password,
)
from cohort.protocol.errors import error_name
from cohort.protocol.messages import (
    AlterUserScramCredentialsRequest, CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest,
    DescribeUserScramCredentialsRequest,
)

EXIT_REFUSED = 1


def register(subparsers) -> None:
    users = subparsers.add_parser("users", help="add, delete and list SCRAM users",
                                  description="SCRAM credentials, in a stopped server's data dir or over the "
                                              "Kafka protocol (AlterUserScramCredentials).")
    users.set_defaults(func=lambda args: (users.print_help(sys.stderr), EXIT_USAGE)[1])
    commands = users.add_subparsers(dest="users_command", metavar="COMMAND", parser_class=OneLineArgumentParser)

    p = commands.add_parser("add", help="add a user's credential (or replace it)")
    p.add_argument("name")
    p.add_argument("--mechanism", default="SCRAM-SHA-512", help="SCRAM-SHA-256 or SCRAM-SHA-512 (default)")
    p.add_argument("--password-file", type=Path, required=True,
                   help="file holding the password (its first line); never given on the command line")
    p.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS,
                   help=f"PBKDF2 iterations, 4096..16384 (default {DEFAULT_ITERATIONS})")
    _target_options(p)
    p.set_defaults(func=users_add)

    p = commands.add_parser("delete", help="delete a user's credential")
    p.add_argument("name")
    p.add_argument("--mechanism", default="SCRAM-SHA-512", help="SCRAM-SHA-256 or SCRAM-SHA-512 (default)")
    _target_options(p)
    p.set_defaults(func=users_delete)

    p = commands.add_parser("list", help="users and their mechanisms (never a salt or key)")
    _target_options(p)
    p.set_defaults(func=users_list)

    acls = subparsers.add_parser("acls", help="add, remove and list ACLs (kafka-acls.sh conventions)",
                                 description="ACL bindings over the Kafka protocol (CreateAcls/DeleteAcls/"
                                             "DescribeAcls).")
    acls.set_defaults(func=lambda args: (acls.print_help(sys.stderr), EXIT_USAGE)[1])
    commands = acls.add_subparsers(dest="acls_command", metavar="COMMAND", parser_class=OneLineArgumentParser)
    for name, help_text, func, prepare in (("add", "add ACLs", acls_add, _bindings),
                                           ("remove", "remove matching ACLs", acls_remove, _confirmed_filters),
                                           ("list", "list ACLs", acls_list, _filters)):
        p = commands.add_parser(name, help=help_text)
        add_connection_options(p)
        _acl_options(p, name)
        p.set_defaults(func=_checked_first(func, prepare))


def _checked_first(func, prepare):
    """Check the arguments (bad input: exit 2) before connecting, then run `func` with what they mean."""
    @_one_line
    def run(args) -> int:
        args.prepared = prepare(args)
        return run_admin_command(args, func)
    return run


def _target_options(p: argparse.ArgumentParser) -> None:
    add_connection_options(p)
    p.add_argument("--data-dir", type=Path, default=None,
                   help="write into this data dir directly (no server may be running on it)")
    p.add_argument("--cluster", default=None, metavar="etcd://HOST:PORT[,...]",
                   help="a cluster's credentials, in its etcd (its nodes follow them at once)")


def _acl_options(p: argparse.ArgumentParser, command: str) -> None:
    p.add_argument("--allow-principal", action="append", default=[], metavar="PRINCIPAL", help="e.g. User:alice")
    p.add_argument("--deny-principal", action="append", default=[], metavar="PRINCIPAL")
    p.add_argument("--allow-host", action="append", default=[], metavar="HOST", help="default * (any host)")
    p.add_argument("--deny-host", action="append", default=[], metavar="HOST")
    p.add_argument("--operation", action="append", default=[],
                   help="Read, Write, Create, Delete, Alter, Describe, All, … (repeatable; default All)")
    p.add_argument("--group", action="append", default=[], help="a consumer group (repeatable; * = every group)")
    p.add_argument("--topic", action="append", default=[], help="a topic (repeatable; * = every topic)")
    p.add_argument("--cluster", action="store_true", help="the cluster resource")
    p.add_argument("--resource-pattern-type", default="literal" if command == "add" else None,
                   help="literal or prefixed (add); also any or match (remove, list)")
    if command == "list":
        p.add_argument("--principal", default=None, help="only ACLs of this principal")
    if command == "remove":
        p.add_argument("--force", action="store_true", help="remove without asking for confirmation")


# ------------------------------------------------------------------ users


def _mechanism(text: str) -> ScramMechanism:
    try:
        return ScramMechanism.from_name(text)
    except ValueError as exc:
        raise CommandError(str(exc), EXIT_USAGE) from None


def _read_password(path: Path) -> str:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise CommandError(f"cannot read --password-file {path}: {exc.strerror or exc}", EXIT_USAGE) from None
    if not lines or not lines[0]:
        raise CommandError(f"--password-file {path} holds no password (its first line is empty)", EXIT_USAGE)
    return lines[0]


def _one_line(func):
    def run(args) -> int:
        try:
            return func(args)
        except CommandError as exc:
            error(str(exc))
            return exc.exit_code
    return run


@_one_line
def users_add(args) -> int:
    mechanism = _mechanism(args.mechanism)
    problem = iterations_problem(args.iterations)
    if problem:
        raise CommandError(problem, EXIT_USAGE)
    password = _read_password(args.password_file)
    if _in_cluster(args):
        credential = credential_from_password(args.name, mechanism, password, args.iterations)
        _in_etcd(args, put=[credential.record()])
        print(f"Added {mechanism.mechanism_name} credential for user {args.name} to the cluster.")
        return EXIT_OK
    if args.data_dir is not None:
        credential = credential_from_password(args.name, mechanism, password, args.iterations)
        _write_offline(args.data_dir, [credential.record()])
        print(f"Added {mechanism.mechanism_name} credential for user {args.name} to {args.data_dir}.")
        return EXIT_OK

    async def alter(args, admin) -> int:
        salt = secrets.token_bytes(32)
        upsertion = AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
            name=args.name, mechanism=int(mechanism), iterations=args.iterations, salt=salt,
            salted_password=salted_password(mechanism, password, salt, args.iterations))
        await _alter(admin, AlterUserScramCredentialsRequest(deletions=[], upsertions=[upsertion]))
        print(f"Completed updating config for user {args.name}.")
        return EXIT_OK

    return run_admin_command(args, alter)


@_one_line
def users_delete(args) -> int:
    mechanism = _mechanism(args.mechanism)
    if _in_cluster(args):
        from cohort.coordinator.records.types import ScramCredentialTombstone

        if not _in_etcd(args, delete=[ScramCredentialTombstone(args.name, int(mechanism))]):
            raise CommandError(f"user {args.name} has no {mechanism.mechanism_name} credential in the cluster")
        print(f"Deleted {mechanism.mechanism_name} credential of user {args.name} from the cluster.")
        return EXIT_OK
    if args.data_dir is not None:
        from cohort.coordinator.records.types import ScramCredentialTombstone

        if (args.name, mechanism) not in {(c.user, c.mechanism) for c in _read_offline(args.data_dir)}:
            raise CommandError(f"user {args.name} has no {mechanism.mechanism_name} credential in {args.data_dir}")
        _write_offline(args.data_dir, [ScramCredentialTombstone(args.name, int(mechanism))])
        print(f"Deleted {mechanism.mechanism_name} credential of user {args.name} from {args.data_dir}.")
        return EXIT_OK

    async def alter(args, admin) -> int:
        deletion = AlterUserScramCredentialsRequest.ScramCredentialDeletion(name=args.name, mechanism=int(mechanism))
        await _alter(admin, AlterUserScramCredentialsRequest(deletions=[deletion], upsertions=[]))
        print(f"Completed updating config for user {args.name}.")
        return EXIT_OK

    return run_admin_command(args, alter)


@_one_line
def users_list(args) -> int:
    if _in_cluster(args):
        rows = [(c.user, c.mechanism.mechanism_name, c.iterations) for c in _in_etcd(args)]
        return _print_users(args, rows)
    if args.data_dir is not None:
        rows = [(c.user, c.mechanism.mechanism_name, c.iterations) for c in _read_offline(args.data_dir)]
        return _print_users(args, rows)

    async def describe(args, admin) -> int:
        conn = await admin.cluster.any_connection()
        response = await conn.request(DescribeUserScramCredentialsRequest(users=None))
        if response.error_code:
            raise CommandError(f"{error_name(response.error_code)}: {response.error_message}")
        rows = [(r.user, ScramMechanism(i.mechanism).mechanism_name, i.iterations)
                for r in response.results for i in r.credential_infos]
        return _print_users(args, rows)

    return run_admin_command(args, describe)


def _print_users(args, rows) -> int:
    if getattr(args, "output", "table") == "json":
        print_json([{"user": u, "mechanism": m, "iterations": i} for u, m, i in rows])
    else:
        for user, mechanism, iterations in rows:
            print(f"SCRAM credential configs for user-principal '{user}' are {mechanism}=iterations={iterations}")
    return EXIT_OK


async def _alter(admin, request) -> None:
    conn = await admin.cluster.any_connection()
    response = await conn.request(request)
    for r in response.results:
        if r.error_code:
            raise CommandError(f"user {r.user}: {error_name(r.error_code)}: {r.error_message}")


def _in_cluster(args) -> bool:
    if args.cluster is None:
        return False
    if args.data_dir is not None:
        raise CommandError("give --cluster or --data-dir, not both", EXIT_USAGE)
    return True


def _in_etcd(args, put=(), delete=()):
    """A cluster's credentials, straight in etcd (`s/`, where every node watches them): write `put`, delete
    `delete` (True if each existed), or read them all (a list of credentials) when given neither."""
    from cohort.coordinator.config import ConfigError, parse_cluster_url
    try:
        from cohort.coordinator.cluster.etcd import EtcdClient, EtcdUnavailable, op_delete, op_put
        from cohort.coordinator.cluster import keys
    except ImportError:
        raise CommandError("cluster mode needs the etcd client: pip install 'cohort[cluster]'", EXIT_USAGE) from None
    from cohort.coordinator.records.types import ScramCredentialRecord, decode_record, encode_record

    try:
        endpoints = parse_cluster_url(args.cluster)
    except (ConfigError, ValueError) as exc:
        raise CommandError(f"--cluster: {exc}", EXIT_USAGE) from None

    async def run():
        client = EtcdClient(endpoints, timeout_s=args.timeout / 1000)  # --timeout is in ms
        await client.connect()
        try:
            if put or delete:
                ops = []
                for record in (*put, *delete):
                    record_key, value = encode_record(record)
                    key = keys.etcd_key(0, record_key)
                    ops.append(op_delete(key) if value is None else op_put(key, value))
                _, _, responses = await client.txn([], ops)
                return all(r.response_delete_range.deleted for r in responses[len(put):])
            store = CredentialStore()
            async for page in client.range_prefix(keys.SECURITY):
                for kv in page:
                    record = decode_record(keys.record_key(kv.key), kv.value)
                    if isinstance(record, ScramCredentialRecord):
                        store.apply(record)
            return list(store)
        finally:
            await client.close()
    try:
        return asyncio.run(run())
    except EtcdUnavailable as exc:
        raise CommandError(f"cannot reach the cluster's etcd: {exc}", EXIT_UNREACHABLE) from None


def _write_offline(data_dir: Path, records) -> None:
    asyncio.run(_offline(data_dir, records))


def _read_offline(data_dir: Path):
    if not data_dir.is_dir():
        raise CommandError(f"--data-dir {data_dir} is not a directory", EXIT_USAGE)
    return asyncio.run(_offline(data_dir, None))


async def _offline(data_dir: Path, records):
    """Open the log of a data dir no server holds, read (or append) partition 0's credentials, close."""
    from cohort.coordinator.config import CoordinatorConfig
    from cohort.coordinator.process.daemon import DataDirLock, StartupError
    from cohort.coordinator.log import OffsetsLog
    from cohort.coordinator.log.file_modes import make_private_dir
    from cohort.coordinator.server.node import SECURITY_PARTITION
    from cohort.coordinator.groups.runtime.partition import PartitionRuntime
    from cohort.coordinator.records.types import ScramCredentialRecord, ScramCredentialTombstone, decode_record
    from cohort.coordinator.security.credentials import CredentialStore

    make_private_dir(data_dir, tighten=True)
    lock = DataDirLock(data_dir)
    try:
        lock.acquire()
    except StartupError as exc:
        raise CommandError(f"{exc}; use --bootstrap-server to change users of a running server",
                           EXIT_REFUSED) from None
    store = CredentialStore()

    def replay(partition, pairs):
        if partition != SECURITY_PARTITION:
            return
        for key, value in pairs:
            try:
                record = decode_record(key, value)
            except ValueError:
                continue
            if isinstance(record, (ScramCredentialRecord, ScramCredentialTombstone)):
                store.apply(record)

    try:
        log = OffsetsLog(data_dir, num_partitions=CoordinatorConfig().offsets_topic_num_partitions,
                         fsync_process=False)
        await log.open(replay)
        try:
            if records:
                # Through the coordinator's write gate, as a running server's changes go.
                await PartitionRuntime(log, log.num_partitions, build_shard=None).persist(SECURITY_PARTITION, records)
        finally:
            await log.close()
    except OSError as exc:
        raise CommandError(f"cannot write {data_dir}: {exc.strerror or exc}") from None
    finally:
        lock.release()
    return list(store)


# ------------------------------------------------------------------ acls

_OPERATIONS = {op.name.replace("_", "").lower(): op for op in AclOperation
               if op not in (AclOperation.UNKNOWN, AclOperation.ANY)}


def _operation(text: str) -> AclOperation:
    op = _OPERATIONS.get(text.replace("_", "").replace("-", "").lower())
    if op is None:
        raise CommandError(f"unknown operation {text!r} (one of {', '.join(o.name for o in _OPERATIONS.values())})",
                           EXIT_USAGE)
    return op


def _pattern(text: str | None, allow_filters: bool) -> PatternType:
    if text is None:
        return PatternType.ANY
    try:
        pattern = PatternType[text.upper()]
    except KeyError:
        pattern = PatternType.UNKNOWN
    allowed = (PatternType.LITERAL, PatternType.PREFIXED) + ((PatternType.ANY, PatternType.MATCH)
                                                              if allow_filters else ())
    if pattern not in allowed:
        raise CommandError(f"--resource-pattern-type must be one of {', '.join(p.name.lower() for p in allowed)}",
                           EXIT_USAGE)
    return pattern


def _resources(args) -> list[tuple[ResourceType, str]]:
    resources = [(ResourceType.GROUP, g) for g in args.group] + [(ResourceType.TOPIC, t) for t in args.topic]
    if args.cluster:
        resources.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return resources


def _bindings(args) -> list[AclBinding]:
    resources = _resources(args)
    if not resources:
        raise CommandError("name at least one resource: --group, --topic or --cluster", EXIT_USAGE)
    entries = [(p, AclPermissionType.ALLOW, args.allow_host or ["*"]) for p in args.allow_principal]
    entries += [(p, AclPermissionType.DENY, args.deny_host or ["*"]) for p in args.deny_principal]
    if not entries:
        raise CommandError("name at least one --allow-principal or --deny-principal", EXIT_USAGE)
    operations = [_operation(o) for o in args.operation] or [AclOperation.ALL]
    pattern = _pattern(args.resource_pattern_type, allow_filters=False)
    bindings = []
    for rtype, name in resources:
        for principal, permission, hosts in entries:
            for host in hosts:
                for op in operations:
                    b = AclBinding(rtype, name, pattern if rtype != ResourceType.CLUSTER else PatternType.LITERAL,
                                   principal, host, op, permission)
                    problem = binding_problem(b)
                    if problem:
                        raise CommandError(problem, EXIT_USAGE)
                    bindings.append(b)
    return bindings


async def acls_add(args, admin) -> int:
    bindings = args.prepared
    conn = await admin.cluster.any_connection()
    response = await conn.request(CreateAclsRequest(creations=[CreateAclsRequest.AclCreation(
        resource_type=b.resource_type, resource_name=b.resource_name, resource_pattern_type=b.pattern_type,
        principal=b.principal, host=b.host, operation=b.operation, permission_type=b.permission) for b in bindings]))
    failed = [(b, r) for b, r in zip(bindings, response.results) if r.error_code]
    for b, r in failed:
        error(f"{_describe(b)}: {error_name(r.error_code)}: {r.error_message}")
    if failed:
        return EXIT_FAILED
    for b in bindings:
        print(f"Adding ACL: {_describe(b)}")
    return EXIT_OK


def _filters(args) -> list[DeleteAclsRequest.DeleteAclsFilter]:
    """What `list` and `remove` select. As kafka-acls.sh: a principal's host is part of the filter (the
    hosts given, else *), and `remove` needs a resource."""
    pattern = _pattern(args.resource_pattern_type, allow_filters=True)
    resources = _resources(args)
    if not resources and args.acls_command == "remove":
        raise CommandError("name the ACLs' resource: --group, --topic or --cluster (a name selects the bindings of "
                           "that name; with --resource-pattern-type match also the '*' and prefixed ones that apply "
                           "to it)", EXIT_USAGE)
    for hosts, principals, option in ((args.allow_host, args.allow_principal, "--allow-host"),
                                      (args.deny_host, args.deny_principal, "--deny-host")):
        if hosts and not principals:
            raise CommandError(f"{option} needs --{option[2:].split('-')[0]}-principal", EXIT_USAGE)
        for host in hosts:
            problem = host_problem(host)
            if problem:
                raise CommandError(problem, EXIT_USAGE)
    principals = [(p, AclPermissionType.ALLOW, h) for p in args.allow_principal for h in args.allow_host or ["*"]]
    principals += [(p, AclPermissionType.DENY, h) for p in args.deny_principal for h in args.deny_host or ["*"]]
    principals = principals or [(getattr(args, "principal", None), AclPermissionType.ANY, None)]
    operations = [_operation(o) for o in args.operation] or [AclOperation.ANY]
    return [DeleteAclsRequest.DeleteAclsFilter(
        resource_type_filter=rtype, resource_name_filter=name, pattern_type_filter=pattern,
        principal_filter=principal, host_filter=host, operation=op, permission_type=permission)
        for rtype, name in resources or [(ResourceType.ANY, None)] for principal, permission, host in principals
        for op in operations]


def _confirmed_filters(args) -> list[DeleteAclsRequest.DeleteAclsFilter]:
    """The filters of `remove`, once confirmed. kafka-acls.sh asks before removing: y removes; anything
    else, or no stdin to ask on, removes nothing (exit 1)."""
    filters = _filters(args)
    if args.force:
        return filters
    what = "; ".join(
        f"{ResourceType(f.resource_type_filter).name} {f.resource_name_filter} "
        f"({PatternType(f.pattern_type_filter).name.lower()})"
        + ("" if f.principal_filter is None else f", {f.principal_filter} from {f.host_filter}")
        + ("" if f.operation == AclOperation.ANY else f", {AclOperation(f.operation).name}")
        for f in filters)
    stdin = sys.stdin
    if stdin is None or stdin.closed:
        raise CommandError("nothing removed: no stdin to confirm on (pass --force to remove without asking)",
                           EXIT_REFUSED)
    if stdin.isatty():  # piped answers ("echo y |") are read without the question
        print(f"Are you sure you want to remove the ACLs matching: {what}? (y/N) ", end="", file=sys.stderr,
              flush=True)
    try:
        answer = stdin.readline()
    except OSError:
        answer = ""
    if not answer:
        raise CommandError("nothing removed: no answer on stdin (pass --force to remove without asking)",
                           EXIT_REFUSED)
    if answer.strip().lower() not in ("y", "yes"):
        raise CommandError("nothing removed", EXIT_REFUSED)
    return filters


async def acls_remove(args, admin) -> int:
    conn = await admin.cluster.any_connection()
    response = await conn.request(DeleteAclsRequest(filters=args.prepared))
    status = EXIT_OK
    for result in response.filter_results:
        if result.error_code:
            error(f"{error_name(result.error_code)}: {result.error_message}")
            status = EXIT_FAILED
        for m in result.matching_acls:
            print(f"Removed ACL: (principal={m.principal}, host={m.host}, operation={AclOperation(m.operation).name}, "
                  f"permissionType={AclPermissionType(m.permission_type).name}) on ResourcePattern(resourceType="
                  f"{ResourceType(m.resource_type).name}, name={m.resource_name}, "
                  f"patternType={PatternType(m.pattern_type).name})")
    return status


async def acls_list(args, admin) -> int:
    conn = await admin.cluster.any_connection()
    rows = []
    for f in args.prepared:
        response = await conn.request(DescribeAclsRequest(
            resource_type_filter=f.resource_type_filter, resource_name_filter=f.resource_name_filter,
            pattern_type_filter=f.pattern_type_filter, principal_filter=f.principal_filter, host_filter=None,
            operation=f.operation, permission_type=f.permission_type))
        if response.error_code:
            raise CommandError(f"{error_name(response.error_code)}: {response.error_message}")
        for r in response.resources:
            for a in r.acls:
                rows.append({"resource_type": ResourceType(r.resource_type).name, "name": r.resource_name,
                             "pattern_type": PatternType(r.pattern_type).name, "principal": a.principal,
                             "host": a.host, "operation": AclOperation(a.operation).name,
                             "permission": AclPermissionType(a.permission_type).name})
    if args.output == "json":
        print_json(rows)
        return EXIT_OK
    for row in rows:
        print(f"(principal={row['principal']}, host={row['host']}, operation={row['operation']}, "
              f"permissionType={row['permission']}) on ResourcePattern(resourceType={row['resource_type']}, "
              f"name={row['name']}, patternType={row['pattern_type']})")
    return EXIT_OK


def _describe(b: AclBinding) -> str:
    from cohort.coordinator.security.registry import describe_binding
    return describe_binding(b)


