"""The scope `idempotent_http` gives a request: one per principal, of every authorizer kind,
encoded so that no two principals can ever share it."""

from __future__ import annotations

import copy
import functools
import operator
from typing import Any

import pytest

from lambda_idempotency._base import keys as _keys
from lambda_idempotency._tenant import ANONYMOUS, authorizer_principal, principal_or_anonymous
from tests.http_events import http_event, jwt
from tests.tenant_events import KINDS, principal_event

SAME_SCOPE_BY_DESIGN = {"rest-lambda-shared-principal-id", "alb-oidc"}
"""A REST Lambda authorizer's principalId is what counts, and ALB headers are not trusted
by default: the two principals of these kinds share a scope (see the tests below)."""

DISTINCT = [kind for kind in KINDS if kind not in SAME_SCOPE_BY_DESIGN]

COGNITO_POOL = "us-east-1:4f291106-8703-466b-8f2b-3ecee1ca56ce"
COGNITO_A = "us-east-1:3f291106-8703-466b-8f2b-3ecee1ca56ce"
USER_POOL = "https://cognito-idp.us-east-1.amazonaws.com/us-east-1_Example"
USER_A = "7d8ca528-4931-4254-9273-ea5ee853f271"

EXPECTED_A = {
    "http-api-jwt": ("jwt", USER_POOL, USER_A),
    "http-api-jwt-ambiguous": ("jwt", "https://idp.example x", "y"),
    "http-api-jwt-two-issuers": ("jwt", "https://login.example-a.com/", "user-1"),
    "rest-cognito-user-pool": ("jwt", USER_POOL, USER_A),
    "rest-lambda": ("lambda", "tenant-a"),
    "rest-lambda-shared-principal-id": ("lambda", "user"),
    "rest-iam-user": ("iam", "arn:aws:iam::111122223333:user/alice", "AIDACKCEVSQ6C2EXAMPLE"),
    "rest-iam-role-sessions": (
        "iam",
        "arn:aws:sts::111122223333:assumed-role/AWSReservedSSO_Payments_0123456789abcdef/"
        "alice@example.com",
        "AROA3XFRBF535PLBIFPI4:alice@example.com",
    ),
    "rest-iam-cognito-identity-pool": ("cognito-identity", COGNITO_POOL, COGNITO_A),
    "rest-api-key": ("api-key", "o0y1ar8fe6"),
    "http-api-iam": ("iam", "arn:aws:iam::111122223333:user/alice", "AIDACKCEVSQ6C2EXAMPLE"),
    "http-api-iam-cognito-identity-pool": ("cognito-identity", COGNITO_POOL, COGNITO_A),
    "http-api-lambda": ("lambda", "tenant-a"),
    "http-api-lambda-simple-response": ("lambda-context", {"userId": "user-a", "plan": "gold"}),
    "http-api-mutual-tls": (
        "client-certificate",
        "CN=Example Private CA",
        "CN=client-a.example.com",
    ),
    "function-url-iam": ("iam", "arn:aws:iam::111122223333:user/alice", "AIDACKCEVSQ6C2EXAMPLE"),
    "function-url-iam-cognito-identity-pool": ("cognito-identity", COGNITO_POOL, COGNITO_A),
    "alb-oidc": ANONYMOUS,
}


def scope(event: Any) -> Any:
    return principal_or_anonymous(event)


def pk(event: Any, key: str = "k-1") -> str:
    """The record's pk for this request, as the engine computes it."""
    return _keys.key_hash("ns", scope(event), key)


def test_every_kind_in_the_samples_has_an_expected_scope() -> None:
    assert set(EXPECTED_A) == set(KINDS)


@pytest.mark.parametrize("kind", KINDS)
def test_the_scope_of_each_authorizer_kind(kind: str) -> None:
    assert scope(principal_event(kind, "a")) == EXPECTED_A[kind]


