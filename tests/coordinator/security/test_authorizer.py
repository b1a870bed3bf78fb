"""The ACL authorizer against Kafka's StandardAuthorizer rules.

Table-driven cases name one rule each; a hypothesis test compares every
decision with a brute-force model that states the rules directly over the
list of bindings (no index, no early exits).
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from cohort.coordinator.security.authorizer import (
    AclBinding, AclBindingFilter, AclOperation as Op, AclPermissionType as Perm, Authorizer, PatternType as Pat,
    ResourceType as Res, binding_problem,
)

ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.1"


def acl(res=Res.GROUP, name="g", pat=Pat.LITERAL, principal=ALICE, host="*", op=Op.READ, perm=Perm.ALLOW):
    return AclBinding(res, name, pat, principal, host, op, perm)


CASES = [
    # (bindings, principal, host, operation, resource type, name, expected, rule)
    ([], ALICE, HOST, Op.READ, Res.GROUP, "g", False, "no ACL: denied by default"),
    ([acl()], ALICE, HOST, Op.READ, Res.GROUP, "g", True, "literal allow"),
    ([acl()], BOB, HOST, Op.READ, Res.GROUP, "g", False, "another principal's allow does not apply"),
    ([acl()], ALICE, HOST, Op.READ, Res.GROUP, "g2", False, "literal is exact"),
    ([acl()], ALICE, HOST, Op.READ, Res.TOPIC, "g", False, "resource type must match"),
    ([acl(name="*")], ALICE, HOST, Op.READ, Res.GROUP, "anything", True, "literal wildcard name"),
    ([acl(name="team-", pat=Pat.PREFIXED)], ALICE, HOST, Op.READ, Res.GROUP, "team-a", True, "prefixed"),
    ([acl(name="team-", pat=Pat.PREFIXED)], ALICE, HOST, Op.READ, Res.GROUP, "team", False, "prefix longer than name"),
    ([acl(name="*", pat=Pat.PREFIXED)], ALICE, HOST, Op.READ, Res.GROUP, "x", False, "prefixed * is a literal prefix"),
    ([acl(principal="User:*")], BOB, HOST, Op.READ, Res.GROUP, "g", True, "wildcard principal"),
    ([acl(host=HOST)], ALICE, HOST, Op.READ, Res.GROUP, "g", True, "host filter matches"),
    ([acl(host="10.0.0.2")], ALICE, HOST, Op.READ, Res.GROUP, "g", False, "host filter excludes"),
    ([acl(), acl(perm=Perm.DENY)], ALICE, HOST, Op.READ, Res.GROUP, "g", False, "deny wins"),
    ([acl(), acl(name="*", principal="User:*", perm=Perm.DENY)], ALICE, HOST, Op.READ, Res.GROUP, "g", False,
     "wildcard deny wins over literal allow"),
    ([acl(op=Op.ALL)], ALICE, HOST, Op.DELETE, Res.GROUP, "g", True, "ALL allows everything"),
    ([acl(), acl(op=Op.ALL, perm=Perm.DENY)], ALICE, HOST, Op.READ, Res.GROUP, "g", False, "DENY ALL denies"),
    ([acl(op=Op.READ)], ALICE, HOST, Op.DESCRIBE, Res.GROUP, "g", True, "READ implies DESCRIBE"),
    ([acl(op=Op.DELETE)], ALICE, HOST, Op.DESCRIBE, Res.GROUP, "g", True, "DELETE implies DESCRIBE"),
    ([acl(res=Res.TOPIC, op=Op.WRITE)], ALICE, HOST, Op.DESCRIBE, Res.TOPIC, "g", True, "WRITE implies DESCRIBE"),
    ([acl(res=Res.TOPIC, op=Op.ALTER)], ALICE, HOST, Op.DESCRIBE, Res.TOPIC, "g", True, "ALTER implies DESCRIBE"),
    ([acl(res=Res.TOPIC, op=Op.CREATE)], ALICE, HOST, Op.DESCRIBE, Res.TOPIC, "g", False,
     "CREATE does not imply DESCRIBE"),
    ([acl(res=Res.TOPIC, op=Op.ALTER_CONFIGS)], ALICE, HOST, Op.DESCRIBE_CONFIGS, Res.TOPIC, "g", True,
     "ALTER_CONFIGS implies DESCRIBE_CONFIGS"),
    ([acl(op=Op.DESCRIBE)], ALICE, HOST, Op.READ, Res.GROUP, "g", False, "DESCRIBE does not imply READ"),
    ([acl(op=Op.DESCRIBE), acl(op=Op.READ, perm=Perm.DENY)], ALICE, HOST, Op.DESCRIBE, Res.GROUP, "g", True,
     "a DENY never implies: DENY READ leaves DESCRIBE allowed"),
    ([acl(principal=BOB)], ALICE, HOST, Op.READ, Res.GROUP, "g", False,
     "an ACL on the resource for someone else: denied even with allow.everyone (below)"),
]


@pytest.mark.parametrize("bindings, principal, host, op, res, name, expected, rule", CASES,
                         ids=[c[-1] for c in CASES])
def test_decision_follows_kafka_rule(bindings, principal, host, op, res, name, expected, rule):
    assert Authorizer(bindings=bindings).authorize(principal, host, op, res, name) is expected


def test_super_users_are_allowed_whatever_the_acls_say():
    authz = Authorizer(super_users=["User:admin"], bindings=[acl(principal="User:admin", perm=Perm.DENY)])
    assert authz.authorize("User:admin", HOST, Op.READ, Res.GROUP, "g")
    assert not authz.authorize(ALICE, HOST, Op.READ, Res.GROUP, "g")


def test_allow_everyone_if_no_acl_found_applies_only_to_resources_without_any_acl():
    authz = Authorizer(allow_everyone_if_no_acl_found=True, bindings=[acl(principal=BOB)])
    assert authz.authorize(ALICE, HOST, Op.READ, Res.GROUP, "other")  # no ACL at all on "other"
    assert not authz.authorize(ALICE, HOST, Op.READ, Res.GROUP, "g")  # an ACL exists on g (for bob)


def test_authorized_operations_lists_the_allowed_supported_operations():
    authz = Authorizer(bindings=[acl(op=Op.READ)])
    bits = authz.authorized_operations(ALICE, HOST, Res.GROUP, "g")
    assert bits == (1 << Op.READ) | (1 << Op.DESCRIBE)


def test_add_and_remove_are_idempotent_and_counted():
    authz = Authorizer()
    assert authz.add(acl()) and not authz.add(acl())
    assert len(authz) == 1 and acl() in authz
    assert authz.remove(acl()) and not authz.remove(acl())
    assert len(authz) == 0 and list(authz) == []


def test_filters_follow_kafka_acl_binding_filter():
    lit, wild, pre = acl(name="team-a"), acl(name="*"), acl(name="team-", pat=Pat.PREFIXED)
    other = acl(res=Res.TOPIC, name="team-a", principal=BOB, op=Op.WRITE, perm=Perm.DENY)
    authz = Authorizer(bindings=[lit, wild, pre, other])
    assert set(authz.matching(AclBindingFilter())) == {lit, wild, pre, other}
    assert set(authz.matching(AclBindingFilter(Res.GROUP, "team-a", Pat.ANY))) == {lit}
    assert set(authz.matching(AclBindingFilter(Res.GROUP, "team-a", Pat.MATCH))) == {lit, wild, pre}
    assert set(authz.matching(AclBindingFilter(Res.ANY, "team-", Pat.PREFIXED))) == {pre}
    assert set(authz.matching(AclBindingFilter(principal=BOB))) == {other}
    assert set(authz.matching(AclBindingFilter(operation=Op.WRITE, permission=Perm.DENY))) == {other}
    assert authz.matching(AclBindingFilter(host="1.2.3.4")) == []


@pytest.mark.parametrize("binding, problem", [
    (acl(res=Res.ANY), "Invalid resourceType"),
    (acl(pat=Pat.MATCH), "Invalid patternType"),
    (acl(op=Op.ANY), "Invalid operation"),
    (acl(perm=Perm.ANY), "Invalid permissionType"),
    (acl(name=""), "empty resource name"),
    (acl(res=Res.CLUSTER, name="c"), "kafka-cluster"),
    (acl(principal="alice"), "Could not parse principal"),
])
def test_invalid_bindings_are_refused_with_kafka_reason(binding, problem):
    assert problem in binding_problem(binding)


def test_a_valid_binding_has_no_problem():
    assert binding_problem(acl(res=Res.CLUSTER, name="kafka-cluster", op=Op.ALTER)) is None


# ---------------------------------------------------------------- model


IMPLIES = {Op.DESCRIBE: {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE},
           Op.DESCRIBE_CONFIGS: {Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS}}


def model_authorize(bindings, super_users, allow_if_none, principal, host, op, res, name) -> bool:
    """Kafka's rules, stated over a plain list."""
    if principal in super_users:
        return True

    def on_resource(b):
        if b.resource_type != res:
            return False
        if b.pattern_type == Pat.LITERAL:
            return b.resource_name in (name, "*")
        return name[:len(b.resource_name)] == b.resource_name

    def grants(b, perm):
        if b.permission != perm or b.principal not in (principal, "User:*") or b.host not in (host, "*"):
            return False
        if b.operation in (Op.ALL, op):
            return True
        return perm == Perm.ALLOW and b.operation in IMPLIES.get(op, set())

    relevant = [b for b in bindings if on_resource(b)]
    if not relevant:
        return allow_if_none
    if any(grants(b, Perm.DENY) for b in relevant):
        return False
    return any(grants(b, Perm.ALLOW) for b in relevant)


