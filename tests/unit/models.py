"""A pydantic model at module level, where return annotations can be resolved (tests only
import pydantic here, so the library's own import stays free of it)."""

import datetime
import decimal
import uuid

import pydantic


class Payment(pydantic.BaseModel):
    id: str
    amount: int


class Shipment(pydantic.BaseModel):
    """Fields plain JSON has no type for: pydantic's JSON mode spells them as strings."""

    id: uuid.UUID
    shipped_at: datetime.datetime
    weight_kg: decimal.Decimal
