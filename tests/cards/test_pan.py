"""Masked PANs: what an enrolled card must show, and when two masked PANs agree."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kuitti import pan

CARD = pan.parse_enrolled("415301******1234")


class TestParseEnrolled:
    def test_normalised(self) -> None:
        assert pan.parse_enrolled("4153 01XX-xx## 1234").text == "415301******1234"

    @pytest.mark.parametrize("value", ["4153011234561234", "4153 0112 3456 1234", "415301123456"])
    def test_full_numbers_are_refused_without_echo(self, value: str) -> None:
        with pytest.raises(pan.PanError) as caught:
            pan.parse_enrolled(value)
        assert "full card number" in str(caught.value)
        assert value.replace(" ", "")[:10] not in str(caught.value)

    @pytest.mark.parametrize("value", ["415301**1234", "415301***********1234", "41530******1234"])
    def test_length_and_shape(self, value: str) -> None:
        with pytest.raises(pan.PanError):
            pan.parse_enrolled(value)


class TestAgree:
    @pytest.mark.parametrize(
        ("shown", "expected"),
        [
            ("************1234", True),
            ("XXXX1234", True),
            ("1234", True),
            ("415301******1234", True),
            ("4153************", True),  # shows no last four; agreement alone is not a match
            ("415302******1234", False),
            ("************1235", False),
            ("5***********1234", False),
        ],
    )
    def test_every_digit_both_show(self, shown: str, expected: bool) -> None:
        parsed = pan.parse_shown(shown)
        assert parsed is not None
        assert pan.agree(CARD, parsed) is expected

    @given(st.text(alphabet="0123456789", min_size=4, max_size=4))
    def test_last_four_decides_when_only_they_are_shown(self, last4: str) -> None:
        parsed = pan.parse_shown("************" + last4)
        assert parsed is not None
        assert pan.agree(CARD, parsed) is (last4 == "1234")

    def test_a_full_number_is_never_read_as_shown(self) -> None:
        assert pan.parse_shown("4153011234561234") is None
