"""What a column's NAME says it holds: public windows for numbers, public candidate lists for text,
and identifier names.

A schema draft must not take a bound or a category list from the data (docs/privacy.md, "What
a schema draft reads from the data"). A column's name is public (it is in the schema), so a
window or a list chosen from the name alone publishes nothing about the rows: the same name
gets the same proposal whatever the values are. The tables here are documented in
docs/discovery.md, "Public windows by meaning".

Names are split into lower-case tokens: at every character that is not a letter or a digit
(``snake_case``, ``kebab-case``, spaces, dots, parentheses), at camelCase humps (``dayOfWeek``,
``userID``, ``IDNum``), and between letters and digits; ``%`` reads as the token ``percent``.
A meaning is matched conservatively, since a window that misses a column's values clamps them:

* the name ends with one of the meaning's token sequences (``birth_year``, ``hour_of_day``), the
  token before it is not a linking word (``minute_of_day`` is not a day, ``visits_per_hour`` not
  an hour) and no token before it names another meaning (``year_month`` may be 201803); the
  longest matching sequence wins (``day_of_week`` is a weekday, not a day);
* or, for the meanings marked ``prefix``, the name starts with it (``year_built``,
  ``age_at_admission``, ``pct_female``) and no other token names a time unit or a meaning;
* and no token is a unit in the plural or a transformation that changes the scale
  (``age_months``, ``years``, ``pct_change``, ``hour_offset``, ``log_age``): those get the
  generic window.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine.schema_draft import public_lists

# Tokens that change a quantity's unit or scale: a name with one of them gets no window by
# meaning (plural units are durations or counts, not positions in a calendar).
SCALE_TOKENS = frozenset(
    {
        *("ms", "msec", "millis", "milliseconds", "ns", "secs", "seconds", "mins", "minutes"),
        *("hrs", "hours", "days", "weeks", "months", "yrs", "years", "decades", "centuries"),
        *("change", "chg", "diff", "difference", "delta", "growth", "increase", "decrease"),
        *("gain", "loss", "return", "returns", "ratio", "rate", "per", "log", "ln", "sq"),
        *("squared", "sqrt", "z", "zscore", "std", "sd", "stdev", "se", "var", "variance"),
        *("err", "error", "sum", "total", "count", "cnt", "num", "number", "nbr", "since"),
        *("until", "ago", "elapsed", "duration", "lag", "offset", "tz", "utc", "diff"),
        *("scaled", "norm", "normalized", "normalised", "standardized", "standardised"),
        *("rank", "index", "idx", "id", "code", "time", "timestamp", "epoch", "to"),
    }
)
# A token just before a matched tail that makes the tail a unit of something else.
LINK_TOKENS = frozenset({"of", "per", "by", "each", "every", "a", "an", "in", "since"})


_DEGREES = frozenset({"deg", "degree", "degrees", "dd"})


@dataclass(frozen=True)
class Window:
    """A public window for the numbers a name means: ``[low, high]``, both included."""

    meaning: str
    low: int
    high: int
    tails: tuple[tuple[str, ...], ...]  # token sequences a name may end with
    integer_only: bool = False  # only for columns whose values are all integers
    prefix: bool = False  # also when the name starts with the meaning's single-token tail
    needs_latitude: tuple[str, ...] = ()  # tails valid only beside a latitude column
    units: frozenset[str] = frozenset()  # the meaning's own unit: may end the name (age_years)

    def __post_init__(self) -> None:
        if self.high <= self.low or not self.tails:
            raise ValueError(f"window {self.meaning!r}: empty")

    def describe(self) -> str:
        return f"[{self.low}, {self.high}]"


WINDOWS: tuple[Window, ...] = (
    Window("latitude", -90, 90, (("latitude",), ("lat",)), prefix=True, units=_DEGREES),
    Window(
        "longitude",
        -180,
        180,
        (("longitude",), ("lon",), ("lng",), ("long",)),
        prefix=True,
        needs_latitude=("long",),
        units=_DEGREES,
    ),
    Window("year", 1800, 2100, (("year",),), integer_only=True, prefix=True),
    Window("age", 0, 130, (("age",),), prefix=True, units=frozenset({"years", "yrs", "y"})),
    Window(
        "percent",
        0,
        100,
        (("percent",), ("pct",), ("percentage",)),
        prefix=True,
    ),
    Window("month", 1, 12, (("month",), ("month", "of", "year")), integer_only=True),
    Window("quarter", 1, 4, (("quarter",), ("quarter", "of", "year")), integer_only=True),
    Window("day of the month", 1, 31, (("day",), ("day", "of", "month")), integer_only=True),
    Window("day of the year", 1, 366, (("day", "of", "year"), ("doy",)), integer_only=True),
    Window(
        "weekday",
        0,
        7,
        (("weekday",), ("day", "of", "week"), ("dow",), ("wday",), ("week", "day")),
        integer_only=True,
    ),
    Window("hour", 0, 23, (("hour",), ("hour", "of", "day")), integer_only=True),
    Window("minute", 0, 59, (("minute",), ("minute", "of", "hour")), integer_only=True),
    Window("second", 0, 59, (("second",), ("second", "of", "minute")), integer_only=True),
)
"""The windows by meaning (docs/discovery.md, "Public windows by meaning")."""

_MEANING_TOKENS = frozenset(t for w in WINDOWS for tail in w.tails for t in tail) - LINK_TOKENS


@dataclass(frozen=True)
class CandidateList:
    """A public list of the values a text column's name says it holds."""

    meaning: str
    candidates: tuple[str, ...]
    entities: int  # how many things the list names (the most categories kept)
    source: str


