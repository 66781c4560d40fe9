"""botocore's JSON response parser for the fast wire path, with each shape walked once.

botocore's JSONParser walks the model for every value of every answer: for a refused claim
that returns the item, about a hundred method lookups and calls for a dozen attributes. It
also decodes an error's body twice: once for the error code, once for the modeled fields
(the item of a refused claim, the reasons of a cancelled transaction). `compiled_parser`
gives the client's own parser, still doing everything it did (status, error codes, metadata,
retries read its answer as before), but with a parser compiled once per shape for the shape
walk, and the body of one answer decoded once.

A compiled parser handles the answers DynamoDB sends; for anything else (a null where a value
was expected, a union with other than one known member, a type it has not compiled) it hands
the decoded body to botocore's own walk, which answers, or raises, as it always has.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Decoder = Callable[[Any], Any]


class _UnusualAnswerError(Exception):
    """An answer a compiled parser does not know: botocore's own walk parses it."""


def compiled_parser(parser: Any) -> Any:
    """A parser like `parser` (botocore's JSONParser, with its settings) that walks each
    shape with code compiled once; `parser` itself on a botocore it does not know."""
    import botocore.parsers

    parsers: Any = botocore.parsers  # private parts, untyped in botocore's stubs
    if type(parser) is not botocore.parsers.JSONParser:
        return parser
    for private in ("_handle_json_body", "_parse_body_as_json", "_blob_parser", "_parse_shape"):
        if not hasattr(parser, private):
            return parser

    class CompiledJSONParser(parsers.JSONParser):  # type: ignore[misc]
        _decoders: dict[str, Decoder]
        _last_decoded: tuple[bytes, Any] | None = None

        def _parse_body_as_json(self, body_contents: Any) -> Any:
            """Decoded once per answer: the error code and the modeled fields read one body."""
            if not body_contents:
                return super()._parse_body_as_json(body_contents)
            last = self._last_decoded
            if last is not None and last[0] is body_contents:
                return last[1]
            decoded = super()._parse_body_as_json(body_contents)
            self._last_decoded = (body_contents, decoded)
            return decoded

        def _handle_json_body(self, raw_body: Any, shape: Any) -> Any:
            parsed_json = self._parse_body_as_json(raw_body)
            decode = self._decoders.get(shape.name)
            if decode is None:
                decode = self._decoders[shape.name] = _compile(self, shape, {}) or _same
            try:
                return decode(parsed_json)
            except Exception:
                pass  # botocore's own walk answers, or raises its own error, not ours
            return self._parse_shape(shape, parsed_json)

        def forget(self) -> None:
            """Lets go of the last answer's body."""
            self._last_decoded = None

    compiled = CompiledJSONParser.__new__(CompiledJSONParser)
    compiled.__dict__.update(parser.__dict__)
    compiled._decoders = {}
    return compiled


def _same(value: Any) -> Any:
    return value


def _compile(parser: Any, shape: Any, memo: dict[str, list[Decoder | None]]) -> Decoder | None:
    """A decoder for `shape` that returns what `parser._parse_shape` returns, or None where
    the value comes back as it came in."""
    import botocore.parsers

    parsers: Any = botocore.parsers
    base = parsers.BaseJSONParser
    kind = shape.type_name
    handler = getattr(parser, f"_handle_{kind}", parser._default_handle)
    function = getattr(handler, "__func__", None)
    if function is parsers.ResponseParser._default_handle:
        return None
    if function is base._handle_blob:
        blob: Decoder = parser._blob_parser
        return blob
    if function is parsers.ResponseParser._handle_list:
        return _list_decoder(_compile(parser, shape.member, memo))
    if function is base._handle_map:
        return _map_decoder(_compile(parser, shape.key, memo), _compile(parser, shape.value, memo))
    if function is base._handle_structure and not shape.is_document_type:
        return _structure_decoder(parser, shape, memo)
    return lambda value: handler(shape, value)  # timestamps and the like: botocore's own


def _list_decoder(member: Decoder | None) -> Decoder:
    def decode(value: Any) -> list[Any]:
        if None in value:
            raise _UnusualAnswerError("a null in a list")
        if member is None:
            return list(value)
        return [member(item) for item in value]

    return decode


def _map_decoder(key: Decoder | None, inner: Decoder | None) -> Decoder:
    if key is None and inner is None:
        return lambda value: dict(value.items())
    if key is None:
        assert inner is not None
        return lambda value: {k: inner(item) for k, item in value.items()}
    keyed = key
    return lambda value: {
        keyed(k): item if inner is None else inner(item) for k, item in value.items()
    }


def _structure_decoder(parser: Any, shape: Any, memo: dict[str, list[Decoder | None]]) -> Decoder:
    cell = memo.get(shape.name)
    if cell is not None:  # a recursive shape (AttributeValue's M and L): decoded once built
        built = cell
        return lambda value: built[0](value)  # type: ignore[misc]  # noqa: PLW0108
    cell = memo[shape.name] = [None]
    members = [
        (name, member.serialization.get("name", name)) for name, member in shape.members.items()
    ]
    decoders = [
        (name, json_name, _compile(parser, shape.members[name], memo))
        for name, json_name in members
    ]
    if getattr(shape, "is_tagged_union", False):
        by_json_name = {json_name: (name, decode) for name, json_name, decode in decoders}

        def union(value: Any) -> dict[str, Any]:
            # One member set, known, not null: else botocore decides (an error, or its
            # marker for a member newer than this botocore).
            if len(value) != 1:
                raise _UnusualAnswerError("a union without exactly one member")
            ((json_name, item),) = value.items()
            name, decode = by_json_name[json_name]
            if item is None:
                raise _UnusualAnswerError("a null union member")
            return {name: item if decode is None else decode(item)}

        cell[0] = union
        return union

    one_member = {json_name: (name, decode) for name, json_name, decode in decoders}
    if len(one_member) < len(decoders):
        one_member = {}  # two members on one JSON name: the walk below gives both

    def structure(value: Any) -> dict[str, Any]:
        if value is None:
            raise _UnusualAnswerError("a null structure")
        if len(value) == 1 and one_member:
            # One key (every AttributeValue): look it up, rather than every member up in it.
            ((json_name, item),) = value.items()
            known = one_member.get(json_name)
            if known is None or item is None:
                return {}
            name, decode = known
            return {name: item if decode is None else decode(item)}
        get = value.get
        parsed = {}
        for name, json_name, decode in decoders:
            item = get(json_name)
            if item is not None:
                parsed[name] = item if decode is None else decode(item)
        return parsed

    cell[0] = structure
    return structure