@pytest.mark.parametrize("kind", DISTINCT)
def test_two_principals_of_one_kind_never_share_a_record(kind: str) -> None:
    a, b = principal_event(kind, "a"), principal_event(kind, "b")
    assert scope(a) != scope(b)
    assert pk(a) != pk(b)
    assert pk(a) == pk(principal_event(kind, "a"))  # and each principal's retry finds its own


def test_records_are_one_per_principal_across_every_sample() -> None:
    """Two samples share a record exactly when they name the same principal: the same
    Cognito user through REST and HTTP APIs, the same IAM user through three front doors."""
    scopes = {(kind, who): scope(principal_event(kind, who)) for kind in DISTINCT for who in "ab"}
    records = {pk(principal_event(kind, who)) for kind, who in scopes}
    assert len(records) == len({repr(value) for value in scopes.values()})
    assert scopes["rest-cognito-user-pool", "a"] == scopes["http-api-jwt", "a"]
    assert scopes["rest-iam-user", "a"] == scopes["http-api-iam", "a"]
    assert scopes["function-url-iam", "a"] == scopes["http-api-iam", "a"]
    # alice of another account is another principal
    assert scopes["function-url-iam", "b"] != scopes["function-url-iam", "a"]


def test_same_value_in_two_kinds_is_two_scopes() -> None:
    """A principalId, an API key id and a JWT subject that happen to be the same string."""
    lambda_event = http_event("rest-api", authorizer={"principalId": "x"})
    key_event = http_event("rest-api")
    key_event["requestContext"]["identity"]["apiKeyId"] = "x"
    jwt_event = http_event("http-api", authorizer={"jwt": {"claims": {"sub": "x"}}})
    assert len({pk(lambda_event), pk(key_event), pk(jwt_event)}) == 3


# -- the two holes the attack found ---------------------------------------------------------


def test_cognito_identities_behind_one_role_are_two_tenants() -> None:
    """Every Cognito identity pool caller assumes the pool's role: userArn is the same."""
    for kind, where in (
        ("rest-iam-cognito-identity-pool", ("identity",)),
        ("http-api-iam-cognito-identity-pool", ("authorizer", "iam")),
        ("function-url-iam-cognito-identity-pool", ("authorizer", "iam")),
    ):
        a, b = principal_event(kind, "a"), principal_event(kind, "b")
        callers = [functools.reduce(operator.getitem, where, e["requestContext"]) for e in (a, b)]
        assert callers[0]["userArn"] == callers[1]["userArn"]
        assert pk(a) != pk(b)


def test_a_jwt_issuer_and_subject_cannot_run_into_each_other() -> None:
    """`iss` "a x" + `sub` "y" met `iss` "a" + `sub` "x y" in the old "jwt:{iss} {sub}"."""
    a = principal_event("http-api-jwt-ambiguous", "a")
    b = principal_event("http-api-jwt-ambiguous", "b")
    claims = [event["requestContext"]["authorizer"]["jwt"]["claims"] for event in (a, b)]
    assert len({f"jwt:{c['iss']} {c['sub']}" for c in claims}) == 1  # the old collision
    assert pk(a) != pk(b)


def test_no_split_of_one_text_into_issuer_and_subject_collides() -> None:
    """Every way to cut `a b:c"d\\ e` into (iss, sub), with separators and quotes inside."""
    text = 'a b:c"d\\ e'
    records = {
        pk(http_event("http-api", authorizer=jwt(text[cut:], issuer=text[:cut])))
        for cut in range(1, len(text))
    }
    assert len(records) == len(text) - 1


def test_empty_missing_and_run_together_parts_are_distinct() -> None:
    """An IAM caller's ARN and unique id: "" is not null, and "a"+"b" is not "ab"."""
    parts = [("ab", ""), ("ab", None), ("a", "b"), ("a", "b "), ("a b", "")]
    records = {
        pk(http_event("function-url", authorizer={"iam": {"userArn": arn, "userId": user_id}}))
        for arn, user_id in parts
    }
    assert len(records) == len(parts)