def tokens(name: str) -> tuple[str, ...]:
    """The lower-case tokens of a column name (see the module docstring)."""
    out: list[str] = []
    chunk: list[str] = []

    def flush() -> None:
        if chunk:
            out.extend(_split_humps("".join(chunk)))
            chunk.clear()

    for char in name:
        if char == "%":
            flush()
            out.append("percent")
        elif char.isalnum():
            chunk.append(char)
        else:
            flush()
    flush()
    return tuple(token.lower() for token in out)


def _split_humps(chunk: str) -> list[str]:
    """``dayOfWeek`` → day, Of, Week; ``IDNum`` → ID, Num; ``lat2`` → lat, 2."""
    parts: list[str] = []
    current = ""
    for i, char in enumerate(chunk):
        if current:
            prev = current[-1]
            following = chunk[i + 1] if i + 1 < len(chunk) else ""
            if (
                prev.isdigit() != char.isdigit()
                or (prev.islower() and char.isupper())
                or (prev.isupper() and char.isupper() and following.islower())
            ):
                parts.append(current)
                current = ""
        current += char
    if current:
        parts.append(current)
    return parts


def _ends_with(words: tuple[str, ...], tail: tuple[str, ...]) -> bool:
    if len(words) < len(tail) or words[len(words) - len(tail) :] != tail:
        return False
    before = len(words) - len(tail) - 1
    return before < 0 or words[before] not in LINK_TOKENS


def window_for(name: str, *, integer: bool, names: Sequence[str] = ()) -> Window | None:
    """The public window a numeric column's name means, if any (``names``: every column's name,
    for "long" beside a latitude column). Reads the names only."""
    every = tokens(name)
    scale = SCALE_TOKENS.intersection(every)
    fitting = [w for w in WINDOWS if not scale - w.units and (integer or not w.integer_only)]
    best: tuple[int, Window] | None = None
    for window in fitting:
        words = _without_unit(every, window.units)
        for tail in window.tails:
            # year_month (201803) or lat_long are not a month or a longitude.
            if not _ends_with(words, tail) or _MEANING_TOKENS.intersection(words[: -len(tail)]):
                continue
            if tail[0] in window.needs_latitude and not _has_latitude(name, names):
                continue
            if best is None or len(tail) > best[0]:
                best = (len(tail), window)
    if best is not None:
        return best[1]
    for window in fitting:
        words = _without_unit(every, window.units)
        if window.prefix and len(words) > 1:
            heads = {tail[0] for tail in window.tails if len(tail) == 1}
            heads -= set(window.needs_latitude)
            if words[0] in heads and not _MEANING_TOKENS.intersection(words[1:]):
                return window
    return None


