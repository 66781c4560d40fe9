"""Faults on the wire between a call and DynamoDB, through botocore's `before-send` event.

The hook looks at the innermost call in progress (`Wire.calls`, a stack: a handler may call
another decorated function) and applies that call's faults:

- a lost answer: the request is sent to DynamoDB for real, then the answer is dropped with a
  `ReadTimeoutError`, so botocore retries and the retry meets what the first attempt wrote;
- a killed process: once the handler "died", nothing the call sends reaches DynamoDB. The
  hook raises `Killed` (a BaseException, as the kill is not an error anyone may handle) at the
  first request after the death, which is the release, so the claim stays as it was, exactly
  as after SIGKILL, whatever request the core uses to release.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from botocore.exceptions import ReadTimeoutError
from botocore.httpsession import URLLib3Session

Lose = Literal["claim", "finish"] | None
"""Which answer to lose: the claim's (the write of an IN_PROGRESS record), or that of the first
write after the handler ended (the completion, or the release)."""

WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems"})


class Killed(BaseException):
    """The process died (SIGKILL): raised by the handler and by every request after it."""


@dataclass
class Faults:
    lose: Lose = None
    handler_ended: bool = False
    dead: bool = False
    lost: int = 0
    """Answers lost so far (at most one per call)."""


class Wire:
    def __init__(self, client: Any) -> None:
        self.calls: list[Faults] = []
        self._http = URLLib3Session()
        client.meta.events.register("before-send.dynamodb", self._before_send)

    def close(self) -> None:
        self._http.close()

    def _before_send(self, request: Any, **_: Any) -> None:
        if not self.calls:
            return
        faults = self.calls[-1]
        if faults.dead:
            raise Killed
        if faults.lost or faults.lose is None:
            return
        operation = _operation(request)
        if faults.lose == "claim" and not (operation == "PutItem" and _claims(request)):
            return
        if faults.lose == "finish" and not (faults.handler_ended and operation in WRITES):
            return
        faults.lost += 1
        self._http.send(request)  # DynamoDB applies it ...
        raise ReadTimeoutError(endpoint_url=request.url)  # ... and the answer is lost


def _operation(request: Any) -> str:
    target = request.headers.get("X-Amz-Target", b"")
    target = target.decode() if isinstance(target, bytes) else str(target)
    return target.rsplit(".", 1)[-1]


def _claims(request: Any) -> bool:
    body = request.body
    item = json.loads(body.decode() if isinstance(body, bytes) else body).get("Item", {})
    return bool(item.get("status", {}).get("S") == "IN_PROGRESS")
