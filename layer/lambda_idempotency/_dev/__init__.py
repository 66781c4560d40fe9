"""Development tooling: the `lambda-idempotency` command, local invoke, the template reader,
the DynamoDB Local installer and the pytest plugin.

pip installs it; the Lambda layer omits it (layer/Makefile), and nothing on the runtime import
path imports it, so a cold start never loads or compiles these modules. Users reach it through
the `lambda-idempotency` command, `python -m lambda_idempotency` and `lambda_idempotency.testing`.
"""
