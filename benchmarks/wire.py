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
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from botocore.awsrequest import AWSResponse

from .contenders import OURS, POWERTOOLS, Contender, _wrap_powertools
from .cpu import BotocoreMeter, Timed, interleaved_cpu
from .recording import Recorder, Replayer
from .report import Budget, Section, Table
from .scenarios import FIRST_RUN, REPLAY, Subject
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
    from lambda_idempotency._wire import FastWire

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
    return Contender(name, slug, key, wrap, OURS.in_progress_error)


def invocations(
    endpoint_url: str, tables: dict[str, str], *, rounds: int, chunk: int, recorded: bool = True
) -> dict[tuple[str, str], tuple[float, int]]:
    """CPU per invocation (least over the chunks) and round trips, by (scenario, path):
    answered from a recording, or (`recorded=False`) by DynamoDB Local itself."""
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
            replayer = Replayer(client) if recorded else None
            key = POWERTOOLS.key_attribute if slug == "powertools" else OURS.key_attribute
            who = POWERTOOLS if slug == "powertools" else contender(slug, slug, wrap, key)
            subject = Subject(scenario, who, client, table)
            with subject:
                recorder = Recorder(client)
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
        (scenario, slug): (min(sample.total for sample in samples[name]), calls)
        for scenario, slug, name, calls in rows
    }


def _ours(*, fast_wire: bool) -> Callable[..., Any]:
    def wrap(client: Any, table: str, handler: Any, *, cache: bool, **options: Any) -> Any:
        from lambda_idempotency import DynamoDBStore, idempotent

        from .workload import KEY_SELECTION, PAYLOAD_SELECTION

        store = DynamoDBStore(table, client=client, fast_wire=fast_wire)
        return idempotent(
            key=KEY_SELECTION,
            payload=PAYLOAD_SELECTION,
            store=store,
            cache_size=256 if cache else 0,
            **options,
        )(handler)

    return wrap  # the shared wrap gets a metering proxy as its client: the fast path needs ours


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
    per_invocation: dict[tuple[str, str], tuple[float, int]]
    """Answered from a recording."""
    per_invocation_live: dict[tuple[str, str], tuple[float, int]]
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
            theirs, _ = results_by_path[(scenario.slug, "powertools")]
            for slug, label in PATHS.items():
                cpu, calls = results_by_path[(scenario.slug, slug)]
                invocation_rows.append(
                    [
                        f"{scenario.title}, {answered}",
                        label,
                        str(calls),
                        f"{cpu * 1e6:.0f} µs",
                        f"{cpu / theirs:.2f}x",
                    ]
                )
            ours, _ = results_by_path[(scenario.slug, "ours-fast")]
            where = "" if budget == 0.5 else f", {FROM_LOCAL}"
            budgets.append(
                Budget(
                    f"total CPU per invocation, {scenario.title.lower()}, fast wire path{where}",
                    f"≤ {budget}x Powertools' total",
                    f"{ours * 1e6:.0f} µs vs {theirs * 1e6:.0f} µs = {ours / theirs:.2f}x",
                    ours <= budget * theirs,
                )
            )
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
            "unconfigured. Least CPU over many short interleaved chunks."
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
                ],
                invocation_rows,
            ),
        ],
        budgets=budgets,
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
        for (scenario, slug), (cpu, calls) in by_path.items():
            theirs, _ = by_path[(scenario, "powertools")]
            print(
                f"  {scenario:10} {slug:11} {cpu * 1e6:7.0f} µs ({calls} calls)  {cpu / theirs:.2f}"
            )


if __name__ == "__main__":
    main()
