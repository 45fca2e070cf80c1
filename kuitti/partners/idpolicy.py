"""A namespace's receipt identifier policy (docs/delivery.md, "Identifier policies").

A namespace link's identifier is the merchant's choice; when a merchant's identifiers count up
(``till-1-0001``, ``till-1-0002``), anyone can read its receipts by guessing. The operator may
give a namespace a policy that refuses such identifiers at post time: at least ``min-length``
characters, all from a named alphabet. A policy cannot tell a random identifier from one that
only looks random; it makes the merchant's developers choose identifiers long enough to be drawn
at random, which is what makes them unguessable (22 ``base64url`` characters hold 132 bits).

Written ``min-length=22,alphabet=base64url`` (either part may be left out), or ``none``.
"""

from __future__ import annotations

import string

from kuitti.models import IdPolicy

# Name → (the characters, how the error message spells them).
ALPHABETS: dict[str, tuple[frozenset[str], str]] = {
    "digits": (frozenset(string.digits), "0-9"),
    "hex": (frozenset(string.hexdigits), "0-9, a-f, A-F"),
    "base32": (frozenset(string.ascii_uppercase + "234567"), "A-Z, 2-7 (RFC 4648)"),
    "alnum": (frozenset(string.ascii_letters + string.digits), "A-Z, a-z, 0-9"),
    "base64url": (
        frozenset(string.ascii_letters + string.digits + "-_"),
        "A-Z, a-z, 0-9, - and _ (RFC 4648)",
    ),
}
# A receipt identifier has at most 200 characters (``kuitti.receipts.validation``).
MAX_MIN_LENGTH = 200


def parse_policy(namespace: str, text: str) -> IdPolicy | None:
    """The policy ``text`` spells for ``namespace`` (None for ``none``); ``ValueError`` says
    what is wrong with it."""
    if text.strip().lower() == "none":
        return None
    min_length, alphabet = 0, None
    for part in text.split(","):
        key, sep, value = part.strip().partition("=")
        if key == "min-length" and sep and value.isascii() and value.isdigit():
            min_length = int(value)
            if not 1 <= min_length <= MAX_MIN_LENGTH:
                raise ValueError(f"min-length must be between 1 and {MAX_MIN_LENGTH}")
        elif key == "alphabet" and sep and value in ALPHABETS:
            alphabet = value
        else:
            names = ", ".join(ALPHABETS)
            raise ValueError(
                f"{part.strip()!r}: write min-length=N and/or alphabet=A (A one of {names}), "
                "separated by a comma, or none"
            )
    return IdPolicy(namespace, min_length, alphabet)


def policy_text(policy: IdPolicy) -> str:
    """The policy as ``parse_policy`` reads it."""
    parts = [f"min-length={policy.min_length}"] if policy.min_length else []
    if policy.alphabet is not None:
        parts.append(f"alphabet={policy.alphabet}")
    return ",".join(parts)


def identifier_problem(policy: IdPolicy, identifier: str) -> str | None:
    """What is wrong with ``identifier`` under ``policy``, or None when it complies."""
    wanted = [f"at least {policy.min_length} characters"] if policy.min_length else []
    if policy.alphabet is not None:
        wanted.append(f"only the characters {ALPHABETS[policy.alphabet][1]}")
    too_short = len(identifier) < policy.min_length
    allowed = ALPHABETS[policy.alphabet][0] if policy.alphabet is not None else None
    if too_short or (allowed is not None and not allowed.issuperset(identifier)):
        return (
            f"namespace {policy.namespace!r} takes receipt identifiers of "
            f"{' and '.join(wanted)} (drawn at random, so they cannot be guessed)."
        )
    return None
