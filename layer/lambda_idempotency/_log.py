"""Structured log lines: one JSON object per outcome, with the hashed key, never the raw one."""

from __future__ import annotations

import json
import logging
from typing import Any

logger = logging.getLogger("lambda_idempotency")


def emit(level: int, outcome: str, key_hash: str | None, **fields: Any) -> None:
    if not logger.isEnabledFor(level):
        return
    record = {"idempotency": outcome, "key_hash": key_hash, **fields}
    logger.log(level, json.dumps(record, default=str), extra={"idempotency": record})
