"""Public lists of values that a column's meaning fixes: countries, US states, months, weekdays.

A schema draft proposes one of these as a discovery candidate list (``{"discover": true,
"candidates": [...]}``, engine/discovery/categories.py ``discover_from_candidates``) when a
text column's NAME says what it holds (engine/schema_draft/meanings.py); nothing here is read
from any table. The lists are public facts: a candidate list costs only ρ (no δ), every
candidate is measured, and rare values survive; values outside the list become ``other``.

Countries come from the ``iso3166`` package (ISO 3166-1 alpha-2 and alpha-3 codes and English
names; MIT licence), a runtime dependency rather than a copy, so the list follows the standard's
updates. ``US_STATES`` are the 57 ISO 3166-2:US subdivision codes and the states' and
territories' English names (public facts), written out here. The rest is written by hand:
``COUNTRY_ALIASES`` (English short names in wide use besides ISO 3166's: Bolivia, Iran, Russia,
South Korea …), ``USPS_EXTRA`` (the USPS codes that are not ISO 3166-2:US subdivisions: the
freely associated states and the armed forces), month and weekday names.
"""

from __future__ import annotations

import iso3166

US_STATES = (
    ("AK", "Alaska"),
    ("AL", "Alabama"),
    ("AR", "Arkansas"),
    ("AS", "American Samoa"),
    ("AZ", "Arizona"),
    ("CA", "California"),
    ("CO", "Colorado"),
    ("CT", "Connecticut"),
    ("DC", "District of Columbia"),
    ("DE", "Delaware"),
    ("FL", "Florida"),
    ("GA", "Georgia"),
    ("GU", "Guam"),
    ("HI", "Hawaii"),
    ("IA", "Iowa"),
    ("ID", "Idaho"),
    ("IL", "Illinois"),
    ("IN", "Indiana"),
    ("KS", "Kansas"),
    ("KY", "Kentucky"),
    ("LA", "Louisiana"),
    ("MA", "Massachusetts"),
    ("MD", "Maryland"),
    ("ME", "Maine"),
    ("MI", "Michigan"),
    ("MN", "Minnesota"),
    ("MO", "Missouri"),
    ("MP", "Northern Mariana Islands"),
    ("MS", "Mississippi"),
    ("MT", "Montana"),
    ("NC", "North Carolina"),
    ("ND", "North Dakota"),
    ("NE", "Nebraska"),
    ("NH", "New Hampshire"),
    ("NJ", "New Jersey"),
    ("NM", "New Mexico"),
    ("NV", "Nevada"),
    ("NY", "New York"),
    ("OH", "Ohio"),
    ("OK", "Oklahoma"),
    ("OR", "Oregon"),
    ("PA", "Pennsylvania"),
    ("PR", "Puerto Rico"),
    ("RI", "Rhode Island"),
    ("SC", "South Carolina"),
    ("SD", "South Dakota"),
    ("TN", "Tennessee"),
    ("TX", "Texas"),
    ("UM", "United States Minor Outlying Islands"),
    ("UT", "Utah"),
    ("VA", "Virginia"),
    ("VI", "Virgin Islands, U.S."),
    ("VT", "Vermont"),
    ("WA", "Washington"),
    ("WI", "Wisconsin"),
    ("WV", "West Virginia"),
    ("WY", "Wyoming"),
)

