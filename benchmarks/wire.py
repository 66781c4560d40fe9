"""The fast wire path against boto3, call by call and invocation by invocation.

    python -m benchmarks.wire [--endpoint URL]

Per call: the store's claim (a conditional PutItem) and get (a GetItem), CPU per call through
boto3 and through the fast path over the same client, answered from memory in `before-send`
(the wire taken out) and by DynamoDB Local (the wire in). Per invocation: the first-run and
replay scenarios of benchmarks/cpu.py, answered from a recording and by DynamoDB Local, for
Powertools (boto3's default client), ours through boto3 and ours through the fast path (both
on the store's own default client: fixed user agent, no client-side validation). Prints the
numbers.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os
import statistics
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from botocore.awsrequest import AWSResponse

from .contenders import OURS, POWERTOOLS, Contender, _wrap_powertools
from .cpu import BotocoreMeter, Timed, interleaved_cpu
from .recording import Recorder, Replayer
from .report import Budget, Section, Table
from .scenarios import FIRST_RUN, REPLAY, Scenario, Subject
from .workload import create_table, dynamodb_client, our_default_client

_keys = itertools.count()


def claim_request(table: str) -> Callable[[], dict[str, Any]]:
    """The store's own claim, captured once, sent on a fresh key each call."""
    from lambda_idempotency import DynamoDBStore

    captured: list[dict[str, Any]] = []

    class Capture:
        def put_item(self, **params: Any) -> dict[str, Any]:
            captured.append(params)
            return {}

    store = DynamoDBStore(table)
    store._caller = Capture  # type: ignore[method-assign]
    store.claim("k", owner="o", payload_hash="h" * 64, now_ms=1, lease_until_ms=2, expiration_s=3)
    template = captured[0]

    def fresh() -> dict[str, Any]:
        request = dict(template)
        item = dict(template["Item"])
        item["pk"] = {"S": f"bench-{next(_keys)}"}
        request["Item"] = item
        return request

    return fresh


class _Body:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


def answer_from_memory(client: Any, body: bytes) -> None:
    headers = {"x-amzn-RequestId": "r", "x-amz-crc32": str(zlib.crc32(body))}

    def answer(request: Any, **_: Any) -> AWSResponse:
        return AWSResponse(request.url, 200, headers, _Body(body))

    client.meta.events.register("before-send.dynamodb", answer)


def per_call(calls: dict[str, Callable[[], Any]], *, rounds: int, chunk: int) -> dict[str, float]:
    """The least CPU per call over `rounds` chunks, the subjects interleaved."""
    best = dict.fromkeys(calls, float("inf"))
    for round_ in range(rounds + 1):
        for name, call in calls.items() if round_ % 2 else reversed(list(calls.items())):
            gc.collect()
            start = time.process_time()
            for _ in range(chunk):
                call()
            if round_:
                best[name] = min(best[name], (time.process_time() - start) / chunk)
    return best


def calls_per_path(client: Any, table: str) -> dict[str, Callable[[], Any]]:
    from lambda_idempotency._stores.dynamodb.wire.path import FastWire

    wire = FastWire(client)
    claim = claim_request(table)
    key = {"pk": {"S": "bench-get"}}
    return {
        "claim, boto3": lambda: client.put_item(**claim()),
        "claim, fast": lambda: wire.put_item(**claim()),
        "get, boto3": lambda: client.get_item(TableName=table, Key=key, ConsistentRead=True),
        "get, fast": lambda: wire.get_item(TableName=table, Key=key, ConsistentRead=True),
    }


def contender(name: str, slug: str, wrap: Callable[..., Any], key: str) -> Contender:
    return Contender(name, slug, key, wrap, OURS.in_progress_error, OURS.decorate)


class PerInvocation(NamedTuple):
    least: float
    """The least CPU per invocation over the chunks."""
    calls: int
    """Round trips per invocation."""
    by_round: list[float]
    """CPU per invocation in each round's chunk, round by round (the paths interleaved)."""


def invocations(
    endpoint_url: str, tables: dict[str, str], *, rounds: int, chunk: int, recorded: bool = True
) -> dict[tuple[str, str], PerInvocation]:
    """CPU per invocation and round trips, by (scenario, path): answered from a recording, or
    (`recorded=False`) by DynamoDB Local itself."""
    rows = []
    subjects: dict[str, Timed] = {}
    for scenario in (FIRST_RUN, REPLAY):
        for slug, make_client, wrap in (
            ("powertools", dynamodb_client, _wrap_powertools),
            ("ours-boto3", our_default_client, _ours(fast_wire=False)),
            ("ours-fast", our_default_client, _ours(fast_wire=True)),
        ):
            table = tables["powertools" if slug == "powertools" else "ours"]
            client = make_client(endpoint_url)
            replayer = Replayer(client.meta.events) if recorded else None
            key = POWERTOOLS.key_attribute if slug == "powertools" else OURS.key_attribute
            who = POWERTOOLS if slug == "powertools" else contender(slug, slug, wrap, key)
            subject = Subject(scenario, who, client, table)
            with subject:
                recorder = Recorder(client.meta.events)
                subject()
                requests, script = recorder.take()
            recorder.detach()
            if replayer is not None:
                replayer.play(script)
            subject()
            if replayer is not None:
                replayer.check()
            name = f"{scenario.slug}/{slug}"
            subjects[name] = Timed(subject, BotocoreMeter(client))
            rows.append((scenario.slug, slug, name, len(requests)))
    samples = interleaved_cpu(subjects, rounds=rounds, chunk=chunk)
    return {
        (scenario, slug): PerInvocation(
            min(sample.total for sample in samples[name]),
            calls,
            [sample.total for sample in samples[name]],
        )
        for scenario, slug, name, calls in rows
    }


