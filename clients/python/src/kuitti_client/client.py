"""``Client`` (blocking) and ``AsyncClient`` (asyncio): the same calls over httpx.

A client speaks as one identity: a partner with its API key (a merchant posting receipts, any
partner reading what it may see), or an app acting for one user (``access_token=``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Literal, Self, overload

import httpx

from kuitti_client import calls
from kuitti_client.calls import Call, RetryPolicy
from kuitti_client.models import (
    Card,
    CardEnrolment,
    CardRemoved,
    CardTransaction,
    CardTransactionRecorded,
    DataFormat,
    QrCode,
    ReceiptCreated,
    ReceiptDocument,
    ReceiptList,
    ReceiptSummary,
    Revoked,
    Token,
)

BinaryFormat = Literal["service_pdf", "finvoice_xml", "finvoice_pdf"]


class Client:
    """The kuitti API, blocking. ``base_url`` is the service's ``KUITTI_PUBLIC_URL``."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        access_token: str | None = None,
        retry: RetryPolicy = RetryPolicy(),  # noqa: B008 (frozen, so one shared default is safe)
        timeout: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url,
            headers=calls.identity_headers(api_key, access_token),
            timeout=timeout,
        )
        self._retry = retry
        self._sleep = sleep

    def _send(self, call: Call) -> httpx.Response:
        retry = self._retry if call.retry else calls.NO_RETRIES
        attempt = 1
        while True:
            try:
                response = self._http.request(
                    call.method, call.path, params=call.params, json=call.json, headers=call.headers
                )
            except httpx.TransportError:
                wait = retry.delay(attempt, None)
                if wait is None:
                    raise
            else:
                wait = retry.delay(attempt, response)
                if wait is None:
                    return calls.checked(response)
            self._sleep(wait)
            attempt += 1

    def post_receipt(
        self,
        receipt: ReceiptDocument,
        tokens: Sequence[Token | Mapping[str, Any]] | None = None,
        idempotency_key: str | None = None,
    ) -> ReceiptCreated:
        """Create a receipt (merchant role). Retries send the same ``Idempotency-Key``, so a
        receipt is stored once however many attempts it takes."""
        response = self._send(calls.post_receipt(receipt, tokens, idempotency_key))
        return ReceiptCreated.model_validate_json(response.content)

    @overload
    def get_receipt(
        self,
        receipt_id: str,
        data_format: Literal["service_json"] = ...,
        *,
        layout: str | None = ...,
        lang: str | None = ...,
    ) -> ReceiptDocument: ...
    @overload
    def get_receipt(
        self,
        receipt_id: str,
        data_format: BinaryFormat,
        *,
        layout: str | None = ...,
        lang: str | None = ...,
    ) -> bytes: ...
    def get_receipt(
        self,
        receipt_id: str,
        data_format: DataFormat = "service_json",
        *,
        layout: str | None = None,
        lang: str | None = None,
    ) -> ReceiptDocument | bytes:
        """The document as posted (``service_json``, a dict), or the PDF or Finvoice bytes."""
        response = self._send(calls.get_receipt(receipt_id, data_format, layout, lang))
        return _content(response, data_format)

    def list_page(
        self,
        *,
        since: datetime | str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> ReceiptList:
        response = self._send(calls.list_page(since, limit, cursor))
        return ReceiptList.model_validate_json(response.content)

    def list_receipts(
        self, *, since: datetime | str | None = None, limit: int | None = None
    ) -> Iterator[ReceiptSummary]:
        """Every receipt the caller may see, newest first, page after page."""
        cursor: str | None = None
        while True:
            page = self.list_page(since=since, limit=limit, cursor=cursor)
            yield from page.receipts
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def create_qr_code(self) -> QrCode:
        """A short-lived ``DYNAMIC_QR_CODE`` value for the user (an app with a user token)."""
        response = self._send(Call("POST", "/api/v1/qr-codes/", retry=False))
        return QrCode.model_validate_json(response.content)

    def revoke(self) -> Revoked:
        """End the user's connection and every token of it (an app with a user token)."""
        response = self._send(Call("DELETE", "/api/oauth/revoke", retry=False))
        return Revoked.model_validate_json(response.content)

    def enroll_card(self, card: CardEnrolment | Mapping[str, Any]) -> Card:
        """Enrol a card (card issuer role). A client made with the holder's ``access_token``
        (a connection to this issuer) links the card to that user."""
        response = self._send(calls.enroll_card(card))
        return Card.model_validate_json(response.content)

    def delete_card(self, service_card_id: str) -> CardRemoved:
        """Remove a card of this issuer: it never matches a receipt again."""
        response = self._send(calls.delete_card(service_card_id))
        return CardRemoved.model_validate_json(response.content)

    def report_card_transaction(
        self, transaction: CardTransaction | Mapping[str, Any]
    ) -> CardTransactionRecorded:
        """Report a payment of an enrolled card (``auth`` or ``clearing``): the receipt of that
        purchase is linked to the card's owner when it comes, or already was."""
        response = self._send(calls.card_transaction(transaction))
        return CardTransactionRecorded.model_validate_json(response.content)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class AsyncClient:
    """The kuitti API for asyncio: the same calls as ``Client``, awaited."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        access_token: str | None = None,
        retry: RetryPolicy = RetryPolicy(),  # noqa: B008 (frozen, so one shared default is safe)
        timeout: float = 30.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._http = httpx.AsyncClient(
            base_url=base_url,
            headers=calls.identity_headers(api_key, access_token),
            timeout=timeout,
        )
        self._retry = retry
        self._sleep = sleep

    async def _send(self, call: Call) -> httpx.Response:
        retry = self._retry if call.retry else calls.NO_RETRIES
        attempt = 1
        while True:
            try:
                response = await self._http.request(
                    call.method, call.path, params=call.params, json=call.json, headers=call.headers
                )
            except httpx.TransportError:
                wait = retry.delay(attempt, None)
                if wait is None:
                    raise
            else:
                wait = retry.delay(attempt, response)
                if wait is None:
                    return calls.checked(response)
            await self._sleep(wait)
            attempt += 1

    async def post_receipt(
        self,
        receipt: ReceiptDocument,
        tokens: Sequence[Token | Mapping[str, Any]] | None = None,
        idempotency_key: str | None = None,
    ) -> ReceiptCreated:
        """See ``Client.post_receipt``."""
        response = await self._send(calls.post_receipt(receipt, tokens, idempotency_key))
        return ReceiptCreated.model_validate_json(response.content)

    @overload
    async def get_receipt(
        self,
        receipt_id: str,
        data_format: Literal["service_json"] = ...,
        *,
        layout: str | None = ...,
        lang: str | None = ...,
    ) -> ReceiptDocument: ...
    @overload
    async def get_receipt(
        self,
        receipt_id: str,
        data_format: BinaryFormat,
        *,
        layout: str | None = ...,
        lang: str | None = ...,
    ) -> bytes: ...
    async def get_receipt(
        self,
        receipt_id: str,
        data_format: DataFormat = "service_json",
        *,
        layout: str | None = None,
        lang: str | None = None,
    ) -> ReceiptDocument | bytes:
        """See ``Client.get_receipt``."""
        response = await self._send(calls.get_receipt(receipt_id, data_format, layout, lang))
        return _content(response, data_format)

    async def list_page(
        self,
        *,
        since: datetime | str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> ReceiptList:
        response = await self._send(calls.list_page(since, limit, cursor))
        return ReceiptList.model_validate_json(response.content)

    async def list_receipts(
        self, *, since: datetime | str | None = None, limit: int | None = None
    ) -> AsyncIterator[ReceiptSummary]:
        """See ``Client.list_receipts``."""
        cursor: str | None = None
        while True:
            page = await self.list_page(since=since, limit=limit, cursor=cursor)
            for summary in page.receipts:
                yield summary
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def create_qr_code(self) -> QrCode:
        response = await self._send(Call("POST", "/api/v1/qr-codes/", retry=False))
        return QrCode.model_validate_json(response.content)

    async def revoke(self) -> Revoked:
        response = await self._send(Call("DELETE", "/api/oauth/revoke", retry=False))
        return Revoked.model_validate_json(response.content)

    async def enroll_card(self, card: CardEnrolment | Mapping[str, Any]) -> Card:
        """Enrol a card (card issuer role). A client made with the holder's ``access_token``
        (a connection to this issuer) links the card to that user."""
        response = await self._send(calls.enroll_card(card))
        return Card.model_validate_json(response.content)

    async def delete_card(self, service_card_id: str) -> CardRemoved:
        """Remove a card of this issuer: it never matches a receipt again."""
        response = await self._send(calls.delete_card(service_card_id))
        return CardRemoved.model_validate_json(response.content)

    async def report_card_transaction(
        self, transaction: CardTransaction | Mapping[str, Any]
    ) -> CardTransactionRecorded:
        """Report a payment of an enrolled card (``auth`` or ``clearing``): the receipt of that
        purchase is linked to the card's owner when it comes, or already was."""
        response = await self._send(calls.card_transaction(transaction))
        return CardTransactionRecorded.model_validate_json(response.content)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()


def _content(response: httpx.Response, data_format: DataFormat) -> ReceiptDocument | bytes:
    if data_format == "service_json":
        document: ReceiptDocument = response.json()
        return document
    return response.content
