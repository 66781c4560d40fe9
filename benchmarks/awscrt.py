"""awscrt's C signer beside the fast wire path: per-call CPU, import cost and installed size.

    python -m benchmarks.awscrt          (in a virtualenv with awscrt: `make bench-awscrt`)

With `awscrt` importable, botocore signs SigV4 with the CRT's signer (in C) instead of its
own (in Python); Lambda's Python runtime has no awscrt, a container image or `boto3[crt]`
may. This measures the store's claim (a conditional PutItem) and get (a GetItem) answered
from memory in `before-send`, through the boto3 client and through the fast wire path, three
ways: awscrt blocked before botocore is imported (as on Lambda), installed but switched off
with botocore's BOTO_DISABLE_CRT, and installed and used. Each way runs in fresh interpreters
of this virtualenv, the ways alternated, the boto3 client and the fast path interleaved
inside each; the least CPU per call (`time.process_time`) is kept. Then the import cost:
`import boto3` and the first DynamoDB client in fresh interpreters, the ways alternated; and
awscrt's installed size. Prints the numbers.

Not a section of `make bench`, which measures Lambda's environment (no awscrt).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import statistics
import subprocess
import sys
from typing import Any

from .environment import block_awscrt

MODES = {
    "blocked": "without awscrt",
    "disabled": "installed, BOTO_DISABLE_CRT=true",
    "crt": "with awscrt",
}
"""How botocore runs: awscrt not importable (as on Lambda), importable but switched off by
botocore's own environment variable (imported all the same), or importable and used."""
TABLE = "idempotency"


def measure_calls(mode: str, rounds: int, chunk: int) -> dict[str, Any]:
    """In this process: CPU per call of the claim and the get through the boto3 client and the
    fast path, awscrt blocked, switched off or used by botocore (a key of MODES)."""
    if mode == "blocked":
        block_awscrt()
    from botocore.compat import HAS_CRT

    from lambda_idempotency._stores.dynamodb.client import default_client
    from lambda_idempotency._stores.dynamodb.wire.path import FastWire

    from .wire import answer_from_memory, calls_per_path, per_call
    from .workload import REGION

    if (mode == "crt") != HAS_CRT:
        raise SystemExit(f"botocore's HAS_CRT is {HAS_CRT} in mode {mode}")
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "benchmark")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "benchmark")
    client = default_client(None, REGION)  # the regional https endpoint, as on Lambda
    answer_from_memory(client, b'{"Item": {"pk": {"S": "bench-get"}}}')
    calls = calls_per_path(client, TABLE)
    if not FastWire(client).usable("put_item"):
        raise SystemExit("the fast wire path steps aside for this client")
    signer = _signer_of(client)
    return {"signer": signer, "per_call": per_call(calls, rounds=rounds, chunk=chunk)}


def _signer_of(client: Any) -> str:
    auth = client._request_signer.get_auth_instance(
        signing_name="dynamodb", region_name=client.meta.region_name, signature_version="v4"
    )
    return f"{type(auth).__module__}.{type(auth).__qualname__}"


IMPORT_PROBE = """
import json, sys, time
if sys.argv[1] == "blocked":
    sys.modules["awscrt"] = None
wall, cpu = time.perf_counter(), time.process_time()
import boto3
imported = time.perf_counter() - wall, time.process_time() - cpu
wall, cpu = time.perf_counter(), time.process_time()
boto3.client("dynamodb", region_name="us-east-1", aws_access_key_id="a",
             aws_secret_access_key="b")
created = time.perf_counter() - wall, time.process_time() - cpu
from botocore.compat import HAS_CRT
assert HAS_CRT == (sys.argv[1] == "crt"), HAS_CRT
print(json.dumps({"import": imported, "client": created}))
"""


def import_costs(runs: int) -> dict[str, dict[str, list[list[float]]]]:
    """[wall, CPU] seconds of `import boto3` and of the first client, per mode, one fresh
    interpreter each, the modes alternated."""
    costs: dict[str, dict[str, list[list[float]]]] = {
        mode: {"import": [], "client": []} for mode in MODES
    }
    for run in range(runs + 1):  # the first pair warms the file cache and is thrown away
        for mode in MODES if run % 2 else reversed(list(MODES)):
            completed = subprocess.run(
                [sys.executable, "-c", IMPORT_PROBE, mode],
                env=_environment(mode),
                capture_output=True,
                text=True,
                check=True,
            )
            if run:
                for step, pair in json.loads(completed.stdout).items():
                    costs[mode][step].append(pair)
    return costs