def paired_ratios(ours: PerInvocation, theirs: PerInvocation) -> tuple[float, float, float]:
    """The median of the round-by-round ratios of `ours` to `theirs`, with its quartiles: each
    ratio compares two chunks of one round, so drift of the machine between rounds cancels."""
    ratios = [mine / other for mine, other in zip(ours.by_round, theirs.by_round, strict=True)]
    low, median, high = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
    return low, median, high


def _ours(*, fast_wire: bool) -> Callable[..., Any]:
    def wrap(client: Any, table: str, handler: Any, *, cache: bool, **options: Any) -> Any:
        from lambda_idempotency import DynamoDBStore

        store = DynamoDBStore(table, client=client, fast_wire=fast_wire)
        return decorated(store, handler, cache=cache, **options)

    return wrap  # the shared wrap gets a metering proxy as its client: the fast path needs ours


def decorated(store: Any, handler: Any, *, cache: bool, **options: Any) -> Any:
    """`handler` decorated with ours over `store`, as every scenario's subject is."""
    from lambda_idempotency import idempotent

    from .workload import KEY_SELECTION, PAYLOAD_SELECTION

    return idempotent(
        key=KEY_SELECTION,
        payload=PAYLOAD_SELECTION,
        store=store,
        cache_size=256 if cache else 0,
        **options,
    )(handler)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.wire", description=__doc__)
    parser.add_argument("--endpoint", help="use this DynamoDB Local instead of starting one")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--chunk", type=int, default=120)
    args = parser.parse_args()
    if args.endpoint:
        run(args.endpoint, args.rounds, args.chunk)
        return
    from lambda_idempotency._dev.dynamodb_local import DynamoDBLocal

    with DynamoDBLocal() as local:
        run(local.endpoint_url, args.rounds, args.chunk)


@dataclass(frozen=True)
class WireResults:
    botocore_version: str
    per_call: dict[str, dict[str, float]]
    """CPU seconds per call by where the answer came from, then by "claim, boto3" etc."""
    per_invocation: dict[tuple[str, str], PerInvocation]
    """Answered from a recording."""
    per_invocation_live: dict[tuple[str, str], PerInvocation]
    """Answered by DynamoDB Local (the client's CPU only)."""


