"""The per-call object: who holds the key, until when, and the writes to commit with it."""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from typing import Any

from ._errors import ConfigurationError, NoActiveExecutionError

_TRANSACT_ACTIONS = frozenset({"Put", "Update", "Delete", "ConditionCheck"})
MAX_ENLISTED_WRITES = 99
"""DynamoDB transactions hold 100 items; the idempotency record takes one."""


class Execution:
    """Created for each protected call; reach it with `current_execution()` in the handler.

    key_hash: the stored `pk`, or None when the call runs unprotected (disabled, no key).
    owner: the claim's fencing token. lease_until_ms, claimed_at_ms: epoch milliseconds.
    answer_by_ms: when the invocation must answer; completion retries stop there.
    writes: the enlisted business writes, committed with the result.
    """

    __slots__ = ("answer_by_ms", "claimed_at_ms", "key_hash", "lease_until_ms", "owner", "writes")

    def __init__(self, key_hash: str | None, owner: str | None, lease_until_ms: int | None) -> None:
        self.key_hash = key_hash
        self.owner = owner
        self.lease_until_ms = lease_until_ms
        self.claimed_at_ms: int | None = None
        self.answer_by_ms: int | None = None
        self.writes: list[Mapping[str, Any]] = []

    def __repr__(self) -> str:
        return f"Execution(key_hash={self.key_hash!r}, writes={len(self.writes)})"

    def add_write(self, transact_item: Mapping[str, Any]) -> None:
        """Enlist one `TransactWriteItems` item (`{"Put": {...}}`, `Update`, `Delete` or
        `ConditionCheck`, low-level client shape). It commits in the same transaction as the
        stored result: both land, or neither does. Discarded if the result is not stored."""
        if not isinstance(transact_item, Mapping) or len(transact_item) != 1:
            raise ConfigurationError(
                "add_write takes one TransactWriteItems item, e.g. {'Put': {...}}"
            )
        (action,) = transact_item
        if action not in _TRANSACT_ACTIONS:
            raise ConfigurationError(
                f"add_write: {action!r} is not one of {', '.join(sorted(_TRANSACT_ACTIONS))}"
            )
        request = transact_item[action]
        if not isinstance(request, Mapping) or not isinstance(request.get("TableName"), str):
            raise ConfigurationError(f"add_write: {action} needs a TableName")
        for part in ("Item", "Key"):
            values = request.get(part)
            if values is not None and not _low_level(values):
                raise ConfigurationError(
                    f"add_write: {action}.{part} must be in the low-level client's shape, "
                    'e.g. {"id": {"S": "42"}}'
                )
        if len(self.writes) >= MAX_ENLISTED_WRITES:
            raise ConfigurationError(f"at most {MAX_ENLISTED_WRITES} writes can be enlisted")
        self.writes.append(transact_item)


def _low_level(values: Any) -> bool:
    """Every attribute value typed, as the low-level client sends them: {"S": "42"}."""
    return isinstance(values, Mapping) and all(
        isinstance(value, Mapping) and len(value) == 1 for value in values.values()
    )


_current: contextvars.ContextVar[Execution | None] = contextvars.ContextVar(
    "lambda_idempotency_execution", default=None
)
lambda_context: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "lambda_idempotency_lambda_context", default=None
)
"""The Lambda context of the decorated handler that is running, so nested
`idempotent_function` calls lease for the invocation's remaining time too."""


def current_execution() -> Execution:
    """The execution of the innermost decorated call that is running."""
    execution = _current.get()
    if execution is None:
        raise NoActiveExecutionError("current_execution() called outside an idempotent call")
    return execution


def activate(execution: Execution) -> contextvars.Token[Execution | None]:
    return _current.set(execution)


def deactivate(token: contextvars.Token[Execution | None]) -> None:
    _current.reset(token)
