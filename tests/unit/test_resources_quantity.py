"""Kubernetes quantity strings, as they appear in pod resources, read to exact values."""

from decimal import ROUND_UP, Decimal

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from lightkube.utils.quantity import parse_quantity as lightkube_parse_quantity

from bridge.jobs.quantity import parse_quantity

SUFFIXES = {
    "": Decimal(1), "m": Decimal("0.001"), "k": Decimal(10**3), "M": Decimal(10**6),
    "G": Decimal(10**9), "T": Decimal(10**12), "P": Decimal(10**15), "E": Decimal(10**18),
    "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40),
    "Pi": Decimal(2**50), "Ei": Decimal(2**60),
}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", "0.5"), ("2", "2"), ("1.5", "1.5"), (".5", "0.5"), ("1.", "1"), ("+1", "1"),
        ("-1", "-1"), ("0", "0"), ("1Ki", "1024"), ("1.5Gi", "1610612736"), ("129M", "129000000"),
        ("1e3", "1000"), ("1E3", "1000"), ("1e-3", "0.001"), ("1E", "1000000000000000000"),
        ("100n", "0.0000001"), ("5u", "0.000005"),
    ],
)
def test_quantity_forms_kubernetes_accepts(text: str, value: str) -> None:
    assert parse_quantity(text) == Decimal(value)


@pytest.mark.parametrize(
    "text",
    ["", "abc", "Gi", "1 Gi", " 1", "1Zi", "1Y", "1KiB", "1gi", "1.2.3", "1e", "1e1.5", "--1",
     "\u0661", "1e99999", "1e30", "9223372036854775808", "1Ei0"],
)
def test_quantities_kubernetes_rejects_or_cannot_hold_are_errors(text: str) -> None:
    with pytest.raises(ValueError, match="quantity"):
        parse_quantity(text)


@given(st.integers(min_value=0, max_value=10**6), st.sampled_from(sorted(SUFFIXES)))
def test_whole_numbers_scale_exactly_by_their_suffix(number: int, suffix: str) -> None:
    assume(number * SUFFIXES[suffix] < 2**63)
    assert parse_quantity(f"{number}{suffix}") == number * SUFFIXES[suffix]


@given(
    st.decimals(min_value=0, max_value=10**6, places=4, allow_nan=False),
    st.sampled_from(sorted(SUFFIXES)),
)
def test_agrees_with_lightkube_where_both_accept(number: Decimal, suffix: str) -> None:
    """lightkube rounds up to thousandths; otherwise both read the same value."""
    assume(number * SUFFIXES[suffix] < 2**63)
    text = f"{number:f}{suffix}"
    ours = parse_quantity(text).quantize(Decimal("0.001"), rounding=ROUND_UP)
    assert ours == lightkube_parse_quantity(text)
