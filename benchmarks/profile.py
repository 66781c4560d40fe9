"""Profile one scenario of one library the way the CPU section measures it.

    python -m benchmarks.profile first_run ours [--calls 3000] [--sort tottime]

The scenario is recorded on a DynamoDB Local started for the purpose, then replayed from the
recording under cProfile, so the profile holds the library and botocore, not the network.
The listing is split: the library's own functions first, then everything else.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import re

from .environment import block_awscrt

_SITE = re.compile(r"/\S*?/(site-packages|lib/python3\.\d+|layer)/")


def _short(listing: str) -> str:
    return "\n".join(_SITE.sub("", line) for line in listing.splitlines())


def main() -> None:
    block_awscrt()
    from lambda_idempotency._dev.dynamodb_local import DynamoDBLocal

    from . import cpu
    from .contenders import CONTENDERS
    from .scenarios import SCENARIOS
    from .workload import create_table, dynamodb_client

    scenarios = {scenario.slug: scenario for scenario in SCENARIOS}
    contenders = {contender.slug: contender for contender in CONTENDERS}
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile", description=__doc__)
    parser.add_argument("scenario", choices=sorted(scenarios))
    parser.add_argument("library", choices=sorted(contenders))
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--sort", default="tottime", choices=["tottime", "cumulative"])
    parser.add_argument("--lines", type=int, default=30)
    args = parser.parse_args()

    contender = contenders[args.library]
    with DynamoDBLocal() as local:
        setup = dynamodb_client(local.endpoint_url)
        table = create_table(setup, f"profile-{contender.slug}", contender.key_attribute)
        recorded = cpu.record(scenarios[args.scenario], contender, local.endpoint_url, table)
    for _ in range(min(300, args.calls)):
        recorded.subject()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(args.calls):
        recorded.subject()
    profiler.disable()
    recorded.replayer.check()

    own = "lambda_idempotency" if contender.slug == "ours" else "aws_lambda_powertools"
    for title, restriction in ((f"{own} only", own), ("everything", "")):
        buffer = io.StringIO()
        stats = pstats.Stats(profiler, stream=buffer).sort_stats(args.sort)
        stats.print_stats(restriction, args.lines)
        print(f"==== {title} ({args.calls} calls, sorted by {args.sort})")
        print(_short(buffer.getvalue()))


if __name__ == "__main__":
    main()
