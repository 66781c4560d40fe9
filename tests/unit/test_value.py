"""`_base.value.Value` behaves as `typing.NamedTuple` does, for every way a caller builds one."""

from __future__ import annotations

import copy
import pickle
from typing import Any, NamedTuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lambda_idempotency import AttributeNames, Record, ReplayInfo, Status
from lambda_idempotency._base.value import Value


class Ours(Value):
    """A value class."""

    a: int
    b: str
    c: int | None = None
    d: str = "d"

    def total(self) -> int:
        return self.a + (self.c or 0)


class Theirs(NamedTuple):
    a: int
    b: str
    c: int | None = None
    d: str = "d"


FIELDS = ("a", "b", "c", "d")
VALUES = {"a": st.integers(), "b": st.text(max_size=5), "c": st.none() | st.integers()}
VALUES["d"] = st.text(max_size=5)


def _build(cls: Any, positional: int, given: dict[str, Any]) -> Any:
    names = [name for name in FIELDS if name in given]
    args = [given[name] for name in names[:positional]]
    return cls(*args, **{name: given[name] for name in names[positional:]})


@given(
    st.fixed_dictionaries({}, optional=VALUES),
    st.integers(min_value=0, max_value=4),
)
def test_built_as_a_namedtuple_is(given_values: dict[str, Any], positional: int) -> None:
    outcomes: list[object] = []
    for cls in (Ours, Theirs):
        try:
            value = _build(cls, positional, given_values)
        except TypeError:
            outcomes.append(TypeError)
        else:
            outcomes.append((tuple(value), value._asdict(), [getattr(value, f) for f in FIELDS]))
    assert outcomes[0] == outcomes[1]


@given(st.integers(), st.text(max_size=5), st.none() | st.integers(), st.text(max_size=5))
def test_every_namedtuple_operation_agrees(a: int, b: str, c: int | None, d: str) -> None:
    ours, theirs = Ours(a, b, c, d), Theirs(a, b, c, d)
    assert ours == theirs and hash(ours) == hash(theirs)  # type: ignore[comparison-overlap]
    assert ours._replace(b="x", c=1) == theirs._replace(b="x", c=1)  # type: ignore[comparison-overlap]
    assert Ours._make([a, b, c, d]) == ours
    assert pickle.loads(pickle.dumps(ours)) == ours
    assert type(pickle.loads(pickle.dumps(ours))) is Ours
    assert copy.deepcopy(ours) == ours and type(copy.copy(ours)) is Ours
    assert repr(ours) == repr(theirs).replace("Theirs", "Ours")
    assert ours.total() == a + (c or 0)
    match ours:
        case Ours(first, second, third, fourth):
            assert (first, second, third, fourth) == (a, b, c, d)


def test_its_class_attributes_are_a_namedtuples() -> None:
    assert Ours._fields == Theirs._fields == FIELDS
    assert Ours._field_defaults == Theirs._field_defaults == {"c": None, "d": "d"}
    assert Ours.__match_args__ == FIELDS
    assert Ours.__doc__ == "A value class."


def test_it_is_immutable_and_carries_no_instance_dict() -> None:
    value = Ours(1, "b")
    with pytest.raises(AttributeError):
        value.a = 2  # type: ignore[misc]
    with pytest.raises(AttributeError):
        value.other = 2  # type: ignore[attr-defined]
    assert not hasattr(value, "__dict__")


def test_wrong_arguments_are_refused_with_their_names() -> None:
    with pytest.raises(TypeError, match="missing required argument 'b'"):
        Ours(1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="takes 4 arguments, 5 given"):
        Ours(1, "b", 3, "d", 5)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"unexpected or repeated arguments \['a'\]"):
        Ours(1, "b", a=2)  # type: ignore[misc]
    with pytest.raises(TypeError, match=r"unexpected or repeated arguments \['e'\]"):
        Ours(1, "b", e=2)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match=r"no fields \['e'\]"):
        Ours(1, "b")._replace(e=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="takes 4 values, got 3"):
        Ours._make([1, "b", 3])


def test_a_field_without_a_default_after_one_with_is_refused_at_definition() -> None:
    with pytest.raises(TypeError, match="field 'b' without a default follows one with"):

        class Broken(Value):
            a: int = 1
            b: int  # type: ignore[misc]


def test_the_public_value_classes_keep_their_fields_and_defaults() -> None:
    record = Record("pk", Status.COMPLETED, 10, owner="o")
    assert tuple(record) == ("pk", Status.COMPLETED, 10, None, "o", None, None, None, None, None)
    assert record.is_expired(11_000) and not record.is_expired(10_999)
    assert AttributeNames()._replace(pk="id").pk == "id"
    assert AttributeNames().expiration == "expiration"
    assert ReplayInfo("k", None, "cache")._asdict() == {
        "key_hash": "k",
        "completed_at": None,
        "source": "cache",
    }
