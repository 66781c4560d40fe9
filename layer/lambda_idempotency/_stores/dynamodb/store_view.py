"""The DynamoDB store as its parts see it: the few attributes and the one call they use.

The parts (`record_items`, `claim_rewrites`, `result_placement`, `decoration_check`,
`operator_actions`) are functions of a `StoreView`, which they read live off the store at
each call (the table name resolves on first use; a test may swap the store's caller): no
part imports `store` back, not even for a type.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..record import AttributeNames
    from .layout import Layout


class Send(Protocol):
    """A store's `_send`: one call for the protocol's `step`, an expected refusal answered."""

    def __call__(
        self,
        operation: str,
        pk: str | None,
        expected: Iterable[str],
        *,
        step: str | None = None,
        **request: Any,
    ) -> tuple[dict[str, Any], str | None]: ...


class StoreView(Protocol):
    """What a part reads of a `DynamoDBStore`."""

    @property
    def names(self) -> AttributeNames: ...
    @property
    def layout(self) -> Layout: ...
    @property
    def sort_key_attr(self) -> str | None: ...
    @property
    def static_pk_value(self) -> str: ...
    @property
    def table_name(self) -> str: ...
    @property
    def _send(self) -> Send:
        """The store's one way to call DynamoDB (`calls.send` over its client)."""


class PlacementView(StoreView, Protocol):
    """What placing a result (`result_placement`) reads beyond a `StoreView`."""

    @property
    def _overheads(self) -> dict[tuple[int, int, int], int]:
        """The completed record's size but its result, by the lengths that vary (a cache)."""

    def inline_limit(self, pk: str, *, owner: str, payload_hash: str | None) -> int:
        """`result_placement.inline_limit`, or what replaces it (a test, a benchmark)."""
