"""Posting a receipt: the checks, the batching writer, returns and the token fan-out. It sits
above the domains it calls (cards, delivery, users, oauth) and below the HTTP layer."""
