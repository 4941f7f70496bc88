"""Public lists of values that a column's meaning fixes: countries, US states, months, weekdays.

A schema draft proposes one of these as a discovery candidate list (``{"discover": true,
"candidates": [...]}``, engine/discovery/categories.py ``discover_from_candidates``) when a
text column's NAME says what it holds (engine/schema_draft/meanings.py); nothing here is read
from any table. The lists are public facts: a candidate list costs only ρ (no δ), every
candidate is measured, and rare values survive; values outside the list become ``other``.

``COUNTRIES`` and ``US_STATES`` are ISO 3166-1 and ISO 3166-2:US as shipped by the ``pycountry``
package, version 26.2.16 (data from Debian's iso-codes; pycountry is LGPL-2.1, the codes and
names themselves are ISO 3166 facts), copied here so that the service needs no new dependency.
They were generated in a throw-away virtualenv with ``pip install pycountry==26.2.16`` by::

    for c in sorted(pycountry.countries, key=lambda c: c.alpha_2):
        names = [c.name] + [n for n in (getattr(c, "common_name", None),
                                        getattr(c, "official_name", None)) if n and n != c.name]
        print((c.alpha_2, c.alpha_3, tuple(dict.fromkeys(names))))
    for s in sorted(pycountry.subdivisions.get(country_code="US"), key=lambda s: s.code):
        print((s.code.removeprefix("US-"), s.name))

The rest is written by hand: ``COUNTRY_ALIASES`` (English names in wide use that ISO 3166 no
longer or never used), ``USPS_EXTRA`` (the USPS codes that are not ISO 3166-2:US subdivisions:
the freely associated states and the armed forces), month and weekday names.
"""

from __future__ import annotations

