"""The DynamoDB store's lean wire path: its requests planned, built, signed, sent and parsed
through the client's own botocore parts (`path` is where the store enters it)."""
