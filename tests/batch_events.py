"""Batch events in the shapes `sam local generate-event` prints (sqs receive-message,
kinesis get-records, dynamodb update), built per test."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

QUEUE_ARN = "arn:aws:sqs:us-east-1:123456789012:MyQueue"
FIFO_QUEUE_ARN = "arn:aws:sqs:us-east-1:123456789012:MyQueue.fifo"
STREAM_ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/orders"
TABLE_STREAM_ARN = (
    "arn:aws:dynamodb:us-east-1:123456789012:table/Orders/stream/2015-06-27T00:48:05.899"
)


def sqs_record(
    message_id: str,
    body: Any,
    *,
    receive_count: int = 1,
    group: str | None = None,
    queue_arn: str = QUEUE_ARN,
) -> dict[str, Any]:
    text = body if isinstance(body, str) else json.dumps(body)
    attributes = {
        "ApproximateReceiveCount": str(receive_count),
        "SentTimestamp": "1523232000000",
        "SenderId": "123456789012",
        "ApproximateFirstReceiveTimestamp": "1523232000001",
    }
    if group is not None:
        attributes |= {
            "SequenceNumber": "18849496460467696128",
            "MessageGroupId": group,
            "MessageDeduplicationId": message_id,
        }
    return {
        "messageId": message_id,
        "receiptHandle": f"MessageReceiptHandle-{receive_count}",
        "body": text,
        "attributes": attributes,
        "messageAttributes": {},
        "md5OfBody": hashlib.md5(text.encode()).hexdigest(),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": "us-east-1",
    }


def kinesis_record(
    sequence: int, data: Any, *, shard: str = "shardId-000000000000"
) -> dict[str, Any]:
    sequence_number = f"4954511524349098501828006771497314458218006259324420{sequence:04d}"
    return {
        "kinesis": {
            "partitionKey": "partitionKey-03",
            "kinesisSchemaVersion": "1.0",
            "data": base64.b64encode(json.dumps(data).encode()).decode(),
            "sequenceNumber": sequence_number,
            "approximateArrivalTimestamp": 1428537600,
        },
        "eventSource": "aws:kinesis",
        "eventID": f"{shard}:{sequence_number}",
        "invokeIdentityArn": "arn:aws:iam::123456789012:role/lambda-role",
        "eventVersion": "1.0",
        "eventName": "aws:kinesis:record",
        "eventSourceARN": STREAM_ARN,
        "awsRegion": "us-east-1",
    }


def dynamodb_record(sequence: int, item_id: int, message: str) -> dict[str, Any]:
    return {
        "eventID": hashlib.md5(str(sequence).encode()).hexdigest(),
        "eventName": "INSERT",
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": {
            "Keys": {"Id": {"N": str(item_id)}},
            "NewImage": {"Message": {"S": message}, "Id": {"N": str(item_id)}},
            "ApproximateCreationDateTime": 1428537600,
            "SequenceNumber": f"44215845000000000174504{sequence:05d}",
            "SizeBytes": 26,
            "StreamViewType": "NEW_AND_OLD_IMAGES",
        },
        "eventSourceARN": TABLE_STREAM_ARN,
    }


def batch(*records: dict[str, Any]) -> dict[str, Any]:
    return {"Records": list(records)}


def failed(response: dict[str, Any]) -> list[str]:
    return [failure["itemIdentifier"] for failure in response["batchItemFailures"]]
