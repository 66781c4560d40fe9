"""`python -m benchmarks`: run the suite and write docs/benchmarks.md and its chart."""

from __future__ import annotations

from .environment import block_awscrt

block_awscrt()  # before anything imports botocore: Lambda's runtime has no awscrt

import argparse  # noqa: E402
from pathlib import Path  # noqa: E402

from .plan import Plan  # noqa: E402
from .suite import SECTIONS, run  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("docs"), help="where to write")
    parser.add_argument(
        "--smoke", action="store_true", help="tiny counts: checks the code, numbers meaningless"
    )
    parser.add_argument(
        "--only", default=",".join(SECTIONS), help=f"comma-separated subset of {SECTIONS}"
    )
    parser.add_argument("--endpoint", help="use this DynamoDB Local instead of starting one")
    parser.add_argument(
        "--no-chart", action="store_true", help="write the report only (no matplotlib needed)"
    )
    args = parser.parse_args()
    plan = Plan.smoke() if args.smoke else Plan()
    command = "make bench" if not args.smoke else "python -m benchmarks --smoke"
    path = run(
        plan,
        args.out,
        endpoint_url=args.endpoint,
        only=[name.strip() for name in args.only.split(",") if name.strip()],
        command=command,
        draw=not args.no_chart,
    )
    print(path)


if __name__ == "__main__":
    main()
