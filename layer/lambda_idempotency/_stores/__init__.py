"""Stores: what the protocol keeps and where.

`contract` says what a store must do; `record` is what it holds; `encoding` turns results to
bytes and back; each store lives in a folder of its own (`dynamodb/`)."""
