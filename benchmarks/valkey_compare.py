"""`python -m benchmarks.valkey_compare`: our `ValkeyStore` beside Powertools' Redis layer.

Both libraries run the same handler against one local Valkey server: ours as a user builds it
by default (`ValkeyStore(url)`, which takes the lean path, `_stores.valkey.lean`) and, for CPU,
also given a redis-py client (`ValkeyStore(client=...)`, the client's own command path);
Powertools' `RedisCachePersistenceLayer` on a redis-py client. Round trips are counted where
every request leaves (`send_packed_command` on a connection: an `EVALSHA` is one, a `SET`
is one). Three measurements:

- round trips per invocation in five scenarios (steady state: scripts already loaded);
- CPU per invocation (`time.process_time`, this process only, the server's CPU not counted),
  both libraries in alternating chunks, minimum per call over the chunks, once with logging
  unconfigured and once with the root logger at INFO (the Lambda runtime's handler on it);
- two races on real short leases, with the effects (bodies that ran) counted: a lapsed
  holder's late completion, and many callers taking over one lapsed claim at once.

Neither library lets a fake clock move a lease here: ours decides leases on the server's clock
(`TIME` in its scripts), Powertools reads `datetime.now()`. So the races use real time: a
300 ms lease (ours: `lease_seconds`; Powertools: the context's remaining time, which becomes
its in-progress expiry) and a holder stalled past it.

`--write` replaces (or appends) the section "Valkey / Redis: beside Powertools' Redis layer"
in docs/benchmarks.md; without it the section is printed.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import re
import threading
import time
import uuid
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from .environment import describe_machine
from .lambda_logging import LambdaLogging
from .report import microseconds, ratio

TITLE = "Valkey / Redis: beside Powertools' Redis layer"
OURS = "ours"
OURS_CLIENT = "ours-client"
POWERTOOLS = "powertools"
CONTENDERS = (OURS, POWERTOOLS)
CPU_CONTENDERS = (OURS, OURS_CLIENT, POWERTOOLS)
SCENARIOS = {
    "first_run": "First run",
    "replay": "Replay",
    "in_flight": "In-flight duplicate",
    "handler_error": "Handler error",
    "warm_cache": "Warm-cache replay",
}
MODES = {"unconfigured": logging.WARNING, "info": logging.INFO}
LEASE_MS = 300
"""The short lease of the races: the lapsed holder's, and the orphan's."""
RACER_WORK = 0.1
"""Seconds a racing caller's body works."""


class Sent:
    """Requests sent on any redis-py connection while counting, by command name: each
    `send_packed_command` is one round trip (a pipeline's commands go out together)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    @contextlib.contextmanager
    def counting(self) -> Iterator[Counter[str]]:
        from redis.connection import AbstractConnection

        original = AbstractConnection.send_packed_command
        counts = self.counts

        def send_packed_command(conn: Any, command: Any, check_health: bool = True) -> None:
            counts[_command_name(command)] += 1
            return original(conn, command, check_health)

        counts.clear()
        AbstractConnection.send_packed_command = send_packed_command  # type: ignore[method-assign]
        try:
            yield counts
        finally:
            AbstractConnection.send_packed_command = original  # type: ignore[method-assign]


def _command_name(command: Any) -> str:
    """The first command's name in a packed request (bytes, or a list of chunks)."""
    first = command if isinstance(command, bytes | bytearray) else b"".join(command[:2])
    parts = bytes(first).split(b"\r\n")
    return parts[2].decode(errors="replace").upper() if len(parts) > 2 else "?"


class Context:
    """The parts of Lambda's context both libraries read."""

    function_name = "valkey-compare"
    memory_limit_in_mb = 1024
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:valkey-compare"
    aws_request_id = "00000000-0000-0000-0000-000000000000"

    def __init__(self, remaining_ms: int = 30_000) -> None:
        self.remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


