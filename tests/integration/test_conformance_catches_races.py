"""The conformance suite's race tests catch a store that is atomic only most of the time.

Each racy store of `tests.conformance.racy_stores` (a real DynamoDB Local table under a
claim, completion or release that checks by a read, then writes) keeps the contract one
caller at a time: the tests that call it so pass. The race tests that race its step must
fail, in every run: a suite that passed it would pass a store that runs a key twice."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest

from lambda_idempotency import DynamoDBStore
from tests.conformance import test_races, test_store_contract
from tests.conformance.racy_stores import (
    RACY,
    ReadThenWriteClaim,
    UnfencedCompletion,
    UnfencedRelease,
    factory,
)

pytestmark = pytest.mark.dynamodb_local

CLAIMS = test_races.test_claims_racing_for_a_free_key_have_exactly_one_winner
TAKEOVER = test_races.test_a_takeover_racing_the_late_holders_completion_has_exactly_one_owner
RELEASE = test_races.test_a_release_racing_a_takeover_leaves_one_owner

CAUGHT: list[tuple[type[DynamoDBStore], Callable[..., None], dict[str, Any]]] = [
    *(
        (ReadThenWriteClaim, CLAIMS, {"state": s})
        for s in ("fresh", "expired", "lapsed", "released")
    ),
    (ReadThenWriteClaim, TAKEOVER, {}),
    (UnfencedCompletion, TAKEOVER, {}),
    (UnfencedRelease, RELEASE, {}),
]
"""Each racy store, and the race tests of the step it breaks."""

ONE_AT_A_TIME = [
    test_store_contract.test_a_free_key_is_claimed_and_a_second_claim_gets_the_holder,
    test_store_contract.test_a_lapsed_lease_is_taken_over_only_past_the_skew_and_the_zombie_is_fenced,
    test_store_contract.test_an_expired_record_is_absent_to_a_claim_past_the_skew_and_read_as_stored,
    test_store_contract.test_a_release_frees_the_key_and_a_stale_release_is_refused,
    test_store_contract.test_a_release_never_undoes_a_completion,
    test_store_contract.test_the_one_call_completion_is_fenced_too,
]
"""The contract's tests of claims, takeovers, fences and releases, one caller at a time."""


@pytest.fixture(scope="module")
def client(dynamodb_local_endpoint: str) -> Any:
    return boto3.client(
        "dynamodb",
        endpoint_url=dynamodb_local_endpoint,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )


@pytest.fixture
def racers() -> Iterator[test_races.Racers]:
    racing = test_races.Racers()
    yield racing
    racing.pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.parametrize(
    ("kind", "race", "given"),
    CAUGHT,
    ids=[
        f"{kind.__name__}-{race.__name__}-{'-'.join(given.values())}"
        for kind, race, given in CAUGHT
    ],
)
def test_the_race_tests_fail_a_racy_store(
    client: Any,
    racers: test_races.Racers,
    kind: type[DynamoDBStore],
    race: Callable[..., None],
    given: dict[str, Any],
) -> None:
    store_factory = factory(kind, client)

    with pytest.raises(AssertionError, match=r"winners per key|faults in"):
        race(store_factory=store_factory, store=store_factory(), racers=racers, **given)


@pytest.mark.parametrize("kind", RACY, ids=[kind.__name__ for kind in RACY])
@pytest.mark.parametrize("one", ONE_AT_A_TIME, ids=[test.__name__ for test in ONE_AT_A_TIME])
def test_a_racy_store_keeps_the_contract_one_caller_at_a_time(
    client: Any, kind: type[DynamoDBStore], one: Callable[..., None]
) -> None:
    """Why the suite needs the race tests: without them, these stores pass."""
    store_factory = factory(kind, client)
    fixtures = {"store_factory": store_factory, "store": store_factory()}
    one(**{name: fixtures[name] for name in inspect.signature(one).parameters})
