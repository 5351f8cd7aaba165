"""Load web pages: one fetch per URL bounded as a whole, text by content type, private addresses
(a whole-fetch deadline and a connection to the very address checked need ``http.client``)."""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import os
import socket
import ssl
import threading
import time
import warnings
import zlib
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import SplitResult, quote, urljoin, urlsplit

from langchain_core.documents import Document

from rag_fusion_chain.ingest.files import html_document, pdf_documents, text_document
from rag_fusion_chain.ingest.problems import (
    NoTextError,
    SkippedSourceWarning,
    SourceConnectionError,
    SourceProblem,
    SourceTimeoutError,
    UnreadableSourceError,
)
from rag_fusion_chain.validation import redact_credentials, validate_count

DEFAULT_TIMEOUT = 30.0
DEFAULT_MAX_BYTES = 10_000_000
DENY_PRIVATE_ENV = "RAG_FUSION_DENY_PRIVATE_URLS"
"""Set to ``1`` (or ``true``/``yes``/``on``) to refuse private addresses by default."""
MAX_REDIRECTS = 5
_REDIRECT_STATUSES = (301, 302, 303, 307, 308)
_HTML_TYPES = ("text/html", "application/xhtml+xml")
_TEXT_TYPES = ("application/json", "application/xml")
_TRUE = ("1", "true", "yes", "on")


def load_web(
    urls: Sequence[str],
    *,
    classes: Sequence[str] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    max_bytes: int = DEFAULT_MAX_BYTES,
    deny_private: bool | None = None,
) -> list[Document]:
    """Web pages (HTML main text or its ``classes``' text, plain text, PDF pages); TimeoutError,
    ConnectionError, or ValueError (refused). Pages without text are warned and skipped."""
    if isinstance(urls, str):
        raise TypeError("urls must be a list of URLs, not a single string")
    for url in urls:
        check_web_url(url)
    check_fetch_limits(timeout, max_bytes)
    documents: list[Document] = []
    for url in dict.fromkeys(urls):  # a URL given twice is fetched once
        try:
            documents.extend(load_url(url, timeout, max_bytes, deny_private, classes))
        except NoTextError as problem:
            shown = f" (classes={list(classes)})" if classes else ""
            warnings.warn(f"{problem}{shown}", SkippedSourceWarning, stacklevel=2)
    return documents


def load_url(
    url: str, timeout: float, max_bytes: int, deny: bool | None, classes: Sequence[str] | None
) -> list[Document]:
    """The documents of one checked URL by content type, named without ``user:password@``."""
    source = redact_credentials(url)
    media, charset, body = _fetch(url, timeout, max_bytes, deny)
    if media == "application/pdf":
        return pdf_documents(body, source)
    if media in _HTML_TYPES or (not media and b"\0" not in body[:1024]):
        return [html_document(body, source, encoding=charset, classes=classes)]
    if not (media.startswith("text/") or media in _TEXT_TYPES or media.endswith(("+json", "+xml"))):
        raise UnreadableSourceError(source, f"content type {media or 'unknown'} is not text")
    return [text_document(body, source, charset)]


def check_web_url(url: str) -> None:
    """ValueError unless ``url`` is an http(s) URL with a host (and a valid port)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"only http(s) URLs can be loaded, got {redact_credentials(url)!r}")
    try:
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError as error:
        raise ValueError(f"invalid port in URL {redact_credentials(url)!r}") from error


def check_fetch_limits(timeout: float, max_bytes: int) -> None:
    """ValueError/TypeError naming ``timeout`` or ``max_bytes`` when they are not positive."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    validate_count("max_bytes", max_bytes)


def is_public_address(address: str) -> bool:
    """Whether an IP address is globally routable (IPv4-mapped and NAT64 IPv6 judged as IPv4)."""
    ip: Any = ipaddress.ip_address(address)
    if ip.packed[:12] in (bytes.fromhex("00" * 10 + "ffff"), bytes.fromhex("0064ff9b" + "00" * 8)):
        ip = ipaddress.IPv4Address(ip.packed[12:])
    return bool(ip.is_global and not ip.is_multicast)


def _fetch(
    url: str, timeout: float, max_bytes: int, deny_private: bool | None
) -> tuple[str, str | None, bytes]:
    """The media type (``""`` if none), declared charset and body of ``url``, redirects
    followed, within ``timeout`` seconds in all: the fetch runs in a thread of its own (an address
    lookup cannot be interrupted), whose sockets are shut down at the deadline."""
    if deny_private is None:
        deny_private = os.environ.get(DENY_PRIVATE_ENV, "").strip().lower() in _TRUE
    deadline = time.monotonic() + timeout
    outcome: list[Any] = []
    duplicates: list[socket.socket] = []  # of the connected sockets: they survive TLS wrapping
    lock, late = threading.Lock(), threading.Event()

    def watch(connected: socket.socket) -> None:
        """Keep ``connected`` to shut down at the deadline, closed at once if it has passed."""
        with lock:
            if not late.is_set():
                duplicates.append(connected.dup())
                return
        connected.close()
        raise TimeoutError("the deadline passed while connecting")

    def fetch() -> None:
        try:
            outcome.append(_follow_redirects(url, max_bytes, deny_private, deadline, watch))
        except BaseException as error:  # raised in the caller's thread
            outcome.append(error)

    worker = threading.Thread(target=fetch, name="rag-fusion-fetch", daemon=True)
    worker.start()
    worker.join(timeout)
    with lock:
        late.set()
        timed_out = not outcome  # decided before the shutdown, which ends the fetch with an error
        for duplicate in duplicates:
            if timed_out:
                with contextlib.suppress(OSError):
                    duplicate.shutdown(socket.SHUT_RDWR)
            duplicate.close()
    try:
        if timed_out:
            raise TimeoutError
        if isinstance(outcome[0], BaseException):
            raise outcome[0]
    except (OSError, http.client.HTTPException, UnicodeError) as error:  # UnicodeError: IDNA
        if isinstance(error, SourceProblem):
            raise
        if isinstance(error, TimeoutError):
            raise SourceTimeoutError(url, f"did not answer within {timeout:g} s") from error
        detail = getattr(error, "strerror", None) or str(error) or type(error).__name__
        raise SourceConnectionError(url, f"cannot load: {detail}") from error
    return outcome[0]  # type: ignore[no-any-return]


