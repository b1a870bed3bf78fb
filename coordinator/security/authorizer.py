"""Kafka's ACL authorizer (StandardAuthorizer semantics), as a pure in-memory module.

An ACL binding says: principal P from host H is ALLOWed / DENYed operation O on
resources matching a pattern (resource type + a LITERAL name, the LITERAL
wildcard ``*``, or a PREFIXED name). To decide an action on one resource:

1. a super user (``super.users``) is always allowed;
2. the bindings whose pattern matches the resource are gathered;
3. a binding applies when its principal is the caller's or ``User:*``, its
   host is the caller's address or ``*``, and its operation is the action's or
   ALL. An ALLOW binding for READ, WRITE, DELETE or ALTER also applies to
   DESCRIBE (ALTER_CONFIGS to DESCRIBE_CONFIGS); a DENY binding never implies;
4. any applicable DENY denies (deny wins), else any applicable ALLOW allows;
5. when no binding at all matches the resource (whoever it names), the answer
   is ``allow.everyone.if.no.acl.found`` (false by default); otherwise denied.

Filters (DescribeAcls/DeleteAcls) follow Kafka's `AclBindingFilter`: ANY
matches every value, a null name/principal/host matches any, and pattern type
MATCH selects the bindings that would apply to a resource of that name.
"""
from __future__ import annotations

import enum
import ipaddress
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

WILDCARD_RESOURCE = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"
CLUSTER_NAME = "kafka-cluster"  # the only name a CLUSTER resource has


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# Kafka's rule: these ALLOW operations imply DESCRIBE (and DESCRIBE_CONFIGS).
IMPLIES_DESCRIBE = frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
                              AclOperation.ALTER})
IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})

