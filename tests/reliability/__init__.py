"""The reliability suite: the failure promises of the design, tried on DynamoDB Local with
faults injected through botocore's event system (a few trials each in CI; `make
reliability` runs many and writes docs/reliability.md)."""