class Body:
    """The handler's body: counts the runs, says who ran it, fails or stalls on request."""

    def __init__(self, *, fails: bool = False) -> None:
        self.fails = fails
        self.runs: Counter[str] = Counter()
        self.entered = threading.Event()
        self.stall = threading.Event()
        self.stall.set()
        self._lock = threading.Lock()

    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        who = event.get("who", "caller")
        with self._lock:
            self.runs[who] += 1
        self.entered.set()
        if who.startswith("holder"):
            self.stall.wait(60)
        elif who == "racer":
            time.sleep(RACER_WORK)  # long enough that the racers' calls overlap it
        if self.fails:
            raise ValueError("card declined")
        return {"order_id": event["order_id"], "charged": 1250, "by": who}

    @property
    def effects(self) -> int:
        return sum(self.runs.values())


_OPEN: list[Any] = []
"""Every client `wrap` made, closed when `run` ends (a socket left to the garbage collector
is a ResourceWarning, an error in the test suite)."""


def wrap(contender: str, url: str, body: Body, *, cache: bool = False, lease_ms: int = 0) -> Any:
    """The body behind one library's decorator, on a fresh counting client: a key of the
    event's `order_id`, no payload check (the races send differing payloads on one key).
    `lease_ms`: ours leases that long (Powertools' lease is the context's remaining time)."""

    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return body(event, context)

    if contender in (OURS, OURS_CLIENT):
        from lambda_idempotency import ValkeyStore, idempotent

        prefix = f"cmp-{uuid.uuid4().hex[:8]}:"
        if contender == OURS:
            store = ValkeyStore(url, prefix=prefix)
        else:
            store = ValkeyStore(client=redis.Redis.from_url(url), prefix=prefix)
            _OPEN.append(store.client)
        _OPEN.append(store)
        options: dict[str, Any] = {}
        if lease_ms:
            options = {"lease_seconds": lease_ms / 1000, "clock_skew_seconds": 0}
        decorated: Any = idempotent(
            key="order_id", payload=None, store=store, cache_size=256 if cache else 0, **options
        )(handler)
    else:
        from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig
        from aws_lambda_powertools.utilities.idempotency import idempotent as powertools

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # its deprecation notice: the alias is the same class
            from aws_lambda_powertools.utilities.idempotency.persistence.redis import (
                RedisCachePersistenceLayer,
            )

            client = redis.Redis.from_url(url)
            _OPEN.append(client)
            layer = RedisCachePersistenceLayer(client=client)  # type: ignore[arg-type]
        config = IdempotencyConfig(event_key_jmespath="order_id", use_local_cache=cache)
        decorated = powertools(config=config, persistence_store=layer)(handler)
    return decorated


def in_progress_errors() -> tuple[type[BaseException], ...]:
    from aws_lambda_powertools.utilities.idempotency.exceptions import (
        IdempotencyAlreadyInProgressError,
        IdempotencyItemAlreadyExistsError,
    )

    from lambda_idempotency import InProgressError

    return InProgressError, IdempotencyAlreadyInProgressError, IdempotencyItemAlreadyExistsError


def outcome(call: Callable[[], Any]) -> str:
    """How one invocation ended: whose result it got, or the exception's name."""
    try:
        result = call()
    except Exception as error:
        return type(error).__name__
    return f"result of {result['by']}"


# -- scenarios -----------------------------------------------------------------------------


class Scenario:
    """One scenario wired to one library; calling it makes one invocation."""

    def __init__(self, slug: str, contender: str, url: str) -> None:
        self.slug = slug
        self.body = Body(fails=slug == "handler_error")
        self.handler = wrap(contender, url, self.body, cache=slug == "warm_cache")
        self.context = Context()
        self.prefix = f"{slug}-{contender}-{uuid.uuid4().hex[:8]}"
        self.calls = 0
        self.holder: threading.Thread | None = None
        self.expected = in_progress_errors() if slug == "in_flight" else (ValueError,)
        if slug in ("replay", "warm_cache"):
            self.handler(self.event(f"{self.prefix}-fixed"), self.context)
        if slug == "in_flight":
            self.body.stall.clear()
            self.holder = threading.Thread(
                target=self.handler,
                args=({**self.event(f"{self.prefix}-fixed"), "who": "holder"}, self.context),
            )
            self.holder.start()
            self.body.entered.wait(10)

    def event(self, order_id: str) -> dict[str, Any]:
        return {"order_id": order_id, "customer_id": "cus_4242", "amount": 1250}

    def __call__(self) -> None:
        self.calls += 1
        fresh = self.slug in ("first_run", "handler_error")
        order_id = f"{self.prefix}-{self.calls}" if fresh else f"{self.prefix}-fixed"
        with contextlib.suppress(*self.expected):
            self.handler(self.event(order_id), self.context)

    def close(self) -> None:
        self.body.stall.set()
        if self.holder is not None:
            self.holder.join(10)


