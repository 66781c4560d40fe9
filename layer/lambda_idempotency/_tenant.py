"""Who the tenant is: the scope `idempotent_http` puts a key in, from what the authorizer
vouched for, so one caller's key never replays another caller's response.

Each principal is a tuple whose first item names its kind and whose other items are the
fields that identify it, unchanged. The engine hashes the scope as a JSON array, so no two
different principals, of one kind or of two, can ever encode alike (a string such as
`f"jwt:{iss} {sub}"` could: `iss` "a x" with `sub` "y" met `iss` "a" with `sub` "x y").
Headers are never read: a client can send any header. docs/http.md has the table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Principal = tuple[Any, ...]
"""(kind, *fields): ("jwt", iss, sub), ("iam", userArn, userId), ..."""

ANONYMOUS = "anonymous"
"""The one scope that requests no authorizer vouched for share. A string, so it is never
equal to a principal, which is always a tuple."""


def authorizer_principal(event: Any) -> Principal | None:
    """The principal the request's authorizer vouched for; None when none did.

    One source decides, the first of: a JWT's `iss` and `sub` (HTTP API JWT and REST
    Cognito user pool authorizers); a Lambda authorizer's `principalId`; an HTTP API Lambda
    authorizer's whole context when it returns no `principalId`; a Cognito identity pool
    identity (IAM auth with Cognito credentials: every such caller has the same role ARN);
    an IAM caller's ARN and unique id; a client certificate (mutual TLS); an API key's id.
    Sources are never combined: a JWT user is the same tenant whichever API key the client
    app sends, and two users sharing one API key are two tenants.
    """
    context = _mapping(_mapping(event).get("requestContext"))
    authorizer = _mapping(context.get("authorizer"))
    identity = _mapping(context.get("identity"))
    iam = _mapping(authorizer.get("iam"))
    lambda_context = _mapping(authorizer.get("lambda"))
    for found in (
        _jwt(authorizer),
        _lambda(authorizer, lambda_context),
        _cognito_identity(identity, iam),
        _iam(identity, iam),
        _client_certificate(context, identity),
        ("api-key", identity["apiKeyId"]) if _present(identity.get("apiKeyId")) else None,
    ):
        if found is not None:
            return found
    return None


def principal_or_anonymous(event: Any) -> Principal | str | None:
    """`idempotent_http`'s default scope: the principal; `ANONYMOUS` when no authorizer
    vouched for anyone; None, which the engine refuses with `ScopeMissingError` (nothing
    runs), when an authorizer vouched for someone it does not name (a JWT without `sub`,
    an HTTP API Lambda authorizer returning neither `principalId` nor context). Guessing
    "anonymous" there would put every caller of that authorizer in one scope."""
    principal = authorizer_principal(event)
    if principal is not None:
        return principal
    authorizer = _mapping(_mapping(_mapping(event).get("requestContext")).get("authorizer"))
    unnamed = "lambda" in authorizer or bool(
        _mapping(authorizer.get("jwt")).get("claims") or _mapping(authorizer.get("claims"))
    )
    return None if unnamed else ANONYMOUS


def _jwt(authorizer: Mapping[str, Any]) -> Principal | None:
    """HTTP API JWT authorizers put the claims under `jwt`, REST Cognito user pool
    authorizers (and HTTP APIs with payload 1.0) directly. `sub` is unique per issuer
    only, so the issuer is part of the principal. Tokens without `sub` identify no one."""
    claims = _mapping(_mapping(authorizer.get("jwt")).get("claims")) or _mapping(
        authorizer.get("claims")
    )
    if not _present(claims.get("sub")):
        return None
    return ("jwt", claims.get("iss"), claims["sub"])


def _lambda(authorizer: Mapping[str, Any], context: Mapping[str, Any]) -> Principal | None:
    """A Lambda authorizer: its `principalId` is the principal, even where its context
    differs from caller to caller (pass `scope=` to use the context instead). REST APIs
    carry it beside the context; HTTP APIs pass only the context, so their authorizers
    return it there. An HTTP API authorizer that names no principal but returns a context
    vouched for someone all the same: the whole context is the principal, never anonymous."""
    for principal_id in (authorizer.get("principalId"), context.get("principalId")):
        if _present(principal_id):
            return ("lambda", principal_id)
    if context:
        return ("lambda-context", dict(context))
    return None


def _cognito_identity(identity: Mapping[str, Any], iam: Mapping[str, Any]) -> Principal | None:
    """IAM auth with Cognito identity pool credentials: every caller assumes the pool's
    role, so the ARN is the same for all of them; the identity id tells them apart."""
    cognito = _mapping(iam.get("cognitoIdentity"))
    for pool, identity_id in (
        (identity.get("cognitoIdentityPoolId"), identity.get("cognitoIdentityId")),
        (cognito.get("identityPoolId"), cognito.get("identityId")),
    ):
        if _present(identity_id):
            return ("cognito-identity", pool, identity_id)
    return None


def _iam(identity: Mapping[str, Any], iam: Mapping[str, Any]) -> Principal | None:
    """IAM auth: the caller's ARN (an assumed role's includes the session name, so two
    people signed in to one role through IAM Identity Center stay apart) and its unique id
    (a user deleted and created again under the same name is another principal)."""
    for user_arn, user_id in (
        (identity.get("userArn"), identity.get("user")),
        (iam.get("userArn"), iam.get("userId")),
    ):
        if _present(user_arn):
            return ("iam", user_arn, user_id)
    return None


def _client_certificate(
    context: Mapping[str, Any], identity: Mapping[str, Any]
) -> Principal | None:
    """Mutual TLS: API Gateway checked the certificate against the domain's truststore.
    The subject under its issuer is the client; a renewed certificate is the same one."""
    for cert in (
        _mapping(_mapping(context.get("authentication")).get("clientCert")),
        _mapping(identity.get("clientCert")),
    ):
        if _present(cert.get("subjectDN")):
            return ("client-certificate", cert.get("issuerDN"), cert["subjectDN"])
    return None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _present(value: Any) -> bool:
    return value is not None and str(value) != ""
