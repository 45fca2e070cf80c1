"""The receipt view model and the label catalogue (shared with the receipt link page)."""

from __future__ import annotations

import json

import pytest

from kuitti.i18n import Language, negotiate_locale, translate
from kuitti.receipts.formats.codes import Symbology
from kuitti.receipts.formats.ocmf import VerificationResult
from kuitti.receipts.schema import Receipt
from kuitti.receipts.view import build_view, mask_pan
from tests.factories import card_payment, product_row, receipt_doc
from tests.receipts.formats.support import minimal_doc, ocmf_key, rich_doc


class TestBuildView:
    def test_every_part_in_finnish(self) -> None:
        view = build_view(Receipt.model_validate(rich_doc(ocmf_key())), locale="fi")
        assert view.kind_label == "Kuitti"
        assert view.time == "15.1.2026 14.03.00"
        assert view.merchant.address_lines == ("Urho Kekkosen katu 1", "00100 Helsinki", "FI")
        coffee = view.rows[0]
        assert coffee.quantity_with_unit == "2 kpl"
        assert coffee.unit_price == "5,99\xa0€"
        assert coffee.total == "11,98\xa0€"
        assert coffee.tags == ("leimakortti",)
        assert coffee.custom_attributes == (("Paahtoaste", "3"),)
        discount = view.rows[1].discounts[0]
        assert discount.amount in ("-4,00\xa0€", "−4,00\xa0€")
        assert view.rows[1].discounts[0].percentage == "20,1\xa0%"
        journey = view.rows[2].journey
        assert journey is not None
        assert journey.route == "Rautatieasema → Lentoasema T2"
        assert journey.origin.time == "15.1.2026 13.30"
        assert journey.distance == "18,3 km"
        assert journey.duration == "27 min"
        assert journey.co2 == "2,2 kg"
        assert view.rows[3].vat_rates == "25,5\xa0% / 14\xa0%"
        assert view.rows[4].quantity_with_unit == "12,345 kWh"
        assert [p.type for p in view.payments] == ["CARD", "CASH"]
        assert view.payments[0].masked_pan == "415301******1234"
        assert ("Takaisin", "5,00\xa0€") in view.payments[1].details
        assert [a.symbology for a in view.attachments] == [
            Symbology.QR,
            Symbology.EAN13,
            Symbology.EAN8,
            Symbology.CODE128,
        ]
        assert view.attachments[0].valid_until == "28.2.2026 23.59.59"
        [check] = view.verifications
        assert check.result is VerificationResult.VALID
        assert check.result_label == "Allekirjoitus kelvollinen"
        assert check.energy == "12,345 kWh"

    def test_minimal_document(self) -> None:
        view = build_view(Receipt.model_validate(minimal_doc()))
        assert view.merchant.branch_name is None
        assert view.payments == ()
        assert view.attachments == ()
        assert view.totals.incl_vat == "€5.99"

    def test_stored_json_text_is_accepted(self) -> None:

        view = build_view(json.dumps(receipt_doc()), locale="sv")
        assert view.kind_label == "Kvitto"

    def test_time_stays_in_the_receipts_offset(self) -> None:
        doc = receipt_doc(receiptTimeStamp="2026-06-01T23:30:00-05:00")
        assert build_view(Receipt.model_validate(doc), locale="fi").time == "1.6.2026 23.30.00"

    def test_currency_with_no_decimals(self) -> None:
        doc = receipt_doc([product_row(unit_price=1500)], currencyISOCode="JPY")
        doc["payments"] = [card_payment(1500, currencyISOCode="JPY")]
        view = build_view(Receipt.model_validate(doc), locale="en")
        assert view.totals.incl_vat == "¥1,500"

    def test_card_number_is_never_shown_in_full(self) -> None:
        assert mask_pan("4153011234567890*") == "415301******7890*"
        assert mask_pan("415301******1234") == "415301******1234"


class TestLabels:
    def test_translate_with_fallbacks(self) -> None:
        assert translate("total", "fi") == "Yhteensä"
        assert translate("total", "sv-FI") == "Totalt"
        assert translate("total", "de") == "Total"
        assert translate("no.such.key", "fi") == "no.such.key"

    @pytest.mark.parametrize(
        ("header", "expected"),
        [
            (None, Language.EN),
            ("fi-FI,fi;q=0.9,en;q=0.8", Language.FI),
            ("de-DE,sv;q=0.7,fi;q=0.5", Language.SV),
            ("en-GB, fi;q=0.9", Language.EN),
            ("fi;q=0, sv", Language.SV),
            ("de, fr", Language.EN),
            ("fi;q=abc, sv;q=0.1", Language.SV),
        ],
    )
    def test_negotiate(self, header: str | None, expected: Language) -> None:
        assert negotiate_locale(header) is expected
