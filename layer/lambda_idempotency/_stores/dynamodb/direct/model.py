"""What the direct path needs to know of DynamoDB's API model, written down once instead of
loaded: loading botocore's model and endpoint rules is most of what building a client costs.

Each fact here is checked against the model of the botocore installed, by
tests/unit/test_direct_model.py, in CI for every botocore the package is tested with.
"""

from __future__ import annotations

TARGET_PREFIX = "DynamoDB_20120810"
CONTENT_TYPE = "application/x-amz-json-1.0"
SIGNING_NAME = "dynamodb"
ENDPOINT_PREFIX = "dynamodb"

OPERATIONS = {
    "put_item": "PutItem",
    "get_item": "GetItem",
    "batch_get_item": "BatchGetItem",
    "batch_write_item": "BatchWriteItem",
}
"""The protocol's requests the direct path makes (a transaction's enlisted writes, and the
operators' scan, go through a client)."""

OUTPUT_MEMBERS = {
    "PutItem": ("Attributes", "ConsumedCapacity", "ItemCollectionMetrics"),
    "GetItem": ("Item", "ConsumedCapacity"),
    "BatchGetItem": ("Responses", "UnprocessedKeys", "ConsumedCapacity"),
    "BatchWriteItem": ("UnprocessedItems", "ItemCollectionMetrics", "ConsumedCapacity"),
}
"""Each answer's members: botocore's parser keeps these and drops anything else."""

ERROR_MEMBERS = {
    "BackupInUseException": ("message",),
    "BackupNotFoundException": ("message",),
    "ConditionalCheckFailedException": ("message", "Item"),
    "ContinuousBackupsUnavailableException": ("message",),
    "DuplicateItemException": ("message",),
    "ExportConflictException": ("message",),
    "ExportNotFoundException": ("message",),
    "GlobalTableAlreadyExistsException": ("message",),
    "GlobalTableNotFoundException": ("message",),
    "IdempotentParameterMismatchException": ("Message",),
    "ImportConflictException": ("message",),
    "ImportNotFoundException": ("message",),
    "IndexNotFoundException": ("message",),
    "InternalServerError": ("message",),
    "InvalidExportTimeException": ("message",),
    "InvalidRestoreTimeException": ("message",),
    "ItemCollectionSizeLimitExceededException": ("message",),
    "LimitExceededException": ("message",),
    "PointInTimeRecoveryUnavailableException": ("message",),
    "PolicyNotFoundException": ("message",),
    "ProvisionedThroughputExceededException": ("message", "ThrottlingReasons"),
    "ReplicaAlreadyExistsException": ("message",),
    "ReplicaNotFoundException": ("message",),
    "ReplicatedWriteConflictException": ("message",),
    "RequestLimitExceeded": ("message", "ThrottlingReasons"),
    "ResourceInUseException": ("message",),
    "ResourceNotFoundException": ("message",),
    "TableAlreadyExistsException": ("message",),
    "TableInUseException": ("message",),
    "TableNotFoundException": ("message",),
    "ThrottlingException": ("message", "throttlingReasons"),
    "TransactionCanceledException": ("Message", "CancellationReasons"),
    "TransactionConflictException": ("message",),
    "TransactionInProgressException": ("Message",),
}
"""DynamoDB's modeled errors, with the members botocore adds to an error's response (the
refused claim's item, a cancelled transaction's reasons), whichever operation answered."""

RETRYABLE_ERRORS = {
    "PutItem": {"ReplicatedWriteConflictException": False},
    "BatchWriteItem": {"ReplicatedWriteConflictException": False},
}
"""Errors each operation lists that the model marks retryable (-> whether as a throttle):
botocore's standard retry mode retries them."""
