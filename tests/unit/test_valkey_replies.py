"""The lean path's reply reader answers what redis-py's own parser answers, for any reply
in any split of its bytes, and leaves a connection as redis-py leaves it on every failure."""

from __future__ import annotations

import itertools
import socket
from typing import Any

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st
from redis import exceptions

from lambda_idempotency._stores.valkey import replies


class ChunkedSocket:
    """A socket whose `recv` hands out the given chunks, then what `then` says."""

    def __init__(self, chunks: list[bytes], then: Any = b"") -> None:
        self.chunks = list(chunks)
        self.then = then
        self.reads = 0

    def recv(self, size: int) -> bytes:
        self.reads += 1
        if self.chunks:
            return self.chunks.pop(0)
        if isinstance(self.then, BaseException):
            raise self.then
        return bytes(self.then)


class Connection:
    """The parts of redis-py's connection the reader touches, on a chunked socket."""

    def __init__(self, chunks: list[bytes], *, protocol: int = 3, then: Any = b"") -> None:
        real = redis.Connection(protocol=protocol)
        self._parser = real._parser
        self.encoder = real.encoder
        self._sock: Any = ChunkedSocket(chunks, then)
        self.health_check_interval = 0
        self.disconnects = 0

    def disconnect(self) -> None:
        self.disconnects += 1
        self._sock = None


def redis_pys_answer(data: bytes, protocol: int = 3) -> Any:
    """What redis-py's own reader answers for `data`, over a real socket pair."""
    ours, theirs = socket.socketpair()
    connection = redis.Connection(protocol=protocol)
    ours.settimeout(5)
    connection._sock = ours
    connection._parser.on_connect(connection)
    try:
        theirs.sendall(data)
        return connection.read_response()
    finally:
        connection.disconnect()
        theirs.close()


# -- RESP values and their bytes -------------------------------------------------------------

texts = st.binary(max_size=40)
scalars = st.one_of(
    texts.map(lambda b: (b"$%d\r\n%b\r\n" % (len(b), b), b)),
    st.from_regex(rb"\A[a-zA-Z0-9 _]{0,20}\Z").map(lambda b: (b"+%b\r\n" % b, b)),
    st.integers(-(2**70), 2**70).map(lambda n: (b":%d\r\n" % n, n)),
    st.integers(-(2**70), 2**70).map(lambda n: (b"(%d\r\n" % n, n)),
    st.just((b"_\r\n", None)),
    st.booleans().map(lambda t: (b"#t\r\n" if t else b"#f\r\n", t)),
    st.floats(allow_nan=False).map(lambda f: (b",%r\r\n" % f, float(repr(f)))),
    texts.map(lambda b: (b"=%d\r\ntxt:%b\r\n" % (len(b) + 4, b), b)),
)


def arrays(children: Any) -> Any:
    return st.lists(children, max_size=5).map(
        lambda items: (
            b"*%d\r\n" % len(items) + b"".join(raw for raw, _ in items),
            [value for _, value in items],
        )
    )


def maps(children: Any) -> Any:
    keys = texts.map(lambda b: (b"$%d\r\n%b\r\n" % (len(b), b), b))
    return st.dictionaries(keys, children, max_size=4).map(
        lambda pairs: (
            b"%%%d\r\n" % len(pairs) + b"".join(k[0] + v[0] for k, v in pairs.items()),
            {k[1]: v[1] for k, v in pairs.items()},
        )
    )


values = st.recursive(
    scalars, lambda children: st.one_of(arrays(children), maps(children)), max_leaves=12
)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points) if b > a]


@settings(max_examples=300, deadline=None)
@given(values, st.lists(st.integers(0, 10_000), max_size=6))
def test_any_reply_in_any_split_answers_as_redis_py_does(value: Any, cuts: list[int]) -> None:
    data, expected = value
    connection = Connection(split(data, cuts))
    assert replies.read(connection) == expected == redis_pys_answer(data)
    assert connection.disconnects == 0


