"""Load web pages: one bounded fetch per URL, text by content type, a private-address policy.

**Bounds.** A fetch is bounded as a whole by ``timeout`` seconds of wall clock: name lookup,
connecting, the response headers, every redirect and the body (a server sending its headers a
byte at a time is cut off at the deadline). The body is capped at ``max_bytes`` after
decompression (a gzip bomb stops at the cap). At most five redirects, to http(s) URLs only.

**Content types.** HTML (main text, title kept), plain text types and PDF are read; anything
else (images, ``application/octet-stream``...) is refused with its content type named.

**Private addresses.** Allowed by default, for local use (a wiki on the LAN, a page served on
localhost). Servers that load URLs given by others should pass ``deny_private=True`` or set
``RAG_FUSION_DENY_PRIVATE_URLS=1``: then a host that resolves to any non-global address
(loopback, private, link-local, shared, multicast, reserved) is refused, at every redirect, and
the connection goes to the address that was checked (no second lookup to rebind). Proxy settings
from the environment are not used.

>>> load_web(["https://lilianweng.github.io/posts/2023-06-23-agent/"],
...          classes=["post-title", "post-content"])  # doctest: +SKIP
"""

from __future__ import annotations

import codecs
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
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from urllib.parse import urljoin, urlsplit

from langchain_core.documents import Document

from rag_fusion_chain.ingest.files import html_document, pdf_documents
from rag_fusion_chain.ingest.problems import (
    NoTextError,
    SkippedSourceWarning,
    SourceConnectionError,
    SourceProblem,
    SourceTimeoutError,
    UnreadableSourceError,
)
from rag_fusion_chain.validation import redact_credentials

DEFAULT_TIMEOUT = 30.0
DEFAULT_MAX_BYTES = 10_000_000
USER_AGENT = "rag-fusion-chain"
DENY_PRIVATE_ENV = "RAG_FUSION_DENY_PRIVATE_URLS"
"""Set to ``1`` (or ``true``/``yes``/``on``) to refuse private addresses by default."""
MAX_REDIRECTS = 5
REDIRECT_STATUSES = (301, 302, 303, 307, 308)
HTML_TYPES = ("text/html", "application/xhtml+xml")
PDF_TYPE = "application/pdf"
TEXT_TYPES = ("application/json", "application/xml")
_READ_BLOCK = 65_536


@dataclass(frozen=True)
class Page:
    """A fetched response: final URL, media type (``""`` if none), declared charset, body."""

    url: str
    media_type: str
    charset: str | None
    body: bytes


def load_web(
    urls: Sequence[str],
    *,
    classes: Sequence[str] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    max_bytes: int = DEFAULT_MAX_BYTES,
    deny_private: bool | None = None,
) -> list[Document]:
    """Load web pages (HTML main text, plain text, PDF pages), keeping only ``classes`` if given.

    Only http(s) URLs are accepted (else ValueError). Each fetch takes at most ``timeout``
    seconds in all (else TimeoutError); a body longer than ``max_bytes`` after decompression,
    an error status or a content type that is not text is a ValueError; connection failures are
    ConnectionError. ``deny_private``: see the module's notes (None: the environment decides).
    Pages whose (chosen) elements hold no text are skipped with a warning.

    >>> load_web(["https://example.org/"])[0].metadata["title"]  # doctest: +SKIP
    'Example Domain'
    """
    if isinstance(urls, str):
        raise TypeError("urls must be a list of URLs, not a single string")
    for url in urls:
        check_web_url(url)
    check_fetch_limits(timeout, max_bytes)
    documents: list[Document] = []
    for url in urls:
        try:
            documents.extend(
                load_url(
                    url,
                    classes=classes,
                    timeout=timeout,
                    max_bytes=max_bytes,
                    deny_private=deny_private,
                )
            )
        except NoTextError as problem:
            shown = f" (classes={list(classes)})" if classes else ""
            warnings.warn(f"{problem}{shown}", SkippedSourceWarning, stacklevel=2)
    return documents


def load_url(
    url: str,
    *,
    classes: Sequence[str] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    max_bytes: int = DEFAULT_MAX_BYTES,
    deny_private: bool | None = None,
) -> list[Document]:
    """The documents of one URL; problems raise :class:`SourceProblem` subclasses.

    The documents' source and id are the URL without ``user:password@`` (never sent either).
    """
    page = fetch(url, timeout=timeout, max_bytes=max_bytes, deny_private=deny_private)
    return page_documents(page, redact_credentials(url), classes)