def round_trips(url: str, calls: int) -> dict[tuple[str, str], Counter[str]]:
    """Commands sent per invocation, by name, averaged over `calls` after two warm-up calls."""
    counts = {}
    sent = Sent()
    for slug in SCENARIOS:
        for contender in CONTENDERS:
            scenario = Scenario(slug, contender, url)
            try:
                scenario()
                scenario()  # scripts loaded, connection open
                with sent.counting() as requests:
                    for _ in range(calls):
                        scenario()
                counts[slug, contender] = requests.copy()
            finally:
                scenario.close()
    return counts


def per_call(sent: Counter[str], calls: int) -> str:
    total = sum(sent.values()) / calls
    names = ", ".join(f"{name} {count / calls:g}" for name, count in sorted(sent.items()))
    return f"{total:g}" + (f" ({names})" if names else "")


# -- CPU -----------------------------------------------------------------------------------


def cpu(url: str, *, rounds: int, chunk: int) -> dict[tuple[str, str, str], float]:
    """Least CPU seconds per invocation over `rounds` interleaved chunks of `chunk` calls:
    (scenario, contender, logging mode) -> seconds."""
    subjects = {
        (slug, contender, mode): Scenario(slug, contender, url)
        for slug in SCENARIOS
        for contender in CPU_CONTENDERS
        for mode in MODES
    }
    names = list(subjects)
    best = dict.fromkeys(names, float("inf"))
    logs = LambdaLogging()
    logs.install()
    try:
        for round_ in range(rounds + 1):  # round 0 warms up and is thrown away
            shift = round_ % len(names)
            order = names[shift:] + names[:shift]
            if round_ % 2:
                order.reverse()
            for name in order:
                logs.level(MODES[name[2]])
                gc.collect()
                start = time.process_time()
                for _ in range(chunk):
                    subjects[name]()
                elapsed = (time.process_time() - start) / chunk
                if round_:
                    best[name] = min(best[name], elapsed)
    finally:
        logs.uninstall()
        for subject in subjects.values():
            subject.close()
    return best


# -- races ---------------------------------------------------------------------------------


@dataclass
class LateCompletion:
    effects: int
    """Bodies that ran: the holder's and the taker's."""
    holder: str
    """What the lapsed holder's own call ended with."""
    taker: str
    afterwards: str
    """What a third call with the same key got, once both finished."""
    effects_after: int


def late_completion(contender: str, url: str) -> LateCompletion:
    """Holder A claims with a 300 ms lease and stalls past it; B takes the key over and
    completes; then A completes late. What does the key answer afterwards?"""
    body = Body()
    handler = wrap(contender, url, body, lease_ms=LEASE_MS)
    order_id = f"late-{contender}-{uuid.uuid4().hex}"
    body.stall.clear()
    results: dict[str, str] = {}
    holder = threading.Thread(
        target=lambda: results.__setitem__(
            "holder",
            outcome(lambda: handler({"order_id": order_id, "who": "holder"}, Context(LEASE_MS))),
        )
    )
    holder.start()
    body.entered.wait(10)
    time.sleep(LEASE_MS / 1000 + 0.3)  # the holder's lease has lapsed
    taker = outcome(lambda: handler({"order_id": order_id, "who": "taker"}, Context()))
    body.stall.set()  # the holder wakes and completes late
    holder.join(10)
    effects = body.effects
    afterwards = outcome(lambda: handler({"order_id": order_id, "who": "third"}, Context()))
    return LateCompletion(effects, results["holder"], taker, afterwards, body.effects - effects)


@dataclass
class SecondLapse:
    effects: int
    """Bodies that ran: the two stalled holders' and, if it got the key, the third caller's."""
    third: str
    """What the third caller got, once both holders' leases lapsed."""