def measure(endpoint_url: str, rounds: int, chunk: int) -> WireResults:
    import botocore

    setup = dynamodb_client(endpoint_url)
    tables = {
        "ours": create_table(setup, f"wire-ours-{os.getpid()}-{next(_keys)}", OURS.key_attribute),
        "powertools": create_table(
            setup, f"wire-pt-{os.getpid()}-{next(_keys)}", POWERTOOLS.key_attribute
        ),
    }
    memory = our_default_client(endpoint_url)
    answer_from_memory(memory, b'{"Item": {"pk": {"S": "bench-get"}}}')
    per_call_results = {
        title: per_call(calls_per_path(client, tables["ours"]), rounds=rounds, chunk=chunk_size)
        for title, client, chunk_size in (
            (FROM_MEMORY, memory, chunk),
            (FROM_LOCAL, our_default_client(endpoint_url), max(2, chunk // 5)),
        )
    }
    return WireResults(
        botocore.__version__,
        per_call_results,
        invocations(endpoint_url, tables, rounds=rounds, chunk=max(2, chunk // 3)),
        # The wire adds its own noise (DynamoDB Local shares the machine): more, shorter chunks.
        invocations(
            endpoint_url, tables, rounds=3 * rounds, chunk=max(2, chunk // 20), recorded=False
        ),
    )


FROM_MEMORY = "answered from memory"
FROM_LOCAL = "against DynamoDB Local"
FROM_RECORDING = "from a recording"
PATHS = {
    "powertools": "Powertools (boto3's default client)",
    "ours-boto3": "lambda-idempotency through boto3 (fixed user agent)",
    "ours-fast": "lambda-idempotency, fast wire path",
}


def section(results: WireResults) -> Section:
    call_rows = [
        [
            f"{what}, {title}",
            f"{best[f'{what}, boto3'] * 1e6:.0f} µs",
            f"{best[f'{what}, fast'] * 1e6:.0f} µs",
            f"{best[f'{what}, fast'] / best[f'{what}, boto3']:.2f}x",
        ]
        for title, best in results.per_call.items()
        for what in ("claim", "get")
    ]
    invocation_rows = []
    budgets = []
    for answered, results_by_path, budget in (
        (FROM_RECORDING, results.per_invocation, 0.5),
        (FROM_LOCAL, results.per_invocation_live, 0.7),
    ):
        for scenario in (FIRST_RUN, REPLAY):
            theirs = results_by_path[(scenario.slug, "powertools")]
            for slug, label in PATHS.items():
                path = results_by_path[(scenario.slug, slug)]
                low, median, high = paired_ratios(path, theirs)
                invocation_rows.append(
                    [
                        f"{scenario.title}, {answered}",
                        label,
                        str(path.calls),
                        f"{path.least * 1e6:.0f} µs",
                        f"{path.least / theirs.least:.2f}x",
                        f"{median:.2f}x ({low:.2f} to {high:.2f})",
                    ]
                )
            budgets.append(_budget(scenario, answered, budget, results_by_path))
    return Section(
        title="Fast wire path",
        method=(
            "The store's own requests through boto3 and through the fast wire path over the "
            "same client (the store's default client: fixed user agent, no client-side "
            f"validation; botocore {results.botocore_version}, no awscrt). Per call: the "
            "store's claim (a conditional PutItem) and get (a GetItem), answered from memory "
            "in `before-send` (the wire taken out) and by DynamoDB Local (the wire in, client "
            "CPU only). Per invocation: the first-run and replay scenarios of the CPU section, "
            "answered from a recording and by DynamoDB Local (client CPU only), logging "
            "unconfigured. Least CPU over many short interleaved chunks, and the median (with "
            "quartiles) of the round-by-round ratios to Powertools, each comparing two chunks "
            "of one round. From a recording the least CPU is the least-disturbed estimate and "
            "the verdict uses it; against DynamoDB Local, which shares the machine's cores, the "
            "ratio of least CPU moves by several hundredths from run to run, so the verdict "
            "there uses the round-by-round median."
        ),
        tables=[
            Table(["request", "boto3", "fast wire path", "ratio"], call_rows),
            Table(
                [
                    "scenario",
                    "library and path",
                    "round trips",
                    "CPU per invocation",
                    "of Powertools",
                    "of Powertools, round by round",
                ],
                invocation_rows,
            ),
        ],
        budgets=budgets,
    )


def _budget(
    scenario: Scenario,
    answered: str,
    limit: float,
    results_by_path: dict[tuple[str, str], PerInvocation],
) -> Budget:
    ours = results_by_path[(scenario.slug, "ours-fast")]
    theirs = results_by_path[(scenario.slug, "powertools")]
    cpu = f"{ours.least * 1e6:.0f} µs vs {theirs.least * 1e6:.0f} µs"
    if answered == FROM_RECORDING:
        ratio, measured = ours.least / theirs.least, f"{cpu} = {ours.least / theirs.least:.2f}x"
    else:
        low, ratio, high = paired_ratios(ours, theirs)
        measured = f"{ratio:.3f}x round by round ({low:.2f} to {high:.2f}; least CPU {cpu})"
    where = "" if answered == FROM_RECORDING else f", {FROM_LOCAL}"
    return Budget(
        f"total CPU per invocation, {scenario.title.lower()}, fast wire path{where}",
        f"≤ {limit}x Powertools' total",
        measured,
        ratio <= limit,
    )


def run(endpoint_url: str, rounds: int, chunk: int) -> None:
    results = measure(endpoint_url, rounds, chunk)
    print(f"botocore {results.botocore_version}")
    for title, best in results.per_call.items():
        print(f"per call, {title}:")
        for what in ("claim", "get"):
            boto3, fast = best[f"{what}, boto3"], best[f"{what}, fast"]
            print(
                f"  {what:5} boto3 {boto3 * 1e6:6.0f} µs  fast {fast * 1e6:6.0f} µs"
                f"  ({fast / boto3:.2f} of boto3)"
            )
    for title, by_path in (
        (FROM_RECORDING, results.per_invocation),
        (FROM_LOCAL, results.per_invocation_live),
    ):
        print(f"per invocation, {title}:")
        for (scenario, slug), path in by_path.items():
            theirs = by_path[(scenario, "powertools")]
            low, median, high = paired_ratios(path, theirs)
            print(
                f"  {scenario:10} {slug:11} {path.least * 1e6:7.0f} µs ({path.calls} calls)"
                f"  {path.least / theirs.least:.2f}  round by round {median:.2f}"
                f" ({low:.2f} to {high:.2f})"
            )


if __name__ == "__main__":
    main()
