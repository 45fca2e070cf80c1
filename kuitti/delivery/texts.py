"""Labels that only the receipt-link pages use (the shared receipt labels live in
``kuitti.i18n``). Same shape as the shared catalogue: key → (fi, sv, en)."""

from __future__ import annotations

from kuitti.i18n import Language, as_language, translate

_PAGE_MESSAGES: dict[str, tuple[str, str, str]] = {
    "page.title": ("Kuitti: {merchant}", "Kvitto: {merchant}", "Receipt: {merchant}"),
    "page.language": ("Kieli", "Språk", "Language"),
    "page.actions": ("Toiminnot", "Åtgärder", "Actions"),
    "page.import": ("Tuo tililleni", "Importera till mitt konto", "Import to my account"),
    "page.import_help": (
        "Kirjaudu sisään tai luo tili, niin kuitti tallentuu tilillesi ja yhdistettyihin "
        "sovelluksiisi.",
        "Logga in eller skapa ett konto så sparas kvittot på ditt konto och i dina anslutna appar.",
        "Log in or sign up and the receipt is saved to your account and your connected apps.",
    ),
    "page.logged_in_as": ("Kirjautuneena: {email}", "Inloggad som {email}", "Logged in as {email}"),
    "page.imported": (
        "Kuitti on nyt tililläsi.",
        "Kvittot finns nu på ditt konto.",
        "The receipt is now in your account.",
    ),
    "page.already_yours": (
        "Tämä kuitti on tililläsi.",
        "Det här kvittot finns på ditt konto.",
        "This receipt is in your account.",
    ),
    "page.open_account": ("Avaa tilini", "Öppna mitt konto", "Open my account"),
    "page.signed": (
        "Allekirjoittanut {issuer}, tarkistettu",
        "Signerat av {issuer}, kontrollerat",
        "Signed by {issuer}, verified",
    ),
    "page.check_signature": ("Tarkista itse", "Kontrollera själv", "Check it yourself"),
    "page.test": (
        "Testikuitti, ei oikea ostos. Sitä ei voi tuoda tilille.",
        "Testkvitto, inte ett riktigt köp. Det kan inte importeras till ett konto.",
        "A test receipt, not a real purchase. It cannot be imported into an account.",
    ),
    "page.print": ("Tulosta", "Skriv ut", "Print"),
    "page.issued_by": ("Myyjä", "Säljare", "Sold by"),
    "page.summary": ("Yhteenveto", "Sammanfattning", "Summary"),
    "page.free_text": ("Viesti", "Meddelande", "Message"),
    "page.show_more": ("Näytä kaikki rivit", "Visa alla rader", "Show all rows"),
    "page.rows_count": ("{count} riviä", "{count} rader", "{count} rows"),
    "page.powered_by": (
        "Sähköinen kuitti – kuitti",
        "Digitalt kvitto – kuitti",
        "Digital receipt – kuitti",
    ),
    "not_found.title": ("Kuittia ei löytynyt", "Kvittot hittades inte", "Receipt not found"),
    "not_found.body": (
        "Tällä osoitteella ei löydy kuittia. Tarkista linkki tai pyydä myyjältä uusi.",
        "Det finns inget kvitto på den här adressen. Kontrollera länken eller be säljaren om en "
        "ny.",
        "There is no receipt at this address. Check the link, or ask the seller for a new one.",
    ),
    "claimed.title": (
        "Kuitti on jo toisella tilillä",
        "Kvittot finns redan på ett annat konto",
        "This receipt is already in another account",
    ),
    "claimed.body": (
        "Tämän kuitin voi tuoda vain yhdelle tilille, ja se on jo tuotu. Jos kuitti on sinun, "
        "pyydä myyjältä apua.",
        "Det här kvittot kan importeras till ett enda konto, och det har redan importerats. Om "
        "kvittot är ditt, be säljaren om hjälp.",
        "This receipt can be imported into one account only, and it already has been. If the "
        "receipt is yours, ask the seller for help.",
    ),
    "rate_limited.title": ("Liian monta pyyntöä", "För många förfrågningar", "Too many requests"),
    "rate_limited.body": (
        "Yritä uudelleen hetken kuluttua.",
        "Försök igen om en stund.",
        "Please try again in a moment.",
    ),
}

_INDEX = {Language.FI: 0, Language.SV: 1, Language.EN: 2}


def page_text(key: str, locale: str, **values: str) -> str:
    """A page label in ``locale``; shared receipt labels come from ``kuitti.i18n``."""
    entry = _PAGE_MESSAGES.get(key)
    text = entry[_INDEX[as_language(locale)]] if entry else translate(key, locale)
    return text.format(**values) if values else text
