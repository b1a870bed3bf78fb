"""The ACL and SCRAM admin APIs: DescribeAcls, CreateAcls, DeleteAcls, DescribeUserScramCredentials,
AlterUserScramCredentials, answered as Kafka answers them (and SaslHandshake / SaslAuthenticate
where no SASL exchange is under way, which Kafka answers ILLEGAL_SASL_STATE).

Authorization (CLUSTER DESCRIBE / ALTER) happens before these handlers, in
`cohort.coordinator.security.authorization`. With no authorizer configured the
ACL APIs answer SECURITY_DISABLED, as Kafka does; credentials are managed
either way (a SASL listener needs them even without ACLs).
"""
from __future__ import annotations

from collections import defaultdict

from cohort.coordinator.contracts.requests import RequestContext
from cohort.coordinator.security.authorizer import (
    AclBinding, binding_from_wire, binding_problem, filter_from_wire,
)
from cohort.coordinator.security.credentials import (
    ScramMechanism, credential_from_salted_password, iterations_problem,
)
from cohort.coordinator.security.registry import SecurityRegistry
from cohort.protocol.errors import ErrorCode
from cohort.protocol.messages import (
    AlterUserScramCredentialsResponse, CreateAclsResponse, DeleteAclsResponse, DescribeAclsResponse,
    DescribeUserScramCredentialsResponse, SaslAuthenticateResponse, SaslHandshakeResponse,
)
from cohort.coordinator.contracts.store import StorageError

_NO_AUTHORIZER = "No Authorizer is configured."