# English names in wide use that are not among ISO 3166's names for the country (alpha-2 code,
# names); Kosovo has no ISO code: XK and XKX are the codes the EU and others assign.
COUNTRY_ALIASES = (
    ("BN", ("Brunei",)),
    ("BO", ("Bolivia",)),
    ("CD", ("Democratic Republic of the Congo", "DR Congo", "Congo, Democratic Republic of the")),
    ("CI", ("Ivory Coast", "Cote d'Ivoire")),
    ("CV", ("Cape Verde",)),
    ("CZ", ("Czech Republic",)),
    ("FM", ("Micronesia",)),
    ("GB", ("UK", "Great Britain", "United Kingdom")),
    ("IR", ("Iran",)),
    ("KP", ("North Korea",)),
    ("KR", ("South Korea", "Korea")),
    ("LA", ("Laos",)),
    ("MD", ("Moldova",)),
    ("MK", ("Macedonia", "North Macedonia")),
    ("MM", ("Burma",)),
    ("MO", ("Macau", "Macao")),
    ("PS", ("Palestine",)),
    ("RU", ("Russia",)),
    ("SY", ("Syria",)),
    ("SZ", ("Swaziland", "Eswatini")),
    ("TR", ("Turkey", "Türkiye")),
    ("TW", ("Taiwan",)),
    ("TZ", ("Tanzania",)),
    ("US", ("United States", "USA", "U.S.", "U.S.A.")),
    ("VA", ("Vatican City", "Holy See")),
    ("VE", ("Venezuela",)),
    ("VN", ("Vietnam", "Viet Nam")),
    ("XK", ("XKX", "Kosovo")),
)

# USPS two-letter codes that ISO 3166-2:US does not list.
USPS_EXTRA = (
    ("FM", "Federated States of Micronesia"),
    ("MH", "Marshall Islands"),
    ("PW", "Palau"),
    ("AA", "Armed Forces Americas"),
    ("AE", "Armed Forces Europe"),
    ("AP", "Armed Forces Pacific"),
)
US_STATE_ALIASES = (("VI", "U.S. Virgin Islands"),)

MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
# Abbreviations in wide use besides the first three letters.
MONTH_ABBREVIATIONS = ("Sept",)
WEEKDAY_ABBREVIATIONS = ("Tues", "Thur", "Thurs")


def _cased(words: tuple[str, ...]) -> tuple[str, ...]:
    """Each word as written, in lower case and in upper case (first spelling first)."""
    out = [*words, *(w.lower() for w in words), *(w.upper() for w in words)]
    return tuple(dict.fromkeys(out))


def _countries() -> list[tuple[str, str, tuple[str, ...]]]:
    """ISO 3166-1 from the ``iso3166`` package: alpha-2, alpha-3, English names."""
    out = []
    for country in sorted(iso3166.countries, key=lambda c: c.alpha2):
        names = tuple(dict.fromkeys((country.name, country.apolitical_name)))
        out.append((country.alpha2, country.alpha3, names))
    return out


def country_candidates() -> tuple[str, ...]:
    """ISO 3166-1 alpha-2 and alpha-3 codes, then English names (ISO's, then aliases)."""
    countries = _countries()
    alpha2 = [a2 for a2, _, _ in countries]
    alpha3 = [a3 for _, a3, _ in countries]
    names = [name for _, _, spelled in countries for name in spelled]
    aliases = [name for _, spelled in COUNTRY_ALIASES for name in spelled]
    return tuple(dict.fromkeys([*alpha2, *alpha3, "XK", *names, *aliases]))


def country_count() -> int:
    """How many countries the list names (ISO 3166-1 and Kosovo)."""
    return len(_countries()) + 1


def us_state_candidates() -> tuple[str, ...]:
    """USPS codes (states, DC, territories, freely associated states, armed forces), then their
    names as written and in upper case."""
    pairs = [*US_STATES, *USPS_EXTRA]
    codes = [code for code, _ in pairs]
    names = [name for _, name in pairs] + [name for _, name in US_STATE_ALIASES]
    return tuple(dict.fromkeys([*codes, *names, *(name.upper() for name in names)]))


def us_state_count() -> int:
    return len(US_STATES) + len(USPS_EXTRA)


def month_candidates() -> tuple[str, ...]:
    """English month names and abbreviations (Jan ... Dec, Sept), each in three cases."""
    return _cased((*MONTHS, *(m[:3] for m in MONTHS), *MONTH_ABBREVIATIONS))


def weekday_candidates() -> tuple[str, ...]:
    """English weekday names and abbreviations (Mon ... Sun, Tues, Thur, Thurs), three cases."""
    return _cased((*WEEKDAYS, *(d[:3] for d in WEEKDAYS), *WEEKDAY_ABBREVIATIONS))
