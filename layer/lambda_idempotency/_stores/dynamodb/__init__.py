"""The DynamoDB store: its record layouts, DynamoDB's item limits, and its own wire path."""
