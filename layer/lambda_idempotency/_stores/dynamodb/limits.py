"""DynamoDB's limits on an item, counted as DynamoDB counts them: the store places every item
it writes within them, and refuses at decoration a namespace whose items never could be
(`DynamoDBStore.check_decoration`).

DynamoDB refuses a partition key over 2,048 bytes, a sort key over 1,024 and an item over
400 KB, names and values counted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ITEM_BYTES = 400 * 1024
"""DynamoDB's largest item: attribute names and values, UTF-8 and raw bytes."""
PARTITION_KEY_BYTES = 2048
SORT_KEY_BYTES = 1024
KEY_NAME_BYTES = 255
"""A key attribute's name (the table's key schema)."""
NAME_BYTES = 65_535
"""Any other attribute's name."""
WIDEST_NUMBER = "9" * 14
"""Epoch seconds and milliseconds have at most 14 digits for centuries yet."""


def attribute_size(value: Mapping[str, Any]) -> int:
    """The bytes DynamoDB counts for one attribute value of the types our items hold (its
    name is counted apart). A number is counted as if each character were a digit: an
    upper bound of DynamoDB's count (1 byte per 2 significant digits, plus 1)."""
    text = value.get("S")
    if text is not None:
        return len(str(text).encode())
    data = value.get("B")
    if data is not None:
        return len(bytes(data))
    number = value.get("N")
    if number is not None:
        return (len(str(number)) + 1) // 2 + 1
    raise ValueError(f"the library writes no attribute of type {sorted(value)}")


def item_size(item: Mapping[str, Mapping[str, Any]]) -> int:
    """An item's size by DynamoDB's rules: every attribute's name and value."""
    size = 0
    for name, value in item.items():
        size += len(name.encode()) + attribute_size(value)
    return size