def test_a_large_result_in_many_chunks_is_read_whole_and_joined_once() -> None:
    """A stored result of megabytes arrives in many reads: answered whole, with the bytes
    joined once when all are in hand (not re-joined and re-parsed on every read)."""
    blob = bytes(range(256)) * 20_000  # 5 MB
    data = b"*3\r\n$9\r\nCOMPLETED\r\n$%d\r\n%b\r\n:7\r\n" % (len(blob), blob)
    chunks = [data[i : i + 65_536] for i in range(0, len(data), 65_536)]
    connection = Connection(chunks)
    parses = []
    real = replies._parse

    def counted(*args: Any) -> Any:
        if args[3] == 0:
            parses.append(1)
        return real(*args)

    replies._parse = counted
    try:
        assert replies.read(connection) == [b"COMPLETED", blob, 7]
    finally:
        replies._parse = real
    assert connection._sock.reads == len(chunks)
    assert len(parses) <= 3, len(parses)


def test_a_scripts_reply_over_resp2_answers_as_redis_py_does() -> None:
    data = b"*4\r\n:1\r\n$11\r\nIN_PROGRESS\r\n$-1\r\n*-1\r\n"  # RESP2's two nulls
    assert replies.read(Connection([data], protocol=2)) == [1, b"IN_PROGRESS", None, None]
    assert redis_pys_answer(data, protocol=2) == [1, b"IN_PROGRESS", None, None]


# -- error replies -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"-NOSCRIPT No matching script.\r\n", exceptions.NoScriptError),
        (
            b"-OOM command not allowed when used memory > 'maxmemory'.\r\n",
            exceptions.OutOfMemoryError,
        ),
        (b"-NOREPLICAS Not enough good replicas to write.\r\n", exceptions.ResponseError),
        (b"!21\r\nSYNTAX invalid syntax\r\n", exceptions.ResponseError),
        (b"-ERR user_script:1: boom\r\n", exceptions.ResponseError),
    ],
)
def test_an_error_reply_raises_redis_pys_exception_and_keeps_the_connection(
    data: bytes, error: type[Exception]
) -> None:
    connection = Connection([data])
    with pytest.raises(error) as ours:
        replies.read(connection)
    with pytest.raises(error) as theirs:
        redis_pys_answer(data)
    assert type(ours.value) is type(theirs.value) and str(ours.value) == str(theirs.value)
    assert connection.disconnects == 0  # the server answered: in step


def test_an_error_that_says_the_connection_is_unusable_disconnects_it() -> None:
    connection = Connection([b"-LOADING Valkey is loading the dataset in memory\r\n"])
    with pytest.raises(exceptions.BusyLoadingError):
        replies.read(connection)
    assert connection.disconnects == 1


def test_an_error_inside_an_array_is_answered_as_an_exception_in_it() -> None:
    data = b"*2\r\n:1\r\n-ERR inner\r\n"
    ours = replies.read(Connection([data]))
    theirs = redis_pys_answer(data)
    assert ours[0] == theirs[0] == 1
    assert type(ours[1]) is type(theirs[1]) is exceptions.ResponseError
    assert str(ours[1]) == str(theirs[1]) == "inner"  # redis-py strips the code


# -- failures leave the connection as redis-py does ------------------------------------------


def test_a_reply_cut_by_the_server_closing_is_a_connection_error_and_disconnects() -> None:
    connection = Connection([b"*3\r\n:1\r\n$5\r\nab"])
    with pytest.raises(exceptions.ConnectionError, match="closed by server"):
        replies.read(connection)
    assert connection.disconnects == 1


def test_a_reply_cut_by_a_timeout_is_redis_pys_timeout_and_disconnects() -> None:
    connection = Connection([b"*3\r\n:1\r\n"], then=TimeoutError("timed out"))  # socket.timeout
    with pytest.raises(exceptions.TimeoutError):
        replies.read(connection)
    assert connection.disconnects == 1


def test_a_socket_error_is_a_connection_error_and_disconnects() -> None:
    connection = Connection([], then=ConnectionResetError(104, "reset"))
    with pytest.raises(exceptions.ConnectionError, match="reset"):
        replies.read(connection)
    assert connection.disconnects == 1


