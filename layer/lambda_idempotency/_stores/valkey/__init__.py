"""The Valkey / Redis store: `store.ValkeyStore`, its steps as Lua scripts in `scripts`.

Loaded only when `lambda_idempotency.ValkeyStore` is first used: a DynamoDB handler never
imports it, nor redis-py."""