def second_lapse(contender: str, url: str) -> SecondLapse:
    """Holder A lapses, B takes over with a 300 ms lease and stalls past it too; can a third
    caller C take the key over from B, well within Powertools' 10 s orphan lock?"""
    body = Body()
    handler = wrap(contender, url, body, lease_ms=LEASE_MS)
    order_id = f"second-{contender}-{uuid.uuid4().hex}"
    body.stall.clear()
    holders = []
    for who in ("holder-a", "holder-b"):
        event = {"order_id": order_id, "who": who}
        holders.append(
            threading.Thread(target=outcome, args=(lambda e=event: handler(e, Context(LEASE_MS)),))
        )
        holders[-1].start()
        deadline = time.monotonic() + 10
        while not body.runs[who] and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(LEASE_MS / 1000 + 0.3)  # this holder's lease has lapsed
    third = outcome(lambda: handler({"order_id": order_id, "who": "third"}, Context()))
    body.stall.set()
    for holder in holders:
        holder.join(10)
    return SecondLapse(body.effects, third)


@dataclass
class Takeover:
    callers: int
    effects: list[int] = field(default_factory=list)
    """Per trial: bodies the racing callers ran (the stalled holder's not counted)."""
    outcomes: Counter[str] = field(default_factory=Counter)


def takeovers(contender: str, url: str, *, callers: int, trials: int) -> Takeover:
    """A holder claims with a 300 ms lease and stalls past it; then `callers` threads call
    with its key at once (a barrier): how many of them run the body?"""
    found = Takeover(callers)
    for _ in range(trials):
        found.effects.append(_takeover_trial(contender, url, callers, found.outcomes))
    return found