# The operations each resource type supports: what "authorized operations" fields report.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE,
                         AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS,
                         AclOperation.ALTER_CONFIGS),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE),
    ResourceType.CLUSTER: (AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                           AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                           AclOperation.DESCRIBE),
}


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: a resource pattern and an access control entry (Kafka's `AclBinding`)."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str  # "User:alice", or "User:*"
    host: str  # an IP address, or "*"
    operation: AclOperation
    permission: AclPermissionType


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Which bindings DescribeAcls returns and DeleteAcls removes (Kafka's `AclBindingFilter`)."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def matches(self, binding: AclBinding) -> bool:
        return self._pattern_matches(binding) and self._entry_matches(binding)

    def _pattern_matches(self, b: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != b.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != b.pattern_type:
            return False
        if self.resource_name is None:
            return True
        if self.pattern_type in (PatternType.ANY, b.pattern_type):
            return self.resource_name == b.resource_name
        # MATCH: the bindings that would apply to a resource of this name
        if b.pattern_type == PatternType.LITERAL:
            return self.resource_name == b.resource_name or b.resource_name == WILDCARD_RESOURCE
        return b.pattern_type == PatternType.PREFIXED and self.resource_name.startswith(b.resource_name)

    def _entry_matches(self, b: AclBinding) -> bool:
        return ((self.principal is None or self.principal == b.principal)
                and (self.host is None or self.host == b.host)
                and (self.operation == AclOperation.ANY or self.operation == b.operation)
                and (self.permission == AclPermissionType.ANY or self.permission == b.permission))

    def problem(self) -> str | None:
        """Why Kafka refuses this filter (any UNKNOWN value), or None."""
        for value in (self.resource_type, self.pattern_type, self.operation, self.permission):
            if value.name == "UNKNOWN":
                return f"Invalid filter: {type(value).__name__} UNKNOWN"
        return None


def binding_problem(binding: AclBinding) -> str | None:
    """Why Kafka refuses to create `binding` (INVALID_REQUEST), or None when it is acceptable."""
    if binding.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {binding.resource_type.name}"
    if binding.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {binding.pattern_type.name}"
    if binding.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {binding.operation.name}"
    if binding.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return f"Invalid permissionType {binding.permission.name}"
    if not binding.resource_name:
        return "Invalid empty resource name specified"
    if binding.resource_type == ResourceType.CLUSTER and binding.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    kind, sep, name = binding.principal.partition(":")
    if not sep or not kind or not name:
        return f"Could not parse principal from `{binding.principal}` (no colon is found separating principal type from name)"
    if not binding.host:
        return "Invalid empty host"
    return host_problem(binding.host)


def host_problem(host: str) -> str | None:
    """Why an ACL host is refused: a host matches the client's address exactly, so anything but an IP
    address or `*` (a CIDR range, a host name) would never match and silently grant or deny nothing."""
    if host == WILDCARD_HOST:
        return None
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return (f"Invalid host {host!r}: an ACL host is an IP address or * (ranges such as 10.0.0.0/8 and host "
                "names are not supported)")
    return None


def _as_enum(enum_type: type[enum.IntEnum], value: int) -> enum.IntEnum:
    """A wire value as its enum; values Kafka does not define read as UNKNOWN, as Kafka does."""
    try:
        return enum_type(value)
    except ValueError:
        return enum_type(0)


def binding_from_wire(resource_type: int, name: str, pattern_type: int, principal: str, host: str,
                      operation: int, permission: int) -> AclBinding:
    return AclBinding(_as_enum(ResourceType, resource_type), name, _as_enum(PatternType, pattern_type), principal,
                      host, _as_enum(AclOperation, operation), _as_enum(AclPermissionType, permission))


def filter_from_wire(resource_type: int, name: str | None, pattern_type: int, principal: str | None,
                     host: str | None, operation: int, permission: int) -> AclBindingFilter:
    return AclBindingFilter(_as_enum(ResourceType, resource_type), name, _as_enum(PatternType, pattern_type),
                            principal, host, _as_enum(AclOperation, operation),
                            _as_enum(AclPermissionType, permission))


def _entry_applies(b: AclBinding, principal: str, host: str, operation: AclOperation) -> bool:
    if b.principal != principal and b.principal != WILDCARD_PRINCIPAL:
        return False
    if b.host != WILDCARD_HOST and b.host != host:
        return False
    if b.operation == AclOperation.ALL or b.operation == operation:
        return True
    if b.permission != AclPermissionType.ALLOW:
        return False  # a DENY never implies another operation
    if operation == AclOperation.DESCRIBE:
        return b.operation in IMPLIES_DESCRIBE
    if operation == AclOperation.DESCRIBE_CONFIGS:
        return b.operation in IMPLIES_DESCRIBE_CONFIGS
    return False


class Authorizer:
    """The ACL bindings of one node and the decisions made from them.

    Bindings are indexed by (resource type, name) for literal patterns and by
    resource type then prefix for prefixed ones, so a decision looks at the
    bindings of one resource, its wildcard and each prefix of its name.
    """

    def __init__(self, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False,
                 bindings: Iterable[AclBinding] = ()) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._literal: dict[tuple[ResourceType, str], set[AclBinding]] = {}
        self._prefixed: dict[ResourceType, dict[str, set[AclBinding]]] = {}
        self._count = 0
        self.generation = 0  # bumped by every change: decisions cached elsewhere are good while it stays
        for b in bindings:
            self.add(b)

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[AclBinding]:
        for group in self._literal.values():
            yield from group
        for by_prefix in self._prefixed.values():
            for group in by_prefix.values():
                yield from group

    def __contains__(self, binding: AclBinding) -> bool:
        return binding in self._bucket(binding, create=False)

    def _bucket(self, b: AclBinding, create: bool) -> set[AclBinding]:
        if b.pattern_type == PatternType.LITERAL:
            key = (b.resource_type, b.resource_name)
            return self._literal.setdefault(key, set()) if create else self._literal.get(key, set())
        by_prefix = self._prefixed.setdefault(b.resource_type, {}) if create else self._prefixed.get(
            b.resource_type, {})
        return by_prefix.setdefault(b.resource_name, set()) if create else by_prefix.get(b.resource_name, set())

    def add(self, binding: AclBinding) -> bool:
        """Add `binding`; False when it was there already."""
        bucket = self._bucket(binding, create=True)
        if binding in bucket:
            return False
        bucket.add(binding)
        self._count += 1
        self.generation += 1
        return True

    def remove(self, binding: AclBinding) -> bool:
        """Remove `binding`; False when it was not there."""
        bucket = self._bucket(binding, create=False)
        if binding not in bucket:
            return False
        bucket.discard(binding)
        self._count -= 1
        self.generation += 1
        return True

    def matching(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """The bindings `acl_filter` selects, in a stable order."""
        return sorted((b for b in self if acl_filter.matches(b)), key=_sort_key)

    def _resource_bindings(self, resource_type: ResourceType, name: str) -> Iterator[AclBinding]:
        """Every binding whose pattern covers the resource."""
        literal = self._literal
        yield from literal.get((resource_type, name), ())
        if name != WILDCARD_RESOURCE:
            yield from literal.get((resource_type, WILDCARD_RESOURCE), ())
        by_prefix = self._prefixed.get(resource_type)
        if by_prefix:
            for end in range(len(name) + 1):
                group = by_prefix.get(name[:end])
                if group:
                    yield from group

    def authorize(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        """Whether `principal` connecting from `host` may do `operation` on the resource."""
        if principal in self.super_users:
            return True
        found_resource_acl = False
        allowed = False
        for b in self._resource_bindings(resource_type, name):
            found_resource_acl = True
            if _entry_applies(b, principal, host, operation):
                if b.permission == AclPermissionType.DENY:
                    return False
                allowed = True
        if not found_resource_acl:
            return self.allow_everyone_if_no_acl_found
        return allowed

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType, name: str) -> int:
        """The bit set (1 << operation code) of the supported operations allowed on the resource."""
        bits = 0
        for op in SUPPORTED_OPERATIONS.get(resource_type, ()):
            if self.authorize(principal, host, op, resource_type, name):
                bits |= 1 << op
        return bits


def _sort_key(b: AclBinding) -> tuple:
    return (b.resource_type, b.pattern_type, b.resource_name, b.principal, b.host, b.operation, b.permission)
