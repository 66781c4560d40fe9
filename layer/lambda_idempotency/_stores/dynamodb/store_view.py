"""The DynamoDB store as its parts see it: the few attributes and the one call they use.

The parts (`record_items`, `claim_rewrites`, `result_placement`, `decoration_check`,
`operator_actions`) are functions of a `StoreView`, which they read live off the store at
each call (the table name resolves on first use; a test may swap the store's caller): no
part imports `store` back, not even for a type.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..record import AttributeNames
    from .calls import Send
    from .layout import Layout


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