NAMES = st.sampled_from(["", "a", "ab", "abc", "b", "*"])
PRINCIPALS = st.sampled_from([ALICE, BOB, "User:*", "Group:x"])
HOSTS = st.sampled_from(["*", "h1", "h2"])
OPS = st.sampled_from([Op.ALL, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE, Op.CREATE,
                       Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS])
RESOURCES = st.sampled_from([Res.GROUP, Res.TOPIC])
BINDINGS = st.builds(AclBinding, RESOURCES, NAMES.filter(bool), st.sampled_from([Pat.LITERAL, Pat.PREFIXED]),
                     PRINCIPALS, HOSTS, OPS, st.sampled_from([Perm.ALLOW, Perm.DENY]))


@settings(max_examples=400, derandomize=True, deadline=None)
@given(bindings=st.lists(BINDINGS, max_size=8), allow_if_none=st.booleans(), super_user=st.booleans(),
       removed=st.lists(st.integers(0, 7), max_size=3),
       queries=st.lists(st.tuples(st.sampled_from([ALICE, BOB]), st.sampled_from(["h1", "h2"]),
                                  OPS.filter(lambda o: o != Op.ALL), RESOURCES, NAMES.filter(lambda n: n != "*")),
                        min_size=1, max_size=10))
def test_every_decision_agrees_with_the_brute_force_model(bindings, allow_if_none, super_user, removed, queries):
    supers = {BOB} if super_user else set()
    authz = Authorizer(super_users=supers, allow_everyone_if_no_acl_found=allow_if_none, bindings=bindings)
    kept = list(dict.fromkeys(bindings))
    for i in removed:
        if i < len(kept):
            assert authz.remove(kept.pop(i))
    assert sorted(map(repr, authz)) == sorted(map(repr, kept))
    for principal, host, op, res, name in queries:
        expected = model_authorize(kept, supers, allow_if_none, principal, host, op, res, name)
        assert authz.authorize(principal, host, op, res, name) is expected, (principal, host, op, res, name)
