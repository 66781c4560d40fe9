"""A pydantic model at module level, where return annotations can be resolved (tests only
import pydantic here, so the library's own import stays free of it)."""

import pydantic


class Payment(pydantic.BaseModel):
    id: str
    amount: int
