"""What every kernel family's config dataclass shares: `VariantFields` and the name grammar.

A family's config is the one description of a kernel variant: the code generator renders it, its fingerprint keys
the build cache, its fields become CSV columns, and the tuned tables map shapes to its `name`. The name is derived
from the fields by a `NameGrammar` declared once per family, which both prints names and parses them back.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from typing import ClassVar


class Word:
    """A field written as one of a few tags: `Word("schedule", {"cooperative": "coop", "pingpong": "pp"})`, or
    `Word("mode", ["tf32", "halfhalf"])` where each value is its own tag."""

    def __init__(self, field: str, tags):
        self.fields = (field,)
        self.tags = dict(tags) if isinstance(tags, dict) else {value: value for value in tags}
        self.values = {tag: value for value, tag in self.tags.items()}

    def regex(self) -> str:
        alternatives = sorted(self.values, key=len, reverse=True)  # longest first: `tf32tf32` before `tf32`
        return f"(?P<{self.fields[0]}>{'|'.join(re.escape(tag) for tag in alternatives)})"

    def format(self, config) -> str:
        return self.tags[getattr(config, self.fields[0])]

    def parse(self, match) -> dict:
        return {self.fields[0]: self.values[match[self.fields[0]]]}


class Number(Word):
    """A positive integer field written in decimal."""

    def __init__(self, field: str):
        self.fields = (field,)

    def regex(self) -> str:
        return f"(?P<{self.fields[0]}>\\d+)"

    def format(self, config) -> str:
        return str(getattr(config, self.fields[0]))

    def parse(self, match) -> dict:
        return {self.fields[0]: int(match[self.fields[0]])}


class Extent(Number):
    """A tuple of positive integers written `128x128x32`."""

    def __init__(self, field: str, rank: int):
        self.fields, self.rank = (field,), rank

    def regex(self) -> str:
        digits = "x".join([r"\d+"] * self.rank)
        return f"(?P<{self.fields[0]}>{digits})"

    def format(self, config) -> str:
        return "x".join(str(v) for v in getattr(config, self.fields[0]))

    def parse(self, match) -> dict:
        return {self.fields[0]: tuple(int(v) for v in match[self.fields[0]].split("x"))}


class Optional:
    """Parts written only where their fields differ from `default` (`Optional("_w", Number("swizzle"),
    default={"swizzle": 1})`); a name without them parses to the default."""

    def __init__(self, *parts, default: dict):
        self.parts, self.default = [_part(p) for p in parts], default
        self.fields = tuple(f for p in self.parts for f in p.fields)

    def regex(self) -> str:
        return f"(?:{''.join(p.regex() for p in self.parts)})?"

    def format(self, config) -> str:
        if all(getattr(config, field) == value for field, value in self.default.items()):
            return ""
        return "".join(p.format(config) for p in self.parts)

    def parse(self, match) -> dict:
        if all(match[field] is None for field in self.fields):
            return dict(self.default)
        return {key: value for p in self.parts for key, value in p.parse(match).items()}


class _Text:
    fields = ()

    def __init__(self, text: str):
        self.text = text

    def regex(self) -> str:
        return re.escape(self.text)

    def format(self, config) -> str:
        return self.text

    def parse(self, match) -> dict:
        return {}


def _part(part):
    return _Text(part) if isinstance(part, str) else part


class NameGrammar:
    """A family's variant names, declared once as a sequence of parts (plain strings are literal text); it prints a
    config's name, and parses a name back into the fields it encodes (fields it does not encode keep their
    dataclass defaults)."""

    def __init__(self, *parts):
        self.parts = [_part(p) for p in parts]
        self.pattern = re.compile("".join(p.regex() for p in self.parts))

    def format(self, config) -> str:
        return "".join(p.format(config) for p in self.parts)

    def matches(self, name: str) -> bool:
        return self.pattern.fullmatch(name) is not None

    def parse(self, name: str) -> dict | None:
        match = self.pattern.fullmatch(name)
        if match is None:
            return None
        return {key: value for p in self.parts for key, value in p.parse(match).items()}


class VariantFields:
    """What every kernel family's config dataclass shares: its fields as a dict, a stable hash of them, the checks
    of its tile-shaped fields, and (for a family that declares its `NAME` grammar) its name and parser."""

    NAME: ClassVar[NameGrammar | None] = None  # the family's name grammar
    EXAMPLE_NAME: ClassVar[str] = ""  # a valid name, quoted by the parser's error
    KIND: ClassVar[str] = "a kernel"  # how the parser's error names the family's variants

    def _check_extents(self, **fields: str) -> None:
        """Each field a tuple of positive integers, one per letter of its axes (`tile="mnk"`)."""
        for field, axes in fields.items():
            value = getattr(self, field)
            if len(value) != len(axes) or not all(isinstance(v, int) and v > 0 for v in value):
                count = {2: "two", 3: "three"}[len(axes)]
                raise ValueError(f"{field}={value!r} must be {count} positive integers ({', '.join(axes)})")

    def _named(self, name: str):
        """This config, if `name` is its canonical name (names travel through op arguments and CSV tables)."""
        if self.name != name:
            raise ValueError(f"{name!r} is not in canonical form; did you mean {self.name!r}?")
        return self

    @property
    def name(self) -> str:
        return type(self).NAME.format(self)

    @classmethod
    def from_name(cls, name: str):
        """The config whose derived `name` this is (names travel through op arguments and CSV tables)."""
        fields = cls.NAME.parse(name)
        if fields is None:
            raise ValueError(f"{name!r} is not {cls.KIND} variant name such as {cls.EXAMPLE_NAME!r}")
        return cls(**fields)._named(name)

    @classmethod
    def is_name(cls, name: str) -> bool:
        return cls.NAME.matches(name)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def fingerprint(self) -> str:
        """Stable hash of every field (not of Python's per-process `hash`)."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()