def _takeover_trial(contender: str, url: str, callers: int, outcomes: Counter[str]) -> int:
    body = Body()
    handler = wrap(contender, url, body, lease_ms=LEASE_MS)
    order_id = f"race-{contender}-{uuid.uuid4().hex}"

    def call(who: str, context: Context) -> str:
        return outcome(lambda: handler({"order_id": order_id, "who": who}, context))

    body.stall.clear()
    holder = threading.Thread(target=call, args=("holder", Context(LEASE_MS)))
    holder.start()
    body.entered.wait(10)
    time.sleep(LEASE_MS / 1000 + 0.3)  # the holder's lease has lapsed
    barrier = threading.Barrier(callers)
    lock = threading.Lock()

    def race() -> None:
        barrier.wait()
        ended = call("racer", Context())
        with lock:
            outcomes[ended] += 1

    racers = [threading.Thread(target=race) for _ in range(callers)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(30)
    body.stall.set()
    holder.join(10)
    return body.runs["racer"]


# -- the whole comparison ------------------------------------------------------------------


@dataclass
class Results:
    calls: int
    rounds: int
    chunk: int
    trips: dict[tuple[str, str], Counter[str]]
    cpu: dict[tuple[str, str, str], float]
    late: dict[str, LateCompletion]
    races: dict[str, Takeover]
    second: dict[str, SecondLapse]
    versions: dict[str, str]


def run(
    url: str,
    *,
    calls: int = 20,
    rounds: int = 15,
    chunk: int = 20,
    callers: int = 16,
    trials: int = 3,
) -> Results:
    import importlib.metadata

    try:
        return _run(url, calls, rounds, chunk, callers, trials, importlib.metadata.version)
    finally:
        while _OPEN:
            _OPEN.pop().close()


def _run(
    url: str,
    calls: int,
    rounds: int,
    chunk: int,
    callers: int,
    trials: int,
    version: Callable[[str], str],
) -> Results:
    return Results(
        calls=calls,
        rounds=rounds,
        chunk=chunk,
        trips=round_trips(url, calls),
        cpu=cpu(url, rounds=rounds, chunk=chunk),
        late={contender: late_completion(contender, url) for contender in CONTENDERS},
        races={
            contender: takeovers(contender, url, callers=callers, trials=trials)
            for contender in CONTENDERS
        },
        second={contender: second_lapse(contender, url) for contender in CONTENDERS},
        versions={name: version(name) for name in ("aws-lambda-powertools", "redis")},
    )


def server_version(url: str) -> str:
    client = redis.Redis.from_url(url)
    try:
        info = client.info("server")
    finally:
        client.close()
    return f"Valkey {info.get('valkey_version', info.get('redis_version', '?'))}"


MACHINE_ROWS = ("CPU", "OS", "Python", "lambda-idempotency", "aws-lambda-powertools")


def markdown(results: Results, machine: list[tuple[str, str]], server: str) -> str:
    """The report's section, from `## ` to the end."""
    lines = [
        f"## {TITLE}",
        "",
        "Generated by `python -m benchmarks.valkey_compare --write`. Both libraries run the "
        f"same handler against one local server ({server}, on this machine's loopback), "
        f"Powertools {results.versions['aws-lambda-powertools']} with its "
        f"`RedisCachePersistenceLayer` on a redis-py {results.versions['redis']} client, ours "
        "as a user builds it, `ValkeyStore(url)` (the lean path: each script one packed "
        "`EVALSHA` on a kept connection), and in the CPU table also given a redis-py client, "
        "`ValkeyStore(client=...)` (the client's command path). Round trips are counted as "
        "requests leave a connection (`send_packed_command`: a script sent by `EVALSHA` is "
        "one, as a `SET` is). Key: the event's `order_id`; no payload check; local caches off "
        "except in the warm-cache scenario.",
        "",
        "Round trips per invocation (steady state, the average of "
        f"{results.calls} invocations after two warm-up calls):",
        "",
        "| scenario | ours | Powertools |",
        "|---|---|---|",
    ]
    for slug, title in SCENARIOS.items():
        lines.append(
            f"| {title} | {per_call(results.trips[slug, OURS], results.calls)} | "
            f"{per_call(results.trips[slug, POWERTOOLS], results.calls)} |"
        )
    lines += [
        "",
        "Powertools' replay and in-flight duplicate take three: its `SET NX` is refused, it "
        "`GET`s the record to decide, and raises without it, so its decorator `GET`s it again. "
        "Ours answers with the record in the claim script's own reply.",
        "",
        f"CPU per invocation: this process's CPU time (`time.process_time`; the server's not "
        f"counted, the client's socket work is), the least per call over {results.rounds} "
        f"rounds of alternating chunks of {results.chunk} calls, every scenario, library and "
        "logging mode in each round (the order rotating), as the CPU section above does. "
        "Logging unconfigured: the runtime's handler on the root logger at WARNING; at INFO: "
        "the root logger at INFO. Ours writes a line at INFO for an in-flight duplicate "
        "refused (Powertools logs at DEBUG only), which is what INFO adds to that row; a key "
        "released after a handler error is a DEBUG line (the runtime logs the handler's own "
        "error). The ratios moved by about a tenth "
        "between runs on this shared machine (a CI run beside it).",
        "",
        "| scenario | logging | ours (`ValkeyStore(url)`) | ours, client given | Powertools | "
        "ratio | ratio, client given |",
        "|---|---|---|---|---|---|---|",
    ]
    for slug, title in SCENARIOS.items():
        for mode in MODES:
            ours, given = results.cpu[slug, OURS, mode], results.cpu[slug, OURS_CLIENT, mode]
            theirs = results.cpu[slug, POWERTOOLS, mode]
            row = [title, mode, microseconds(ours), microseconds(given), microseconds(theirs)]
            row += [ratio(ours, theirs), ratio(given, theirs)]
            lines.append("| " + " | ".join(row) + " |")
    lines += [
        "",
        "Races, on real time: neither library's lease moves with a fake clock here (ours "
        "decides leases on the server's clock, `TIME` inside its scripts; Powertools reads "
        f"`datetime.now()`), so the holder gets a {LEASE_MS} ms lease (ours: "
        f"`lease_seconds={LEASE_MS / 1000:g}, clock_skew_seconds=0`; Powertools: a context "
        f"with {LEASE_MS} ms remaining, which becomes its in-progress expiry) and its body "
        f"stalls {LEASE_MS + 300} ms, past it. Effects are the bodies that ran.",
        "",
        "| race | ours | Powertools |",
        "|---|---|---|",
    ]
    late = results.late
    lines += [
        "| lapsed holder A, taker B, A completes late: effects (A and B) | "
        f"{late[OURS].effects} | {late[POWERTOOLS].effects} |",
        f"| ... A's own call ended with | {late[OURS].holder} | {late[POWERTOOLS].holder} |",
        f"| ... B's call ended with | {late[OURS].taker} | {late[POWERTOOLS].taker} |",
        "| ... a third call afterwards got (effects it added) | "
        f"{late[OURS].afterwards} ({late[OURS].effects_after}) | "
        f"{late[POWERTOOLS].afterwards} ({late[POWERTOOLS].effects_after}) |",
    ]
    races = results.races
    callers = races[OURS].callers
    trials = len(races[OURS].effects)
    lines += [
        f"| {callers} callers at once on a lapsed claim, {trials} trials: effects per trial | "
        f"{', '.join(map(str, races[OURS].effects))} | "
        f"{', '.join(map(str, races[POWERTOOLS].effects))} |",
        "| ... how the callers' calls ended (all trials) | "
        + " | ".join(
            ", ".join(f"{name} {count}" for name, count in sorted(races[c].outcomes.items()))
            for c in CONTENDERS
        )
        + " |",
        "| holder A lapses, B takes over and lapses too, then C calls (within 10 s): C got "
        f"(effects in all) | {results.second[OURS].third} ({results.second[OURS].effects}) | "
        f"{results.second[POWERTOOLS].third} ({results.second[POWERTOOLS].effects}) |",
        "",
        "- A lapsed holder's body ran, and so did its taker's: no lease stops a stalled body. "
        "What differs is the record: ours completes only while the record carries the "
        "claim's owner token, so A's late completion writes nothing and the key keeps B's "
        "result; Powertools completes with an unconditional `SET`, so A's late result "
        "overwrites B's and later calls replay A's, not the result B's caller got.",
        "- Concurrent takeovers of one orphan: Powertools serializes them with `SET NX` on a "
        "separate lock key (`<key>:lock`, held `min(10, expires_after_seconds)` s and never "
        "deleted), so among callers arriving together one takes over. The lock is what "
        "saves it, not the record: two takeovers run when a caller's `GET` and its lock "
        "attempt are further apart than the lock's life (10 s), which threads on a barrier "
        "do not reproduce; the same lock keeps any further takeover of that key out for its "
        "10 s, even when the new holder's lease is shorter: C, arriving after B's lease "
        "lapsed, is refused by the lock and then finds an in-progress record past its expiry "
        "(Powertools raises `IdempotencyInconsistentStateError`) until the lock expires. Ours "
        "decides a takeover in one script that reads and writes the record, so C takes the "
        "key over from B as B took it from A.",
        "",
        "Machine:",
        "",
    ]
    lines += [f"- {name}: {value}" for name, value in machine if name in MACHINE_ROWS]
    lines += [f"- server: {server}", f"- redis-py: {results.versions['redis']}"]
    return "\n".join(lines) + "\n"


def write_section(path: Path, section: str) -> None:
    """Replace the section in the report, or append it: nothing else in the file changes."""
    text = path.read_text(encoding="utf-8")
    pattern = re.compile(rf"^## {re.escape(TITLE)}\n.*?(?=^## |\Z)", re.M | re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text, count=1).rstrip("\n") + "\n"
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text, encoding="utf-8")


@contextlib.contextmanager
def server(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    from lambda_idempotency._dev.valkey_local import ValkeyServer

    with ValkeyServer() as node:
        yield node.url


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.valkey_compare", description=__doc__
    )
    parser.add_argument("--url", help="a Valkey or Redis server to use instead of starting one")
    parser.add_argument("--write", type=Path, nargs="?", const=Path("docs/benchmarks.md"))
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--chunk", type=int, default=20)
    parser.add_argument("--callers", type=int, default=16)
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()
    with server(args.url) as url:
        results = run(
            url, rounds=args.rounds, chunk=args.chunk, callers=args.callers, trials=args.trials
        )
        version = server_version(url)
    section = markdown(results, describe_machine(), version)
    if args.write:
        write_section(args.write, section)
        print(args.write)
    else:
        print(section)


if __name__ == "__main__":
    main()
