import math

import pytest

from dse.errors import InputError
from dse.units import fmt, parse


@pytest.mark.parametrize("text,kind,value", [
    ("80 GiB", "bytes", 80 * 2**30),
    ("80 GB", "bytes", 80e9),
    ("1.5 TB", "bytes", 1.5e12),
    ("512 KiB", "bytes", 512 * 1024),
    ("25 GB/s", "bytes/s", 25e9),
    ("800 Gb/s", "bytes/s", 100e9),
    ("100 Gbps", "bytes/s", 12.5e9),
    ("989 TFLOP/s", "flop/s", 989e12),
    ("312 TFLOPS", "flop/s", 312e12),
    ("5 us", "s", 5e-6),
    ("2 ms", "s", 2e-3),
    ("0.3 pJ/bit", "J/B", 2.4e-12),
    ("2 pJ/B", "J/B", 2e-12),
    ("0.5 pJ/FLOP", "J/flop", 0.5e-12),
    ("400 W", "W", 400.0),
    ("$2,400", "USD", 2400.0),
    ("2400 USD", "USD", 2400.0),
    ("80%", "fraction", 0.8),
    ("1.4 GHz", "Hz", 1.4e9),
    (42, "bytes", 42.0),
    ("1e9", "count", 1e9),
])
def test_parse_exact(text, kind, value):
    assert parse(text, kind) == pytest.approx(value, rel=1e-15)


def test_decimal_and_binary_prefixes_are_exact():
    assert parse("1 GB", "bytes") == 10**9
    assert parse("1 GiB", "bytes") == 2**30
    assert parse("1 TiB", "bytes") == 2**40


@pytest.mark.parametrize("text,kind,needle", [
    ("80 GX", "bytes", "unknown unit 'GX'"),
    ("eighty GB", "bytes", "cannot parse"),
    ("25 GB", "bytes/s", "unknown unit 'GB'"),
    (True, "bytes", "expected a bytes quantity"),
])
def test_parse_errors_name_the_place(text, kind, needle):
    with pytest.raises(InputError) as exc:
        parse(text, kind, "hwspecs/x.yaml: hbm_capacity")
    msg = str(exc.value)
    assert needle in msg and msg.startswith("hwspecs/x.yaml: hbm_capacity") and "\n" not in msg


@pytest.mark.parametrize("value,kind,text", [
    (80 * 2**30, "bytes", "80.0 GiB"),
    (2.5e10, "bytes/s", "25.0 GB/s"),
    (0.0123, "s", "12.3 ms"),
    (3.2e15, "flop/s", "3.20 PFLOP/s"),
    (0.486, "fraction", "48.6%"),
    (2400, "USD", "$2,400"),
    (float("nan"), "s", "n/a"),
    (math.inf, "bytes", "inf"),
])
def test_fmt(value, kind, text):
    assert fmt(value, kind) == text


def test_round_trip():
    for text, kind in [("80.0 GiB", "bytes"), ("25.0 GB/s", "bytes/s"), ("12.3 ms", "s")]:
        assert fmt(parse(text, kind), kind) == text