def page_documents(page: Page, source: str, classes: Sequence[str] | None = None) -> list[Document]:
    """The documents of a fetched page, read by its content type; named ``source``."""
    media = page.media_type
    if media == PDF_TYPE:
        return pdf_documents(page.body, source)
    if media in HTML_TYPES or (not media and b"\0" not in page.body[:1024]):
        return [html_document(page.body, source, encoding=page.charset, classes=classes)]
    if media.startswith("text/") or media in TEXT_TYPES or media.endswith(("+json", "+xml")):
        charset = page.charset or "utf-8"
        try:
            text = page.body.decode(charset)
        except UnicodeDecodeError as error:
            raise UnreadableSourceError(source, f"not {charset} text") from error
        if not text.strip():
            raise NoTextError(source, "no text found")
        return [Document(page_content=text, metadata={"source": source}, id=source)]
    raise UnreadableSourceError(source, f"content type {media or 'unknown'} is not text")


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
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
        raise ValueError(f"max_bytes must be a positive int, got {max_bytes!r}")


def deny_private_default(deny_private: bool | None) -> bool:
    """``deny_private``, or when None, whether ``$RAG_FUSION_DENY_PRIVATE_URLS`` asks for it."""
    if deny_private is not None:
        return deny_private
    return os.environ.get(DENY_PRIVATE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def is_public_address(address: str) -> bool:
    """Whether an IP address is globally routable (IPv4-mapped IPv6 judged as IPv4).

    >>> is_public_address("93.184.216.34"), is_public_address("10.0.0.1")
    (True, False)
    >>> is_public_address("::ffff:127.0.0.1")
    False
    """
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


# --------------------------------------------------------------------------------------------
# Fetching
# --------------------------------------------------------------------------------------------


def fetch(
    url: str,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    max_bytes: int = DEFAULT_MAX_BYTES,
    deny_private: bool | None = None,
) -> Page:
    """GET ``url`` within ``timeout`` seconds in all, following redirects; see the module."""
    check_web_url(url)
    check_fetch_limits(timeout, max_bytes)
    deny = deny_private_default(deny_private)
    deadline = time.monotonic() + timeout
    with _Watchdog(deadline) as watchdog:
        try:
            page = _fetch(url, deadline, max_bytes, deny, watchdog)
            if watchdog.fired:  # the body ended because the watchdog closed the connection
                raise TimeoutError
            return page
        except SourceProblem:
            raise
        except (OSError, http.client.HTTPException) as error:
            if watchdog.fired or isinstance(error, TimeoutError):
                raise SourceTimeoutError(url, f"did not answer within {timeout:g} s") from error
            detail = getattr(error, "strerror", None) or str(error) or type(error).__name__
            raise SourceConnectionError(url, f"cannot load: {detail}") from error


def _fetch(url: str, deadline: float, max_bytes: int, deny: bool, watchdog: _Watchdog) -> Page:
    current = url
    for _ in range(MAX_REDIRECTS + 1):
        parts = urlsplit(current)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SourceConnectionError(url, f"cannot load: redirected to {current!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        addresses = _resolve(parts.hostname, port, deadline)
        if deny:
            _refuse_private(url, parts.hostname, addresses)
        connection = _connection(parts.scheme, parts.hostname, port, addresses, watchdog)
        try:
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            connection.request("GET", target, headers=_HEADERS)
            response = connection.getresponse()
            location = response.getheader("Location")
            if response.status in REDIRECT_STATUSES and location:
                current = urljoin(current, location)
                continue
            if not 200 <= response.status < 300:
                raise UnreadableSourceError(url, f"answered {response.status}")
            body = _read_body(response, url, max_bytes)
            media_type, charset = _content_type(response.getheader("Content-Type") or "")
            return Page(current, media_type, charset, body)
        finally:
            connection.close()
    raise SourceConnectionError(url, f"cannot load: more than {MAX_REDIRECTS} redirects")


_HEADERS = {
    "User-Agent": USER_AGENT,
    "Accept": "text/html, application/xhtml+xml, text/*;q=0.9, application/pdf;q=0.8, */*;q=0.1",
    "Accept-Encoding": "gzip, deflate",
    "Connection": "close",
}


def _resolve(host: str, port: int, deadline: float) -> list[str]:
    """The addresses of ``host``, looked up in a helper thread so the deadline bounds it."""
    with contextlib.suppress(ValueError):
        return [str(ipaddress.ip_address(host))]
    outcome: list[list[str] | OSError] = []

    def look_up() -> None:
        try:
            found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            outcome.append(list(dict.fromkeys(str(info[4][0]) for info in found)))
        except OSError as error:
            outcome.append(error)

    thread = threading.Thread(target=look_up, name="rag-fusion-dns", daemon=True)
    thread.start()
    thread.join(max(0.0, deadline - time.monotonic()))
    if not outcome:
        raise TimeoutError(f"looking up {host} took too long")
    result = outcome[0]
    if isinstance(result, OSError):
        raise result
    return result


def _refuse_private(url: str, host: str, addresses: list[str]) -> None:
    private = [address for address in addresses if not is_public_address(address)]
    if private:
        where = f"private address {private[0]}"
        where = where if host == private[0] else f"{host} is at the {where}"
        raise UnreadableSourceError(url, f"{where}: private addresses are denied")


def _connection(
    scheme: str, host: str, port: int, addresses: list[str], watchdog: _Watchdog
) -> http.client.HTTPConnection:
    """A connection to ``host`` that connects only to the ``addresses`` already checked, and
    whose socket the watchdog shuts at the deadline."""
    timeout = max(0.001, watchdog.deadline - time.monotonic())
    connection: http.client.HTTPConnection
    if scheme == "https":
        connection = http.client.HTTPSConnection(host, port, timeout=timeout, context=_tls())
    else:
        connection = http.client.HTTPConnection(host, port, timeout=timeout)

    def connect_to_checked(
        _: tuple[str, int], timeout: float | None = None, source: tuple[str, int] | None = None
    ) -> socket.socket:
        error: OSError = OSError(f"no address for {host}")
        for address in addresses:
            try:
                connected = socket.create_connection((address, port), timeout, source)
            except OSError as failed:
                error = failed
                continue
            watchdog.watch(connected)
            return connected
        raise error

    connection._create_connection = connect_to_checked  # type: ignore[attr-defined]
    return connection


def _tls() -> ssl.SSLContext:
    try:
        import certifi  # what requests uses; else the system's certificates
    except ImportError:
        return ssl.create_default_context()
    return ssl.create_default_context(cafile=certifi.where())


def _read_body(response: http.client.HTTPResponse, url: str, max_bytes: int) -> bytes:
    """The body, decompressed (gzip/deflate), refused past ``max_bytes`` before and after."""
    too_large = UnreadableSourceError(url, f"larger than max_bytes={max_bytes}")
    declared = (response.getheader("Content-Length") or "").strip()
    if declared.isdigit() and int(declared) > max_bytes:
        raise too_large
    encoding = (response.getheader("Content-Encoding") or "identity").strip().lower()
    if encoding not in ("identity", "gzip", "x-gzip", "deflate"):
        raise UnreadableSourceError(url, f"unsupported content encoding {encoding}")
    decoder = zlib.decompressobj(zlib.MAX_WBITS | 32) if encoding != "identity" else None
    blocks: list[bytes] = []
    size = received = 0
    try:
        while block := response.read1(_READ_BLOCK):
            received += len(block)
            if decoder is not None:
                block = decoder.decompress(block, max_bytes + 1 - size)
                if decoder.unconsumed_tail:
                    raise too_large
            size += len(block)
            if size > max_bytes or received > max_bytes:
                raise too_large
            blocks.append(block)
        if decoder is not None:
            blocks.append(decoder.flush())
            size += len(blocks[-1])
    except zlib.error as error:
        raise UnreadableSourceError(url, f"corrupt {encoding} body") from error
    if size > max_bytes:
        raise too_large
    return b"".join(blocks)


def _content_type(header: str) -> tuple[str, str | None]:
    """The media type and a known charset (else None) of a ``Content-Type`` header."""
    media, *parameters = header.split(";")
    charset = None
    for parameter in parameters:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset":
            charset = value.strip().strip('"').lower() or None
    if charset is not None:
        try:
            codecs.lookup(charset)
        except LookupError:
            charset = None
    return media.strip().lower(), charset


class _Watchdog:
    """Shuts the watched sockets down at ``deadline``, waking any blocked read (TLS included)."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.fired = False
        self._lock = threading.Lock()
        self._duplicates: list[socket.socket] = []
        self._timer = threading.Timer(max(0.0, deadline - time.monotonic()), self._fire)
        self._timer.daemon = True

    def __enter__(self) -> _Watchdog:
        self._timer.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._timer.cancel()
        with self._lock:
            for duplicate in self._duplicates:
                duplicate.close()
            self._duplicates.clear()

    def watch(self, connected: socket.socket) -> None:
        """Watch ``connected``; TimeoutError (and closed) if the deadline has passed already.

        A duplicate descriptor is kept: shutting it down ends the connection even after TLS
        has taken the original socket over.
        """
        with self._lock:
            if not self.fired:
                self._duplicates.append(connected.dup())
                return
        connected.close()
        raise TimeoutError("the deadline passed while connecting")

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            for duplicate in self._duplicates:
                with contextlib.suppress(OSError):
                    duplicate.shutdown(socket.SHUT_RDWR)