COUNTRIES = (
    ("AD", "AND", ("Andorra", "Principality of Andorra")),
    ("AE", "ARE", ("United Arab Emirates",)),
    ("AF", "AFG", ("Afghanistan", "Islamic Republic of Afghanistan")),
    ("AG", "ATG", ("Antigua and Barbuda",)),
    ("AI", "AIA", ("Anguilla",)),
    ("AL", "ALB", ("Albania", "Republic of Albania")),
    ("AM", "ARM", ("Armenia", "Republic of Armenia")),
    ("AO", "AGO", ("Angola", "Republic of Angola")),
    ("AQ", "ATA", ("Antarctica",)),
    ("AR", "ARG", ("Argentina", "Argentine Republic")),
    ("AS", "ASM", ("American Samoa",)),
    ("AT", "AUT", ("Austria", "Republic of Austria")),
    ("AU", "AUS", ("Australia",)),
    ("AW", "ABW", ("Aruba",)),
    ("AX", "ALA", ("Åland Islands",)),
    ("AZ", "AZE", ("Azerbaijan", "Republic of Azerbaijan")),
    ("BA", "BIH", ("Bosnia and Herzegovina", "Republic of Bosnia and Herzegovina")),
    ("BB", "BRB", ("Barbados",)),
    ("BD", "BGD", ("Bangladesh", "People's Republic of Bangladesh")),
    ("BE", "BEL", ("Belgium", "Kingdom of Belgium")),
    ("BF", "BFA", ("Burkina Faso",)),
    ("BG", "BGR", ("Bulgaria", "Republic of Bulgaria")),
    ("BH", "BHR", ("Bahrain", "Kingdom of Bahrain")),
    ("BI", "BDI", ("Burundi", "Republic of Burundi")),
    ("BJ", "BEN", ("Benin", "Republic of Benin")),
    ("BL", "BLM", ("Saint Barthélemy",)),
    ("BM", "BMU", ("Bermuda",)),
    ("BN", "BRN", ("Brunei Darussalam",)),
    ("BO", "BOL", ("Bolivia, Plurinational State of", "Bolivia", "Plurinational State of Bolivia")),
    ("BQ", "BES", ("Bonaire, Sint Eustatius and Saba",)),
    ("BR", "BRA", ("Brazil", "Federative Republic of Brazil")),
    ("BS", "BHS", ("Bahamas", "Commonwealth of the Bahamas")),
    ("BT", "BTN", ("Bhutan", "Kingdom of Bhutan")),
    ("BV", "BVT", ("Bouvet Island",)),
    ("BW", "BWA", ("Botswana", "Republic of Botswana")),
    ("BY", "BLR", ("Belarus", "Republic of Belarus")),
    ("BZ", "BLZ", ("Belize",)),
    ("CA", "CAN", ("Canada",)),
    ("CC", "CCK", ("Cocos (Keeling) Islands",)),
    ("CD", "COD", ("Congo, The Democratic Republic of the",)),
    ("CF", "CAF", ("Central African Republic",)),
    ("CG", "COG", ("Congo", "Republic of the Congo")),
    ("CH", "CHE", ("Switzerland", "Swiss Confederation")),
    ("CI", "CIV", ("Côte d'Ivoire", "Republic of Côte d'Ivoire")),
    ("CK", "COK", ("Cook Islands",)),
    ("CL", "CHL", ("Chile", "Republic of Chile")),
    ("CM", "CMR", ("Cameroon", "Republic of Cameroon")),
    ("CN", "CHN", ("China", "People's Republic of China")),
    ("CO", "COL", ("Colombia", "Republic of Colombia")),
    ("CR", "CRI", ("Costa Rica", "Republic of Costa Rica")),
    ("CU", "CUB", ("Cuba", "Republic of Cuba")),
    ("CV", "CPV", ("Cabo Verde", "Republic of Cabo Verde")),
    ("CW", "CUW", ("Curaçao",)),
    ("CX", "CXR", ("Christmas Island",)),
    ("CY", "CYP", ("Cyprus", "Republic of Cyprus")),
    ("CZ", "CZE", ("Czechia", "Czech Republic")),
    ("DE", "DEU", ("Germany", "Federal Republic of Germany")),
    ("DJ", "DJI", ("Djibouti", "Republic of Djibouti")),
    ("DK", "DNK", ("Denmark", "Kingdom of Denmark")),
    ("DM", "DMA", ("Dominica", "Commonwealth of Dominica")),
    ("DO", "DOM", ("Dominican Republic",)),
    ("DZ", "DZA", ("Algeria", "People's Democratic Republic of Algeria")),
    ("EC", "ECU", ("Ecuador", "Republic of Ecuador")),
    ("EE", "EST", ("Estonia", "Republic of Estonia")),
    ("EG", "EGY", ("Egypt", "Arab Republic of Egypt")),
    ("EH", "ESH", ("Western Sahara",)),
    ("ER", "ERI", ("Eritrea", "the State of Eritrea")),
    ("ES", "ESP", ("Spain", "Kingdom of Spain")),
    ("ET", "ETH", ("Ethiopia", "Federal Democratic Republic of Ethiopia")),
    ("FI", "FIN", ("Finland", "Republic of Finland")),
    ("FJ", "FJI", ("Fiji", "Republic of Fiji")),
    ("FK", "FLK", ("Falkland Islands (Malvinas)",)),
    ("FM", "FSM", ("Micronesia, Federated States of", "Federated States of Micronesia")),
    ("FO", "FRO", ("Faroe Islands",)),
    ("FR", "FRA", ("France", "French Republic")),
    ("GA", "GAB", ("Gabon", "Gabonese Republic")),
    ("GB", "GBR", ("United Kingdom", "United Kingdom of Great Britain and Northern Ireland")),
    ("GD", "GRD", ("Grenada",)),
    ("GE", "GEO", ("Georgia",)),
    ("GF", "GUF", ("French Guiana",)),
    ("GG", "GGY", ("Guernsey",)),
    ("GH", "GHA", ("Ghana", "Republic of Ghana")),
    ("GI", "GIB", ("Gibraltar",)),
    ("GL", "GRL", ("Greenland",)),
    ("GM", "GMB", ("Gambia", "Republic of the Gambia")),
    ("GN", "GIN", ("Guinea", "Republic of Guinea")),
    ("GP", "GLP", ("Guadeloupe",)),
    ("GQ", "GNQ", ("Equatorial Guinea", "Republic of Equatorial Guinea")),
    ("GR", "GRC", ("Greece", "Hellenic Republic")),
    ("GS", "SGS", ("South Georgia and the South Sandwich Islands",)),
    ("GT", "GTM", ("Guatemala", "Republic of Guatemala")),
    ("GU", "GUM", ("Guam",)),
    ("GW", "GNB", ("Guinea-Bissau", "Republic of Guinea-Bissau")),
    ("GY", "GUY", ("Guyana", "Republic of Guyana")),
    ("HK", "HKG", ("Hong Kong", "Hong Kong Special Administrative Region of China")),
    ("HM", "HMD", ("Heard Island and McDonald Islands",)),
    ("HN", "HND", ("Honduras", "Republic of Honduras")),
    ("HR", "HRV", ("Croatia", "Republic of Croatia")),
    ("HT", "HTI", ("Haiti", "Republic of Haiti")),
    ("HU", "HUN", ("Hungary",)),
    ("ID", "IDN", ("Indonesia", "Republic of Indonesia")),
    ("IE", "IRL", ("Ireland",)),
    ("IL", "ISR", ("Israel", "State of Israel")),
    ("IM", "IMN", ("Isle of Man",)),
    ("IN", "IND", ("India", "Republic of India")),
    ("IO", "IOT", ("British Indian Ocean Territory",)),
    ("IQ", "IRQ", ("Iraq", "Republic of Iraq")),
    ("IR", "IRN", ("Iran, Islamic Republic of", "Iran", "Islamic Republic of Iran")),
    ("IS", "ISL", ("Iceland", "Republic of Iceland")),
    ("IT", "ITA", ("Italy", "Italian Republic")),
    ("JE", "JEY", ("Jersey",)),
    ("JM", "JAM", ("Jamaica",)),
    ("JO", "JOR", ("Jordan", "Hashemite Kingdom of Jordan")),
    ("JP", "JPN", ("Japan",)),
    ("KE", "KEN", ("Kenya", "Republic of Kenya")),
    ("KG", "KGZ", ("Kyrgyzstan", "Kyrgyz Republic")),
    ("KH", "KHM", ("Cambodia", "Kingdom of Cambodia")),
    ("KI", "KIR", ("Kiribati", "Republic of Kiribati")),
    ("KM", "COM", ("Comoros", "Union of the Comoros")),
    ("KN", "KNA", ("Saint Kitts and Nevis",)),
    (
        "KP",
        "PRK",
        (
            "Korea, Democratic People's Republic of",
            "North Korea",
            "Democratic People's Republic of Korea",
        ),
    ),
    ("KR", "KOR", ("Korea, Republic of", "South Korea")),
    ("KW", "KWT", ("Kuwait", "State of Kuwait")),
    ("KY", "CYM", ("Cayman Islands",)),
    ("KZ", "KAZ", ("Kazakhstan", "Republic of Kazakhstan")),
    ("LA", "LAO", ("Lao People's Democratic Republic", "Laos")),
    ("LB", "LBN", ("Lebanon", "Lebanese Republic")),
    ("LC", "LCA", ("Saint Lucia",)),
    ("LI", "LIE", ("Liechtenstein", "Principality of Liechtenstein")),
    ("LK", "LKA", ("Sri Lanka", "Democratic Socialist Republic of Sri Lanka")),
    ("LR", "LBR", ("Liberia", "Republic of Liberia")),
    ("LS", "LSO", ("Lesotho", "Kingdom of Lesotho")),
    ("LT", "LTU", ("Lithuania", "Republic of Lithuania")),
    ("LU", "LUX", ("Luxembourg", "Grand Duchy of Luxembourg")),
    ("LV", "LVA", ("Latvia", "Republic of Latvia")),
    ("LY", "LBY", ("Libya",)),
    ("MA", "MAR", ("Morocco", "Kingdom of Morocco")),
    ("MC", "MCO", ("Monaco", "Principality of Monaco")),
    ("MD", "MDA", ("Moldova, Republic of", "Moldova", "Republic of Moldova")),
    ("ME", "MNE", ("Montenegro",)),
    ("MF", "MAF", ("Saint Martin (French part)",)),
    ("MG", "MDG", ("Madagascar", "Republic of Madagascar")),
    ("MH", "MHL", ("Marshall Islands", "Republic of the Marshall Islands")),
    ("MK", "MKD", ("North Macedonia", "Republic of North Macedonia")),
    ("ML", "MLI", ("Mali", "Republic of Mali")),
    ("MM", "MMR", ("Myanmar", "Republic of Myanmar")),
    ("MN", "MNG", ("Mongolia",)),
    ("MO", "MAC", ("Macao", "Macao Special Administrative Region of China")),
    ("MP", "MNP", ("Northern Mariana Islands", "Commonwealth of the Northern Mariana Islands")),
    ("MQ", "MTQ", ("Martinique",)),
    ("MR", "MRT", ("Mauritania", "Islamic Republic of Mauritania")),
    ("MS", "MSR", ("Montserrat",)),
    ("MT", "MLT", ("Malta", "Republic of Malta")),
    ("MU", "MUS", ("Mauritius", "Republic of Mauritius")),
    ("MV", "MDV", ("Maldives", "Republic of Maldives")),
    ("MW", "MWI", ("Malawi", "Republic of Malawi")),
    ("MX", "MEX", ("Mexico", "United Mexican States")),
    ("MY", "MYS", ("Malaysia",)),
    ("MZ", "MOZ", ("Mozambique", "Republic of Mozambique")),
    ("NA", "NAM", ("Namibia", "Republic of Namibia")),
    ("NC", "NCL", ("New Caledonia",)),
    ("NE", "NER", ("Niger", "Republic of the Niger")),
    ("NF", "NFK", ("Norfolk Island",)),
    ("NG", "NGA", ("Nigeria", "Federal Republic of Nigeria")),
    ("NI", "NIC", ("Nicaragua", "Republic of Nicaragua")),
    ("NL", "NLD", ("Netherlands", "Kingdom of the Netherlands")),
    ("NO", "NOR", ("Norway", "Kingdom of Norway")),
    ("NP", "NPL", ("Nepal", "Federal Democratic Republic of Nepal")),
    ("NR", "NRU", ("Nauru", "Republic of Nauru")),
    ("NU", "NIU", ("Niue",)),
    ("NZ", "NZL", ("New Zealand",)),
    ("OM", "OMN", ("Oman", "Sultanate of Oman")),
    ("PA", "PAN", ("Panama", "Republic of Panama")),
    ("PE", "PER", ("Peru", "Republic of Peru")),
    ("PF", "PYF", ("French Polynesia",)),
    ("PG", "PNG", ("Papua New Guinea", "Independent State of Papua New Guinea")),
    ("PH", "PHL", ("Philippines", "Republic of the Philippines")),
    ("PK", "PAK", ("Pakistan", "Islamic Republic of Pakistan")),
    ("PL", "POL", ("Poland", "Republic of Poland")),
    ("PM", "SPM", ("Saint Pierre and Miquelon",)),
    ("PN", "PCN", ("Pitcairn",)),
    ("PR", "PRI", ("Puerto Rico",)),
    ("PS", "PSE", ("Palestine, State of", "the State of Palestine")),
    ("PT", "PRT", ("Portugal", "Portuguese Republic")),
    ("PW", "PLW", ("Palau", "Republic of Palau")),
    ("PY", "PRY", ("Paraguay", "Republic of Paraguay")),
    ("QA", "QAT", ("Qatar", "State of Qatar")),
    ("RE", "REU", ("Réunion",)),
    ("RO", "ROU", ("Romania",)),
    ("RS", "SRB", ("Serbia", "Republic of Serbia")),
    ("RU", "RUS", ("Russian Federation",)),
    ("RW", "RWA", ("Rwanda", "Rwandese Republic")),
    ("SA", "SAU", ("Saudi Arabia", "Kingdom of Saudi Arabia")),
    ("SB", "SLB", ("Solomon Islands",)),
    ("SC", "SYC", ("Seychelles", "Republic of Seychelles")),
    ("SD", "SDN", ("Sudan", "Republic of the Sudan")),
    ("SE", "SWE", ("Sweden", "Kingdom of Sweden")),
    ("SG", "SGP", ("Singapore", "Republic of Singapore")),
    ("SH", "SHN", ("Saint Helena, Ascension and Tristan da Cunha",)),
    ("SI", "SVN", ("Slovenia", "Republic of Slovenia")),
    ("SJ", "SJM", ("Svalbard and Jan Mayen",)),
    ("SK", "SVK", ("Slovakia", "Slovak Republic")),
    ("SL", "SLE", ("Sierra Leone", "Republic of Sierra Leone")),
    ("SM", "SMR", ("San Marino", "Republic of San Marino")),
    ("SN", "SEN", ("Senegal", "Republic of Senegal")),
    ("SO", "SOM", ("Somalia", "Federal Republic of Somalia")),
    ("SR", "SUR", ("Suriname", "Republic of Suriname")),
    ("SS", "SSD", ("South Sudan", "Republic of South Sudan")),
    ("ST", "STP", ("Sao Tome and Principe", "Democratic Republic of Sao Tome and Principe")),
    ("SV", "SLV", ("El Salvador", "Republic of El Salvador")),
    ("SX", "SXM", ("Sint Maarten (Dutch part)",)),
    ("SY", "SYR", ("Syrian Arab Republic", "Syria")),
    ("SZ", "SWZ", ("Eswatini", "Kingdom of Eswatini")),
    ("TC", "TCA", ("Turks and Caicos Islands",)),
    ("TD", "TCD", ("Chad", "Republic of Chad")),
    ("TF", "ATF", ("French Southern Territories",)),
    ("TG", "TGO", ("Togo", "Togolese Republic")),
    ("TH", "THA", ("Thailand", "Kingdom of Thailand")),
    ("TJ", "TJK", ("Tajikistan", "Republic of Tajikistan")),
    ("TK", "TKL", ("Tokelau",)),
    ("TL", "TLS", ("Timor-Leste", "Democratic Republic of Timor-Leste")),
    ("TM", "TKM", ("Turkmenistan",)),
    ("TN", "TUN", ("Tunisia", "Republic of Tunisia")),
    ("TO", "TON", ("Tonga", "Kingdom of Tonga")),
    ("TR", "TUR", ("Türkiye", "Republic of Türkiye")),
    ("TT", "TTO", ("Trinidad and Tobago", "Republic of Trinidad and Tobago")),
    ("TV", "TUV", ("Tuvalu",)),
    ("TW", "TWN", ("Taiwan, Province of China", "Taiwan")),
    ("TZ", "TZA", ("Tanzania, United Republic of", "Tanzania", "United Republic of Tanzania")),
    ("UA", "UKR", ("Ukraine",)),
    ("UG", "UGA", ("Uganda", "Republic of Uganda")),
    ("UM", "UMI", ("United States Minor Outlying Islands",)),
    ("US", "USA", ("United States", "United States of America")),
    ("UY", "URY", ("Uruguay", "Eastern Republic of Uruguay")),
    ("UZ", "UZB", ("Uzbekistan", "Republic of Uzbekistan")),
    ("VA", "VAT", ("Holy See (Vatican City State)",)),
    ("VC", "VCT", ("Saint Vincent and the Grenadines",)),
    (
        "VE",
        "VEN",
        ("Venezuela, Bolivarian Republic of", "Venezuela", "Bolivarian Republic of Venezuela"),
    ),
    ("VG", "VGB", ("Virgin Islands, British", "British Virgin Islands")),
    ("VI", "VIR", ("Virgin Islands, U.S.", "Virgin Islands of the United States")),
    ("VN", "VNM", ("Viet Nam", "Vietnam", "Socialist Republic of Viet Nam")),
    ("VU", "VUT", ("Vanuatu", "Republic of Vanuatu")),
    ("WF", "WLF", ("Wallis and Futuna",)),
    ("WS", "WSM", ("Samoa", "Independent State of Samoa")),
    ("YE", "YEM", ("Yemen", "Republic of Yemen")),
    ("YT", "MYT", ("Mayotte",)),
    ("ZA", "ZAF", ("South Africa", "Republic of South Africa")),
    ("ZM", "ZMB", ("Zambia", "Republic of Zambia")),
    ("ZW", "ZWE", ("Zimbabwe", "Republic of Zimbabwe")),
)
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
    ("CD", ("Democratic Republic of the Congo", "DR Congo")),
    ("CI", ("Ivory Coast",)),
    ("CV", ("Cape Verde",)),
    ("GB", ("UK", "Great Britain")),
    ("MK", ("Macedonia",)),
    ("MM", ("Burma",)),
    ("MO", ("Macau",)),
    ("PS", ("Palestine",)),
    ("RU", ("Russia",)),
    ("SZ", ("Swaziland",)),
    ("TR", ("Turkey",)),
    ("VA", ("Vatican City",)),
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


def country_candidates() -> tuple[str, ...]:
    """ISO 3166-1 alpha-2 and alpha-3 codes, then English names (ISO's, then aliases)."""
    alpha2 = [a2 for a2, _, _ in COUNTRIES]
    alpha3 = [a3 for _, a3, _ in COUNTRIES]
    names = [name for _, _, spelled in COUNTRIES for name in spelled]
    aliases = [name for _, spelled in COUNTRY_ALIASES for name in spelled]
    return tuple(dict.fromkeys([*alpha2, *alpha3, "XK", *names, *aliases]))


def country_count() -> int:
    """How many countries the list names (ISO 3166-1 and Kosovo)."""
    return len(COUNTRIES) + 1


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