def installed_size(distribution: str) -> tuple[int, int]:
    """(bytes, files) of an installed distribution, as its RECORD lists them."""
    files = importlib.metadata.distribution(distribution).files or []
    sizes = [path.locate().stat().st_size for path in files if path.locate().is_file()]
    return sum(sizes), len(sizes)


def per_call_by_mode(processes: int, rounds: int, chunk: int) -> dict[str, dict[str, Any]]:
    """The least CPU per call over `processes` fresh interpreters per mode, alternated."""
    best: dict[str, dict[str, Any]] = {}
    options = ["--rounds", str(rounds), "--chunk", str(chunk)]
    for process in range(processes):
        for mode in MODES if process % 2 else reversed(list(MODES)):
            completed = subprocess.run(
                [sys.executable, "-m", "benchmarks.awscrt", "--worker", mode, *options],
                env=_environment(mode),
                capture_output=True,
                text=True,
                check=True,
            )
            result = json.loads(completed.stdout)
            seen = best.setdefault(mode, {"signer": result["signer"], "per_call": {}})
            for name, seconds in result["per_call"].items():
                seen["per_call"][name] = min(seen["per_call"].get(name, seconds), seconds)
    return best


def _environment(mode: str) -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if k != "BOTO_DISABLE_CRT"}
    if mode == "disabled":
        environment["BOTO_DISABLE_CRT"] = "true"
    return environment


def report(per_call: dict[str, dict[str, Any]], imports: dict[str, Any]) -> str:
    import botocore

    modes = list(MODES)
    lines = [
        f"botocore {botocore.__version__}, awscrt {importlib.metadata.version('awscrt')}, "
        f"Python {sys.version.split()[0]}; least CPU per call, "
        f"{MODES['crt']} / {MODES['blocked']} in the last column",
        "",
        "| request | path | " + " | ".join(MODES.values()) + " | ratio |",
        "| --- | --- | " + "--- | " * len(MODES) + "--- |",
    ]
    reference = per_call["blocked"]["per_call"]
    for what in ("claim", "get"):
        for path, label in (("boto3", "boto3 client"), ("fast", "fast wire path")):
            name = f"{what}, {path}"
            best = {mode: per_call[mode]["per_call"][name] for mode in modes}
            lines.append(
                f"| {what} | {label} | "
                + " | ".join(
                    f"{best[mode] * 1e6:.0f} µs ({best[mode] / reference[f'{what}, boto3']:.2f}x)"
                    for mode in modes
                )
                + f" | {best['crt'] / best['blocked']:.2f}x |"
            )
    lines += [
        "",
        "(x: of the boto3 client without awscrt)",
        "",
        "signer: " + "; ".join(f"{MODES[m]}: {per_call[m]['signer']}" for m in modes),
        "",
        "| fresh interpreter, median | " + " | ".join(MODES.values()) + " |",
        "| --- |" + " --- |" * len(MODES),
    ]
    for step, label in (("import", "import boto3"), ("client", "first DynamoDB client")):
        for index, kind in ((0, "wall"), (1, "CPU")):
            values = {
                mode: statistics.median(pair[index] for pair in imports[mode][step])
                for mode in modes
            }
            lines.append(
                f"| {label}, {kind} ({len(imports['crt'][step])} runs) | "
                + " | ".join(
                    f"{values[mode] * 1e3:.1f} ms"
                    + (
                        ""
                        if mode == "blocked"
                        else f" ({(values[mode] - values['blocked']) * 1e3:+.1f})"
                    )
                    for mode in modes
                )
                + " |"
            )
    size, files = installed_size("awscrt")
    lines += ["", f"awscrt installed: {size / 2**20:.1f} MiB in {files} files"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.awscrt", description=__doc__)
    parser.add_argument("--worker", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--processes", type=int, default=4, help="fresh interpreters per mode")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--chunk", type=int, default=200)
    parser.add_argument("--imports", type=int, default=10, help="fresh interpreters per mode")
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(measure_calls(args.worker, args.rounds, args.chunk)))
        return
    if importlib.util.find_spec("awscrt") is None:
        raise SystemExit("awscrt is not installed here: run `make bench-awscrt`")
    per_call = per_call_by_mode(args.processes, args.rounds, args.chunk)
    print(report(per_call, import_costs(args.imports)))


if __name__ == "__main__":
    main()
