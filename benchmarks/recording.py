"""Record DynamoDB's real answers once, then answer the same requests from the recording.

The replay happens in botocore's `before-send` hook, which returns an `AWSResponse` in place
of the network: botocore still builds, serializes and signs every request and parses every
response (errors included), so only the wire and the server are taken out of the timing.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from botocore.awsrequest import AWSResponse


@dataclass(frozen=True)
class Exchange:
    """One response as DynamoDB sent it, and the operation that asked for it."""

    operation: str
    status: int
    headers: dict[str, str]
    body: bytes


class ReplayMismatchError(RuntimeError):
    """A library sent a request the recording does not answer: the replay would be a lie."""


class Recorder:
    """Counts every request sent on `events` (a client's `meta.events`, or the direct path's
    own: their round trips) and keeps every response received, in order, until detached.

    A client's responses are read on `response-received` (not before-parse: botocore before
    1.35 has none); the direct path emits no such event, but `after-call` with the response
    of each call (DynamoDB Local answers each request once: no retry to miss)."""

    def __init__(self, events: Any, answers: str = "response-received") -> None:
        self.requests: list[str] = []
        self.exchanges: list[Exchange] = []
        self._events = events
        self._answers = f"{answers}.dynamodb"
        events.register("before-send.dynamodb", self._count)
        keep = self._keep if answers == "response-received" else self._keep_call
        events.register(self._answers, keep)
        self._keeper = keep

    def _count(self, event_name: str, **_: Any) -> None:
        self.requests.append(event_name.rsplit(".", 1)[-1])

    def _keep(self, event_name: str, response_dict: dict[str, Any] | None, **_: Any) -> None:
        if response_dict is None:
            return  # no answer came (a connection error): nothing to replay
        self.exchanges.append(
            Exchange(
                operation=event_name.rsplit(".", 1)[-1],
                status=int(response_dict["status_code"]),
                headers=dict(response_dict["headers"]),
                body=bytes(response_dict["body"]),
            )
        )

    def _keep_call(self, event_name: str, http_response: Any, **_: Any) -> None:
        self.exchanges.append(
            Exchange(
                operation=event_name.rsplit(".", 1)[-1],
                status=int(http_response.status_code),
                headers=dict(http_response.headers),
                body=bytes(http_response.content),
            )
        )

    def take(self) -> tuple[list[str], list[Exchange]]:
        """The requests sent and the responses received since the last take."""
        taken = self.requests, self.exchanges
        self.requests, self.exchanges = [], []
        return taken

    def detach(self) -> None:
        self._events.unregister("before-send.dynamodb", self._count)
        self._events.unregister(self._answers, self._keeper)


_NOT_RECORDED = Exchange(
    operation="",
    status=400,
    headers={"content-type": "application/x-amz-json-1.0"},
    body=b'{"__type":"com.amazon.coral.validate#ValidationException","message":"not recorded"}',
)
"""A refusal botocore does not retry, for requests the recording does not answer."""


class _Body:
    """What `AWSResponse.content` reads: the recorded bytes, as one chunk."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


class Replayer:
    """Answers a client's requests from a script of exchanges, cycling through it.

    Until `play` is called it answers nothing and the request goes to the network. Every
    answered request must be for the operation the script expects next; otherwise the
    mismatch is remembered (botocore would swallow an exception raised here into a retry)
    and `check` raises it.
    """

    def __init__(self, events: Any) -> None:
        self._script: list[Exchange] | None = None
        self._next = 0
        self.mismatch: str | None = None
        events.register("before-send.dynamodb", self._answer)

    def play(self, script: list[Exchange]) -> None:
        self._script, self._next, self.mismatch = list(script), 0, None

    def _answer(self, request: Any, event_name: str, **_: Any) -> AWSResponse | None:
        script = self._script
        if script is None:
            return None
        operation = event_name.rsplit(".", 1)[-1]
        if not script:
            self.mismatch = self.mismatch or f"{operation} sent where no request was expected"
            exchange = _NOT_RECORDED
        else:
            exchange = script[self._next % len(script)]
            self._next += 1
            if exchange.operation != operation and self.mismatch is None:
                self.mismatch = f"{operation} sent where {exchange.operation} was recorded"
        return AWSResponse(request.url, exchange.status, exchange.headers, _Body(exchange.body))

    def check(self) -> None:
        if self.mismatch is not None:
            raise ReplayMismatchError(self.mismatch)
