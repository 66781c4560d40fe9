"""The store's own DynamoDB requests without a botocore client: in Lambda, where building one
costs a cold start more CPU than everything else the library does (`transport`)."""