class SecurityAdminApis:
    def __init__(self, registry: SecurityRegistry, authorizer_enabled: bool) -> None:
        self.registry = registry
        self.authorizer_enabled = authorizer_enabled

    # ------------------------------------------------------------------ ACLs
    async def describe_acls(self, request, version: int, ctx: RequestContext) -> DescribeAclsResponse:
        if not self.authorizer_enabled:
            return DescribeAclsResponse(error_code=ErrorCode.SECURITY_DISABLED, error_message=_NO_AUTHORIZER,
                                        resources=[])
        acl_filter = filter_from_wire(request.resource_type_filter, request.resource_name_filter,
                                      request.pattern_type_filter, request.principal_filter, request.host_filter,
                                      request.operation, request.permission_type)
        problem = acl_filter.problem()
        if problem:
            return DescribeAclsResponse(error_code=ErrorCode.INVALID_REQUEST, error_message=problem, resources=[])
        by_resource: dict[tuple, list[AclBinding]] = defaultdict(list)
        for b in self.registry.authorizer.matching(acl_filter):
            by_resource[(b.resource_type, b.resource_name, b.pattern_type)].append(b)
        Resource, Acl = DescribeAclsResponse.DescribeAclsResource, DescribeAclsResponse.DescribeAclsResource.AclDescription
        return DescribeAclsResponse(error_code=0, error_message=None, resources=[
            Resource(resource_type=rt, resource_name=name, pattern_type=pt, acls=[
                Acl(principal=b.principal, host=b.host, operation=b.operation, permission_type=b.permission)
                for b in bindings])
            for (rt, name, pt), bindings in by_resource.items()])

    async def create_acls(self, request, version: int, ctx: RequestContext) -> CreateAclsResponse:
        Result = CreateAclsResponse.AclCreationResult
        if not self.authorizer_enabled:
            return CreateAclsResponse(results=[Result(error_code=ErrorCode.SECURITY_DISABLED,
                                                      error_message=_NO_AUTHORIZER) for _ in request.creations])
        results, valid = [], []
        for c in request.creations:
            binding = binding_from_wire(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal,
                                        c.host, c.operation, c.permission_type)
            problem = binding_problem(binding)
            results.append(Result(error_code=ErrorCode.INVALID_REQUEST if problem else 0, error_message=problem))
            if not problem:
                valid.append(binding)
        try:
            await self.registry.add_acls(valid, ctx.principal)
        except StorageError as exc:
            for r in results:
                if r.error_code == 0:
                    r.error_code, r.error_message = ErrorCode.UNKNOWN_SERVER_ERROR, f"Could not persist: {exc}"
        return CreateAclsResponse(results=results)

    async def delete_acls(self, request, version: int, ctx: RequestContext) -> DeleteAclsResponse:
        FilterResult = DeleteAclsResponse.DeleteAclsFilterResult
        Matching = FilterResult.DeleteAclsMatchingAcl
        if not self.authorizer_enabled:
            return DeleteAclsResponse(filter_results=[FilterResult(
                error_code=ErrorCode.SECURITY_DISABLED, error_message=_NO_AUTHORIZER, matching_acls=[])
                for _ in request.filters])
        results, doomed = [], []
        for f in request.filters:
            acl_filter = filter_from_wire(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter,
                                          f.principal_filter, f.host_filter, f.operation, f.permission_type)
            problem = acl_filter.problem()
            if problem:
                results.append(FilterResult(error_code=ErrorCode.INVALID_REQUEST, error_message=problem,
                                            matching_acls=[]))
                continue
            matched = self.registry.authorizer.matching(acl_filter)
            doomed.extend(matched)
            results.append(FilterResult(error_code=0, error_message=None, matching_acls=[
                Matching(error_code=0, error_message=None, resource_type=b.resource_type,
                         resource_name=b.resource_name, pattern_type=b.pattern_type, principal=b.principal,
                         host=b.host, operation=b.operation, permission_type=b.permission) for b in matched]))
        try:
            await self.registry.remove_acls(doomed, ctx.principal)
        except StorageError as exc:
            for r in results:
                if r.error_code == 0:
                    r.error_code, r.error_message = ErrorCode.UNKNOWN_SERVER_ERROR, f"Could not persist: {exc}"
                    r.matching_acls = []
        return DeleteAclsResponse(filter_results=results)

    # ------------------------------------------------------------------ SCRAM credentials
    async def describe_user_scram_credentials(self, request, version: int,
                                              ctx: RequestContext) -> DescribeUserScramCredentialsResponse:
        Result = DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult
        Info = Result.CredentialInfo
        credentials = self.registry.credentials
        wanted = [u.name for u in request.users] if request.users else None
        if wanted is None:
            wanted_users, duplicates = credentials.users(), set()
        else:
            wanted_users = list(dict.fromkeys(wanted))
            duplicates = {u for u in wanted if wanted.count(u) > 1}
        results = []
        for user in wanted_users:
            if user in duplicates:
                results.append(Result(user=user, error_code=ErrorCode.DUPLICATE_RESOURCE, error_message=(
                    "Cannot describe SCRAM credentials for the same user twice in a single request"),
                    credential_infos=[]))
                continue
            found = credentials.of_user(user)
            if not found:
                results.append(Result(user=user, error_code=ErrorCode.RESOURCE_NOT_FOUND,
                                      error_message="Attempt to describe a user credential that does not exist",
                                      credential_infos=[]))
                continue
            results.append(Result(user=user, error_code=0, error_message=None, credential_infos=[
                Info(mechanism=int(c.mechanism), iterations=c.iterations) for c in found]))
        return DescribeUserScramCredentialsResponse(error_code=0, error_message=None, results=results)

    async def alter_user_scram_credentials(self, request, version: int,
                                           ctx: RequestContext) -> AlterUserScramCredentialsResponse:
        Result = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult
        credentials = self.registry.credentials
        errors: dict[str, tuple[int, str]] = {}
        order: list[str] = []
        seen: dict[str, set[int]] = defaultdict(set)
        for item in [*request.deletions, *request.upsertions]:
            if item.name not in order:
                order.append(item.name)
            if item.mechanism in seen[item.name]:
                errors.setdefault(item.name, (ErrorCode.DUPLICATE_RESOURCE,
                                              "A user credential cannot be altered twice in the same request"))
            seen[item.name].add(item.mechanism)

        def check(item) -> ScramMechanism | None:
            if not item.name:
                errors.setdefault(item.name, (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"))
                return None
            try:
                mechanism = ScramMechanism(item.mechanism)
                if mechanism is ScramMechanism.UNKNOWN:
                    raise ValueError
            except ValueError:
                errors.setdefault(item.name, (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"))
                return None
            return mechanism

        deletions, upserts = [], []
        for d in request.deletions:
            mechanism = check(d)
            if mechanism is not None:
                if credentials.get(d.name, mechanism) is None:
                    errors.setdefault(d.name, (ErrorCode.RESOURCE_NOT_FOUND,
                                               "Attempt to delete a user credential that does not exist"))
                deletions.append((d.name, mechanism))
        for u in request.upsertions:
            mechanism = check(u)
            if mechanism is None:
                continue
            problem = iterations_problem(u.iterations)
            if problem is None and not u.salt:
                problem = "Salt must not be empty"
            if problem is None and not u.salted_password:
                problem = "Salted password must not be empty"
            if problem:
                errors.setdefault(u.name, (ErrorCode.UNACCEPTABLE_CREDENTIAL, problem))
                continue
            upserts.append(credential_from_salted_password(u.name, mechanism, u.salt, u.salted_password,
                                                           u.iterations))
        # a user's changes are all made or none (one result per user)
        deletions = [(user, m) for user, m in deletions if user not in errors]
        upserts = [c for c in upserts if c.user not in errors]
        try:
            await self.registry.alter_credentials(upserts, deletions, ctx.principal)
        except StorageError as exc:
            for user in order:
                errors.setdefault(user, (ErrorCode.UNKNOWN_SERVER_ERROR, f"Could not persist: {exc}"))
        return AlterUserScramCredentialsResponse(results=[
            Result(user=user, error_code=errors.get(user, (0, None))[0], error_message=errors.get(user, (0, None))[1])
            for user in order])




def sasl_handshake_when_authenticated(request, version: int, ctx: RequestContext) -> SaslHandshakeResponse:
    """SaslHandshake outside a SASL exchange (a PLAINTEXT/SSL listener, or already authenticated): Kafka's answer."""
    return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])


def sasl_authenticate_when_authenticated(request, version: int, ctx: RequestContext) -> SaslAuthenticateResponse:
    return SaslAuthenticateResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, error_message=(
        "SaslAuthenticate request received after successful authentication"), auth_bytes=b"")