# -- precedence ----------------------------------------------------------------------------


def test_a_jwt_user_is_one_tenant_whatever_api_key_the_app_sends() -> None:
    event = principal_event("rest-cognito-user-pool", "a")
    with_key = copy.deepcopy(event)
    with_key["requestContext"]["identity"]["apiKeyId"] = "o0y1ar8fe6"
    assert scope(with_key) == scope(event) == EXPECTED_A["rest-cognito-user-pool"]


def test_two_users_sharing_an_api_key_are_two_tenants() -> None:
    a, b = (principal_event("rest-cognito-user-pool", who) for who in "ab")
    for event in (a, b):
        event["requestContext"]["identity"]["apiKeyId"] = "o0y1ar8fe6"
    assert pk(a) != pk(b)


def test_a_cognito_identity_wins_over_the_role_it_assumed() -> None:
    event = principal_event("rest-iam-cognito-identity-pool", "a")
    assert event["requestContext"]["identity"]["userArn"]
    assert scope(event)[0] == "cognito-identity"


def test_a_lambda_authorizers_principal_id_counts_not_its_context() -> None:
    """Documented: callers with one principalId are one tenant; scope= selects context."""
    a, b = (principal_event("rest-lambda-shared-principal-id", who) for who in "ab")
    assert scope(a) == scope(b) == ("lambda", "user")


def test_an_authorizer_principal_wins_over_the_client_certificate() -> None:
    """The HTTP API sample carries a client certificate; a JWT user still decides."""
    event = principal_event("http-api-jwt", "a")
    assert event["requestContext"]["authentication"]["clientCert"]["subjectDN"]
    assert scope(event)[0] == "jwt"


# -- anonymous and refused -----------------------------------------------------------------


@pytest.mark.parametrize("shape", ["rest-api", "function-url", "alb", "alb-multi-value"])
def test_requests_no_authorizer_vouched_for_share_the_anonymous_scope(shape: str) -> None:
    event = http_event(shape)
    event["requestContext"].pop("authorizer", None)
    assert authorizer_principal(event) is None
    assert scope(event) == ANONYMOUS


def test_headers_never_make_a_principal() -> None:
    """Not on API Gateway (a client can send any header), nor on ALB by default."""
    forged = {"x-amzn-oidc-identity": "victim", "x-amzn-oidc-data": "eyJ.x.y", "x-tenant": "t"}
    for shape in ("rest-api", "alb", "alb-multi-value"):
        assert scope(http_event(shape, headers=forged)) == ANONYMOUS
    assert scope(principal_event("alb-oidc", "a")) == ANONYMOUS


@pytest.mark.parametrize(
    "authorizer",
    [
        {"jwt": {"claims": {"iss": USER_POOL, "client_id": "app"}, "scopes": None}},
        {"lambda": {}},
        {"lambda": None},
    ],
    ids=["jwt-without-sub", "lambda-empty-context", "lambda-null-context"],
)
def test_an_authorizer_that_names_no_one_is_refused_not_anonymous(
    authorizer: dict[str, Any],
) -> None:
    """None makes the engine raise ScopeMissingError: guessing "anonymous" would put every
    caller the authorizer let in into one scope."""
    event = http_event("http-api", authorizer=authorizer)
    event["requestContext"].pop("authentication")
    assert scope(event) is None


def test_a_client_certificate_names_the_caller_when_the_jwt_does_not() -> None:
    """The HTTP API sample: JWT claims without sub, and a client certificate."""
    assert scope(http_event("http-api")) == (
        "client-certificate",
        "Example issuer",
        "www.example.com",
    )


def test_the_anonymous_scope_is_no_principal() -> None:
    """ANONYMOUS is a string; principals are tuples: a principalId "anonymous" is not it."""
    event = http_event("rest-api", authorizer={"principalId": ANONYMOUS})
    assert scope(event) != ANONYMOUS
    assert pk(event) != pk(http_event("rest-api"))