def _without_unit(words: tuple[str, ...], units: frozenset[str]) -> tuple[str, ...]:
    """``age_in_years`` → age: the meaning's own unit (and an "in" before it) at the end."""
    if not units or not words or words[-1] not in units:
        return words
    words = words[:-1]
    return words[:-1] if words and words[-1] == "in" else words


def _has_latitude(name: str, names: Sequence[str]) -> bool:
    latitude = WINDOWS[0]
    return any(
        other != name and any(_ends_with(tokens(other), t) for t in latitude.tails)
        for other in names
    )


# Text columns: every token of the name must come from the meaning's vocabulary, and one of them
# must be its key word ("state", "country"): "order_state" or "native_country" get no list.
_STATE_WORDS = frozenset(
    {
        *("state", "us", "usa", "code", "abbr", "abbrev", "abbreviation", "name", "usps"),
        *("postal", "addr", "address", "home", "residence", "birth", "mailing", "billing"),
        *("shipping", "of"),
    }
)
_COUNTRY_WORDS = frozenset(
    {
        *("country", "ctry", "cntry", "code", "iso", "iso2", "iso3", "alpha", "alpha2"),
        *("alpha3", "2", "3", "name", "of", "birth", "residence", "origin", "destination"),
        *("dest", "home", "citizenship"),
    }
)
_MONTH_TAILS = (("month",), ("month", "name"), ("month", "of", "year"))
_WEEKDAY_TAILS = (
    ("weekday",),
    ("day", "name"),
    ("day", "of", "week"),
    ("dow",),
    ("weekday", "name"),
    ("week", "day"),
    ("wday",),
)


def candidates_for(name: str) -> CandidateList | None:
    """The public candidate list a text column's name means, if any. Reads the name only."""
    words = tokens(name)
    if not words or SCALE_TOKENS.intersection(words) - {"code"}:
        return None
    if "state" in words and set(words) <= _STATE_WORDS:
        return CandidateList(
            "US states",
            public_lists.us_state_candidates(),
            public_lists.us_state_count(),
            "USPS codes and names (ISO 3166-2:US and the other USPS codes)",
        )
    if {"country", "ctry", "cntry"} & set(words) and set(words) <= _COUNTRY_WORDS:
        return CandidateList(
            "countries",
            public_lists.country_candidates(),
            public_lists.country_count(),
            "ISO 3166-1 alpha-2 and alpha-3 codes and English names (the iso3166 package)",
        )
    if any(_ends_with(words, tail) for tail in _MONTH_TAILS):
        return CandidateList(
            "months", public_lists.month_candidates(), 12, "English month names and abbreviations"
        )
    if words == ("day",) or any(_ends_with(words, tail) for tail in _WEEKDAY_TAILS):
        return CandidateList(
            "weekdays",
            public_lists.weekday_candidates(),
            7,
            "English weekday names and abbreviations",
        )
    return None


_IDENTIFIER_TOKENS = frozenset({"id", "ids", "uuid", "guid", "identifier", "idx", "key", "pk"})
_ROW_NUMBER_NAMES = frozenset(
    {("index",), ("unnamed",), ("rownames",), ("row",), ("row", "number"), ("row", "num")}
)


def names_identifier(name: str) -> bool:
    """Whether a name marks an identifier (``id``, ``user_id``, ``userId``, ``uuid``, ``idNum``,
    a pandas or R row-name column such as ``Unnamed: 0`` or ``rownames``). Reads the name only."""
    words = tokens(name)
    if not words:
        return True  # an empty header cell: the row names pandas and R write
    if _IDENTIFIER_TOKENS.intersection(words):
        return True
    trimmed = tuple(w for w in words if not w.isdigit())
    return trimmed in _ROW_NUMBER_NAMES


__all__ = [
    "WINDOWS",
    "CandidateList",
    "Window",
    "candidates_for",
    "names_identifier",
    "tokens",
    "window_for",
]