def _follow_redirects(
    url: str, max_bytes: int, deny_private: bool, deadline: float, watch: Callable[..., None]
) -> tuple[str, str | None, bytes]:
    """:func:`_fetch`'s work: each request (a redirect checked as the URL was), then the body."""
    current = url
    for _ in range(MAX_REDIRECTS + 1):
        parts = urlsplit(current)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SourceConnectionError(url, f"cannot load: redirected to {current!r}")
        connection = _connect(parts, url, deny_private, deadline, watch)
        try:
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            connection.request("GET", quote(target, safe="!$%&'()*+,/:;=?@[]~"), headers=_HEADERS)
            response = connection.getresponse()
            location = response.getheader("Location")
            if response.status in _REDIRECT_STATUSES and location:
                current = urljoin(current, location)
                continue
            if not 200 <= response.status < 300:
                raise UnreadableSourceError(url, f"answered {response.status}")
            body = _read_body(response, url, max_bytes)
            media = response.msg.get_content_type() if response.msg["Content-Type"] else ""
            return media, response.msg.get_content_charset(), body
        finally:
            connection.close()
    raise SourceConnectionError(url, f"cannot load: more than {MAX_REDIRECTS} redirects")


_HEADERS = {
    "User-Agent": "rag-fusion-chain",
    "Accept": "text/html, application/xhtml+xml, text/*;q=0.9, application/pdf;q=0.8, */*;q=0.1",
    "Accept-Encoding": "gzip, deflate",
    "Connection": "close",
}


def _connect(
    parts: SplitResult, url: str, deny_private: bool, deadline: float, watch: Callable[..., None]
) -> http.client.HTTPConnection:
    """A connection (TLS for https, proxy settings not used) to an address of the host that was
    checked against the private-address policy, its socket given to ``watch``."""
    host, https = str(parts.hostname), parts.scheme == "https"
    port = parts.port or (443 if https else 80)
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses = list(dict.fromkeys(str(info[4][0]) for info in found))
    private = [address for address in addresses if not is_public_address(address)]
    if deny_private and private:
        where = "" if host == private[0] else f"{host} is at the "
        raise UnreadableSourceError(
            url, f"{where}private address {private[0]}: private addresses are denied"
        )
    timeout = max(0.001, deadline - time.monotonic())
    error = OSError(f"no address for {host}")
    for address in addresses:
        try:
            sock = socket.create_connection((address, port), timeout)
            break
        except OSError as failed:
            error = failed
    else:
        raise error
    watch(sock)
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    if https:
        import certifi  # the bundle requests and httpx use (langchain-core -> langsmith -> httpx)

        context = ssl.create_default_context(cafile=certifi.where())
        connection = http.client.HTTPSConnection(host, port, timeout=timeout, context=context)
        sock = context.wrap_socket(sock, server_hostname=host)
    connection.sock = sock
    return connection


def _read_body(response: http.client.HTTPResponse, url: str, max_bytes: int) -> bytes:
    """The body, decompressed (gzip/deflate), refused past ``max_bytes`` (a gzip bomb too) or
    when the compressed stream ends early (a cut connection would otherwise pass for the page)."""
    too_large = UnreadableSourceError(url, f"larger than max_bytes={max_bytes}")
    if (response.length or 0) > max_bytes:  # a declared Content-Length: refused unread
        raise too_large
    encoding = (response.getheader("Content-Encoding") or "identity").strip().lower()
    if encoding not in ("identity", "gzip", "x-gzip", "deflate"):
        raise UnreadableSourceError(url, f"unsupported content encoding {encoding}")
    decoder = zlib.decompressobj(zlib.MAX_WBITS | 32) if encoding != "identity" else None
    blocks: list[bytes] = []
    size = 0
    try:
        while block := response.read1(65_536):
            if decoder is not None:
                block = decoder.decompress(block, max_bytes + 1 - size)
                if decoder.unconsumed_tail:
                    raise too_large
            size += len(block)
            if size > max_bytes:
                raise too_large
            blocks.append(block)
    except zlib.error as error:
        raise UnreadableSourceError(url, f"corrupt {encoding} body") from error
    if decoder is not None and not decoder.eof:  # no tail left to flush: all input was inflated
        raise UnreadableSourceError(url, f"truncated {encoding} body: the stream ends early")
    if decoder is not None and decoder.unused_data:  # a second gzip member: never cut silently
        raise UnreadableSourceError(url, f"{encoding} body with data after its stream's end")
    return b"".join(blocks)
