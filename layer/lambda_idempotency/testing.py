"""Test helpers for users of lambda-idempotency, and the pytest plugin that ships them.

Fixtures (registered through the `pytest11` entry point, nothing to import):

    idempotency_store_moto    a DynamoDBStore on a fresh table in moto (in-process, fast)
    idempotency_store_local   a DynamoDBStore on a fresh table in DynamoDB Local (real HTTP)
    dynamodb_local_endpoint   the URL of one DynamoDB Local started for the whole test run
    idempotency_table         for handler modules with a module-level store: the environment
                              points at a table in moto; `import_handler` imports them afresh
    idempotency_table_local   the same on DynamoDB Local

Helpers: `FakeClock` (move time instead of sleeping), `FakeLambdaContext`, `RoundTrips`
(count the requests a client sends), `create_idempotency_table`.

The code lives in the development subpackage (`_dev`), which pip installs and the Lambda
layer omits; this module, also left out of the layer, is its public import path.
"""

try:
    import pytest as _pytest  # noqa: F401  (the fixtures below are pytest's)
except ModuleNotFoundError as _exc:
    from ._dev.extras import missing_extra

    raise missing_extra(_exc, "lambda_idempotency.testing") from _exc

from ._dev.handler_tables import (
    IdempotencyTable,
    idempotency_table,
    idempotency_table_local,
    import_handler,
)
from ._dev.testing import (
    FakeClock,
    FakeLambdaContext,
    RoundTrips,
    create_idempotency_table,
    dynamodb_local_endpoint,
    idempotency_store_local,
    idempotency_store_moto,
)

__all__ = [
    "FakeClock",
    "FakeLambdaContext",
    "IdempotencyTable",
    "RoundTrips",
    "create_idempotency_table",
    "dynamodb_local_endpoint",
    "idempotency_store_local",
    "idempotency_store_moto",
    "idempotency_table",
    "idempotency_table_local",
    "import_handler",
]
