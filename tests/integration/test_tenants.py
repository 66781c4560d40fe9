"""One tenant never replays another's response: for every authorizer kind, two principals
send the same `Idempotency-Key` with the same body to one `idempotent_http` handler on
DynamoDB Local. Each gets its own run, and each one's retry replays its own response."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lambda_idempotency import DynamoDBStore, ScopeMissingError, idempotent_http
from tests.http_events import header_field, http_event
from tests.tenant_events import KINDS, principal_event, shape_of

KEY = "3b0f4c9e-8d1a-4f7e-9a63-0c5d2e7b1f48"
BODY = '{"amount_cents": 2500, "currency": "EUR"}'
SAME_SCOPE_BY_DESIGN = {"rest-lambda-shared-principal-id", "alb-oidc"}
ALB_OIDC_SCOPE = 'headers."x-amzn-oidc-identity" || multiValueHeaders."x-amzn-oidc-identity"[0]'
"""The documented opt-in for ALB listeners that authenticate every request."""


def payments(store: DynamoDBStore, **options: Any) -> tuple[Any, list[str]]:
    """A create-payment handler: each run is one payment (the effect), answered 201."""
    effects: list[str] = []

    @idempotent_http(store=store, **options)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        effects.append(f"p-{len(effects) + 1}")
        response: dict[str, Any] = {
            "statusCode": 201,
            "headers": {"Content-Type": "application/json"},
            "body": json.dumps({"id": effects[-1]}),
        }
        if "elb" in event["requestContext"]:
            response["statusDescription"] = "201 Created"
        return response

    return handler, effects


def request(kind: str, who: str) -> dict[str, Any]:
    return principal_event(
        kind, who, headers={"Content-Type": "application/json", "Idempotency-Key": KEY}, body=BODY
    )


def replayed(response: dict[str, Any]) -> bool:
    return "idempotent-replayed" in header_field(response)


def stored(store: DynamoDBStore) -> int:
    return len(store.client.scan(TableName=store.table_name)["Items"])


def two_tenants_one_key(store: DynamoDBStore, kind: str, **options: Any) -> None:
    """Both run, neither is marked replayed, each retry replays its own response."""
    handler, effects = payments(store, **options)

    a = handler(request(kind, "a"), None)
    b = handler(request(kind, "b"), None)

    assert effects == ["p-1", "p-2"]
    assert (json.loads(a["body"]), json.loads(b["body"])) == ({"id": "p-1"}, {"id": "p-2"})
    assert not replayed(a)
    assert not replayed(b)

    b_again = handler(request(kind, "b"), None)
    a_again = handler(request(kind, "a"), None)

    assert effects == ["p-1", "p-2"]
    assert (a_again["body"], b_again["body"]) == (a["body"], b["body"])
    assert replayed(a_again)
    assert replayed(b_again)
    assert stored(store) == 2


@pytest.mark.parametrize("kind", [kind for kind in KINDS if kind not in SAME_SCOPE_BY_DESIGN])
def test_two_principals_with_one_key_get_two_runs_and_their_own_replays(
    store: DynamoDBStore, kind: str
) -> None:
    """cache_size=0: every retry is answered from DynamoDB Local, not from memory."""
    two_tenants_one_key(store, kind, cache_size=0)


def test_the_warm_cache_keeps_tenants_apart_too(store: DynamoDBStore) -> None:
    two_tenants_one_key(store, "http-api-iam-cognito-identity-pool")


def test_lambda_authorizer_context_as_the_scope_when_the_principal_id_is_shared(
    store: DynamoDBStore,
) -> None:
    """One principalId for every caller: the documented scope= selects the tenant."""
    two_tenants_one_key(
        store,
        "rest-lambda-shared-principal-id",
        scope="requestContext.authorizer.tenantId",
        cache_size=0,
    )


@pytest.mark.parametrize("shape", ["alb", "alb-multi-value"])
def test_alb_oidc_identity_as_the_scope_when_opted_in(store: DynamoDBStore, shape: str) -> None:
    handler, effects = payments(store, scope=ALB_OIDC_SCOPE, cache_size=0)
    headers = {"Content-Type": "application/json", "Idempotency-Key": KEY}

    def alb(who: str) -> dict[str, Any]:
        oidc = principal_event("alb-oidc", who)["headers"]
        names = ("x-amzn-oidc-identity", "x-amzn-oidc-data")
        return http_event(
            shape, headers={**headers, **{name: oidc[name] for name in names}}, body=BODY
        )

    a, b = handler(alb("a"), None), handler(alb("b"), None)
    a_again = handler(alb("a"), None)

    assert effects == ["p-1", "p-2"]
    assert not replayed(a)
    assert not replayed(b)
    assert replayed(a_again)
    assert a_again["body"] == a["body"]
    assert shape_of("alb-oidc") == "alb"


def test_anonymous_callers_share_one_scope(store: DynamoDBStore) -> None:
    """Documented: with no authorizer, the key alone decides; the second caller replays."""
    handler, effects = payments(store, cache_size=0)
    headers = {"Content-Type": "application/json", "Idempotency-Key": KEY}

    callers = [http_event("rest-api", headers=headers, body=BODY) for _ in range(2)]
    callers[1]["requestContext"]["identity"]["sourceIp"] = "198.51.100.7"

    first = handler(callers[0], None)
    other = handler(callers[1], None)

    assert effects == ["p-1"]
    assert replayed(other)
    assert other["body"] == first["body"]


def test_one_user_with_two_api_keys_is_one_tenant(store: DynamoDBStore) -> None:
    """A JWT user decides the scope; the API key the client app sends does not."""
    handler, effects = payments(store, cache_size=0)
    first, again = request("rest-cognito-user-pool", "a"), request("rest-cognito-user-pool", "a")
    first["requestContext"]["identity"]["apiKeyId"] = "o0y1ar8fe6"
    again["requestContext"]["identity"]["apiKeyId"] = "k9s8ndq2vx"

    handler(first, None)
    retry = handler(again, None)

    assert effects == ["p-1"]
    assert replayed(retry)


def test_two_users_sharing_an_api_key_are_two_tenants(store: DynamoDBStore) -> None:
    handler, effects = payments(store, cache_size=0)
    a, b = request("rest-cognito-user-pool", "a"), request("rest-cognito-user-pool", "b")
    for event in (a, b):
        event["requestContext"]["identity"]["apiKeyId"] = "o0y1ar8fe6"

    responses = [handler(a, None), handler(b, None)]

    assert effects == ["p-1", "p-2"]
    assert not any(replayed(response) for response in responses)


@pytest.mark.parametrize(
    "authorizer",
    [{"jwt": {"claims": {"iss": "https://idp.example", "client_id": "app"}}}, {"lambda": {}}],
    ids=["jwt-without-sub", "lambda-without-context"],
)
def test_an_authorizer_that_names_no_one_is_refused_and_nothing_runs(
    store: DynamoDBStore, authorizer: dict[str, Any]
) -> None:
    handler, effects = payments(store)
    event = http_event(
        "http-api",
        headers={"Content-Type": "application/json", "Idempotency-Key": KEY},
        body=BODY,
        authorizer=authorizer,
    )
    event["requestContext"].pop("authentication")

    with pytest.raises(ScopeMissingError):
        handler(event, None)

    assert effects == []
    assert stored(store) == 0
