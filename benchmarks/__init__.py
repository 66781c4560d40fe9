"""Benchmarks: lambda-idempotency beside the idempotency utility of Powertools for AWS Lambda.

One command (`make bench`, i.e. `python -m benchmarks`) measures both libraries on the same
machine, in the same process where it matters, and writes `docs/benchmarks.md` with a chart.
Every number is a ratio or a median of interleaved runs, because the machine is shared and
absolute timings are noisy. Sections, one module each:

    cpu          CPU per invocation (logging unconfigured and at INFO), DynamoDB answered from a
                 recording (botocore still works), and peak heap per invocation path
    production   CPU per invocation under X-Ray, Powertools Tracer, OpenTelemetry and a
                 user's before-call hook, and whether the fast wire path serves under each
    round_trips  requests per scenario, counted with botocore's event hooks
    latency      end-to-end p50 / p99 on DynamoDB Local over loopback
    cold_start   import time over boto3: from the SAM-built layer as shipped, and installed
    lambda_cold_start
                 INIT and the first invocation in CPU time, as Lambda starts an interpreter,
                 each library on its default client (on-demand and provisioned concurrency)
    memory       resident memory per library on its default store, in Lambda's environment,
                 after INIT, after a first call on each invocation path and after many
    storage      stored bytes, round trips and capacity (DynamoDB's rules), 1 KB .. 5.8 MB results
    contention   64 concurrent duplicates of one key
    throughput   distinct-key invocations per second against raw PutItem

These are measurements, not tests: nothing here asserts on time.
"""
