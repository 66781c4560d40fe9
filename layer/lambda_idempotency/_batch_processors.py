"""Powertools' batch processors, chosen per event source, plus the one rule they leave out.

Imported only by `process_batch` when a batch arrives: Powertools costs a cold start that
handlers without batches should not pay.

Powertools does the bookkeeping: which records failed and how Lambda wants them named
(`messageId` for SQS, the sequence number for Kinesis and DynamoDB Streams), and FIFO
ordering (`SqsFifoPartialProcessor` fails the rest of the batch, or of the message group,
after a failure). For streams its `BatchProcessor` keeps going after a failure; Lambda
then resumes the shard from the lowest sequence number reported, so the records after it
come back anyway, but they would already have run before the one that failed. `StreamProcessor`
stops at the first failure instead, so a shard's records take effect in order.
"""

from __future__ import annotations

import logging
from typing import Any

from aws_lambda_powertools.utilities.batch import (
    BasePartialBatchProcessor,
    BatchProcessor,
    EventType,
    SqsFifoPartialProcessor,
)
from aws_lambda_powertools.utilities.batch.base import FailureResponse, SuccessResponse

logger = logging.getLogger("lambda_idempotency.batch")
"""Powertools logs each failed record's traceback here (records it skipped have none)."""


class EarlierRecordFailedError(Exception):
    """Why a stream record did not run: an earlier record of its shard failed. Only recorded
    by the processor, never raised."""


class StreamProcessor(BatchProcessor):
    """`BatchProcessor` for Kinesis and DynamoDB Streams that fails every record after the
    first failure without running it: like `SqsFifoPartialProcessor`, for shards."""

    _skipped = (
        EarlierRecordFailedError,
        EarlierRecordFailedError("an earlier record of this shard failed"),
        None,
    )

    def _process_record(self, record: dict[str, Any]) -> SuccessResponse | FailureResponse:
        if self.fail_messages:
            return self.failure_handler(
                record=self._to_batch_type(record, event_type=self.event_type),
                exception=self._skipped,
            )
        return super()._process_record(record)


def processor_for(
    event_type: str, *, fifo: bool, skip_group_on_error: bool
) -> BasePartialBatchProcessor:
    """A fresh processor for one batch (it holds the batch's state, so never share one).

    It reports failures in the response even when every record failed, instead of raising:
    Lambda redelivers the same records either way, and the response is then always the
    shape the caller reads.
    """
    processor: BasePartialBatchProcessor
    if event_type == "SQS" and fifo:
        processor = SqsFifoPartialProcessor(skip_group_on_error=skip_group_on_error, logger=logger)
    elif event_type == "SQS":
        processor = BatchProcessor(EventType.SQS, logger=logger)
    else:
        processor = StreamProcessor(EventType(event_type), logger=logger)
    processor.raise_on_entire_batch_failure = False
    return processor
