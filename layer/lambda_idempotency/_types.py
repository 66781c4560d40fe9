"""The type aliases the public calls take, below every module that names them.

`OnReplay` and `InProgressPolicy` are read by the engine, the decorators and the options'
`TypedDict`s alike: here, none of those has to import another for a type.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from ._record import ReplayInfo

OnReplay = Callable[[Any, ReplayInfo], Any]
"""Called with each replayed result and what tells it apart; returns what the caller gets."""

InProgressPolicy = Literal["raise", "wait"]
"""`on_in_progress=`: raise InProgressError, or wait for the holder's result."""