def test_an_interruption_mid_reply_disconnects() -> None:
    class Interrupted(BaseException):
        pass

    connection = Connection([b"*2\r\n:1\r\n"], then=Interrupted())
    with pytest.raises(Interrupted):
        replies.read(connection)
    assert connection.disconnects == 1


@pytest.mark.parametrize(
    "data",
    [
        b"?what\r\n",  # no such type
        b"$abc\r\n",  # a length that is no number
        b"*x\r\n",
        b"$3\r\nabcd\r\n",  # a body longer than its length
        b"|1\r\n+a\r\n+b\r\n+c\r\n",  # an attribute: refused by redis-py's parser too
        b",x\r\n",  # a double that is no number
        b"%1\r\n*1\r\n:1\r\n:2\r\n",  # a map keyed by an array
    ],
)
def test_bytes_that_are_not_resp_are_refused_and_disconnect(data: bytes) -> None:
    connection = Connection([data])
    with pytest.raises(exceptions.InvalidResponse):
        replies.read(connection)
    assert connection.disconnects == 1


def test_nesting_deeper_than_any_script_replies_is_refused_not_recursed_into() -> None:
    connection = Connection([b"*1\r\n" * 5000 + b":1\r\n"])
    with pytest.raises(exceptions.InvalidResponse, match="deep"):
        replies.read(connection)
    assert connection.disconnects == 1


def test_bytes_past_the_reply_answer_it_and_disconnect_the_connection_out_of_step() -> None:
    connection = Connection([b":1\r\n:2\r\n"])
    assert replies.read(connection) == 1
    assert connection.disconnects == 1


def test_a_push_before_the_reply_is_skipped() -> None:
    push = b">3\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n$0\r\n\r\n"
    for chunks in ([push + b":7\r\n"], [push, b":7\r\n"], [push[:9], push[9:] + b":7\r\n"]):
        connection = Connection(chunks)
        assert replies.read(connection) == 7
        assert connection.disconnects == 0


def test_health_checks_are_moved_on_as_redis_pys_reader_moves_them() -> None:
    connection = Connection([b":1\r\n"])
    connection.health_check_interval = 30
    assert replies.read(connection) == 1
    assert connection.next_health_check > 0  # type: ignore[attr-defined]


def test_only_redis_pys_own_parsers_answering_bytes_are_read_by_it() -> None:
    assert replies.reads_itself(redis.Connection(protocol=3))
    assert replies.reads_itself(redis.Connection(protocol=2))
    assert not replies.reads_itself(redis.Connection(decode_responses=True))

    class OwnParser(redis.connection._RESP3Parser):  # type: ignore[attr-defined,name-defined]
        pass

    assert not replies.reads_itself(redis.Connection(parser_class=OwnParser))


@pytest.mark.parametrize(
    "data", [b",1.5\r\n", b"#t\r\n", b"_\r\n", b"%0\r\n", b">1\r\n+p\r\n:1\r\n"]
)
def test_resp3s_types_over_resp2_are_refused_as_redis_pys_resp2_parser_refuses_them(
    data: bytes,
) -> None:
    connection = Connection([data], protocol=2)
    with pytest.raises(exceptions.InvalidResponse):
        replies.read(connection)
    with pytest.raises(exceptions.InvalidResponse):
        redis_pys_answer(data, protocol=2)
    assert connection.disconnects == 1


def test_a_push_amid_a_reply_is_skipped_as_redis_py_skips_it() -> None:
    data = b"*2\r\n>1\r\n+p\r\n:1\r\n:2\r\n"
    assert replies.read(Connection([data])) == [1, 2] == redis_pys_answer(data)


def test_a_value_after_a_push_amid_a_reply_nests_as_deep_as_any_other_element() -> None:
    deepest = b"*1\r\n" * replies.DEEPEST + b":1\r\n"  # at the limit, not past it
    answer: Any = 1
    for _ in range(replies.DEEPEST):
        answer = [answer]
    assert replies.read(Connection([deepest])) == answer == redis_pys_answer(deepest)
    amid = b"*1\r\n>1\r\n+p\r\n" + deepest[4:]  # the first element is a push, then the rest
    assert replies.read(Connection([amid])) == answer == redis_pys_answer(amid)
