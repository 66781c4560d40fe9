"""A script's reply read straight off a kept connection's socket, for the lean path.

redis-py's own reader (its RESP2/RESP3 parser on a socket buffer) spends about as much CPU
on one small reply as the rest of a call: a readline and a seek per element. A script's
reply is small and arrives whole in one `recv` nearly always, so it is parsed from bytes in
hand instead, into what redis-py's parser answers for it (bytes, int, float, bool, None, list,
dict; an error reply as the exception redis-py's `parse_error` makes). Every failure leaves
the connection as redis-py leaves it: a timeout, a lost connection or a reply that is not
RESP disconnects it (the next checkout connects afresh) and raises redis-py's exception; an
error reply keeps it, in step. Bytes past the reply (nobody asked for them) disconnect it
too, after the reply is answered.

Imported once redis-py is (by `lean`), never at the store's import. Used only where it
answers what redis-py would: the connection's parser is redis-py's own
RESP2 or RESP3 parser (hiredis, already fast, keeps its own), answering bytes.
"""

from __future__ import annotations

import time
from typing import Any

from redis import exceptions
from redis._parsers import _RESP2Parser, _RESP3Parser

READ_SIZE = 65536
DEEPEST = 8
"""Nesting deeper than a script's reply ever is: refused as not RESP, not recursed into."""


_RESP2 = frozenset((b"+", b"-", b":", b"$", b"*"))
_BLOBS = frozenset((b"$", b"=", b"!"))
_NUMBERS = frozenset((b":", b"("))
_AGGREGATES = frozenset((b"*", b"~", b">", b"%"))


class _IncompleteError(Exception):
    """The bytes in hand end inside the reply: read more, `needed` bytes in all at least."""

    def __init__(self, needed: int) -> None:
        super().__init__(needed)
        self.needed = needed


def reads_itself(connection: Any) -> bool:
    """Whether `read` may read this connection's replies (see the module docstring)."""
    parser = getattr(connection, "_parser", None)
    encoder = getattr(connection, "encoder", None)
    return (
        type(parser) in (_RESP2Parser, _RESP3Parser)
        and encoder is not None
        and not encoder.decode_responses
    )


def read(connection: Any) -> Any:
    """The next reply on `connection`, as `connection.read_response()` answers it."""
    sock, parser = connection._sock, connection._parser
    resp3 = type(parser) is _RESP3Parser
    chunks: list[bytes] = []
    held, needed = 0, 1  # bytes in hand; bytes the reply needs at least, as far as known
    try:
        while True:
            if held < needed:
                chunk = sock.recv(READ_SIZE)
                if not chunk:
                    raise exceptions.ConnectionError("Connection closed by server.")
                chunks.append(chunk)
                held += len(chunk)
                if held < needed:
                    continue  # a large value arriving: joined once, when all is in hand
            data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            chunks = [data]
            try:
                reply, end = _parse(parser, data, 0, 0, resp3)
            except _IncompleteError as short:
                needed = max(short.needed, held + 1)
                continue
            if type(reply) is not _Push:
                break
            rest = data[end:]  # a push (sent unasked) is not the reply: the next value is
            chunks, held, needed = [rest] if rest else [], len(rest), 1
    except TimeoutError:  # socket.timeout
        connection.disconnect()
        raise exceptions.TimeoutError("Timeout reading from socket") from None
    except exceptions.ConnectionError:
        connection.disconnect()
        raise
    except OSError as exc:
        connection.disconnect()
        raise exceptions.ConnectionError(f"Error while reading from socket: {exc.args}") from None
    except BaseException:
        connection.disconnect()
        raise
    if end != len(data):
        connection.disconnect()  # out of step: bytes nobody asked for
    if connection.health_check_interval:
        connection.next_health_check = time.monotonic() + connection.health_check_interval
    if isinstance(reply, exceptions.ResponseError):
        raise reply
    return reply


class _Push(list):  # type: ignore[type-arg]
    """A RESP3 push (a message the server sends unasked), which is not the reply."""


def _parse(parser: Any, data: bytes, at: int, depth: int, resp3: bool) -> tuple[Any, int]:
    """The value whose RESP starts at `at`, and where it ends. _IncompleteError if it ends
    past the bytes in hand; redis-py's InvalidResponse if it is not RESP (over RESP2, not
    RESP2: redis-py's RESP2 parser refuses RESP3's types)."""
    line_end = data.find(b"\r\n", at)
    if line_end < 0:
        raise _IncompleteError(len(data) + 1)
    kind, head, after = data[at : at + 1], data[at + 1 : line_end], line_end + 2
    if not resp3 and kind not in _RESP2:
        raise exceptions.InvalidResponse(f"Protocol Error: {data[at:line_end][:64]!r}")
    try:
        if kind in _BLOBS:
            length = int(head)
            if length < 0:
                return None, after
            end = after + length
            if len(data) < end + 2:
                raise _IncompleteError(end + 2)
            if data[end : end + 2] != b"\r\n":
                raise exceptions.InvalidResponse(f"Protocol Error: {kind!r} length")
            body = data[after:end]
            if kind == b"$":
                return body, end + 2
            if kind == b"=":
                return body[4:], end + 2
            return _error(parser, body), end + 2
        if kind in _NUMBERS:
            return int(head), after
        if kind in _AGGREGATES:
            count = int(head)
            if count < 0:
                return None, after
            if depth >= DEEPEST:
                raise exceptions.InvalidResponse("Protocol Error: nested too deep")
            items = []
            for _ in range(count * 2 if kind == b"%" else count):
                item, after = _parse(parser, data, after, depth + 1, resp3)
                while type(item) is _Push:  # a push amid a reply: the next value takes its place
                    item, after = _parse(parser, data, after, depth + 1, resp3)
                items.append(item)
            if kind == b"%":
                try:
                    return dict(zip(items[::2], items[1::2], strict=True)), after
                except TypeError:  # a key that is a list or a map
                    raise exceptions.InvalidResponse("Protocol Error: a map's key") from None
            return (_Push(items) if kind == b">" else items), after
        if kind == b"+":
            return head, after
        if kind == b"-":
            return _error(parser, head), after
        if kind == b"_":
            return None, after
        if kind == b",":
            return float(head), after
        if kind == b"#":
            return head == b"t", after
    except ValueError:  # a length, count or number that is none (int(), float())
        raise exceptions.InvalidResponse(f"Protocol Error: {head[:64]!r}") from None
    raise exceptions.InvalidResponse(f"Protocol Error: {data[at:line_end][:64]!r}")


def _error(parser: Any, text: bytes) -> Any:
    """An error reply as redis-py makes it: its exception for the code, a connection error
    raised at once (the connection is not in step), any other returned to be raised."""
    error = parser.parse_error(text.decode("utf-8", errors="replace"))
    if isinstance(error, exceptions.ConnectionError):
        raise error
    return error
