"""Downloading a remote price file: the default opener, retries after network errors, the offline error.

Shared by the AWS refresh (``srift.catalog.aws``) and the SkyPilot catalog refresh
(``srift.catalog.skypilot_prices``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import IO, Any

from srift.errors import SriftError

RETRY_DELAYS_S = (2.0, 8.0)  # waits before the second and third try of one download after a network error

Progress = Callable[[str], None]
Opener = Callable[[str], AbstractContextManager[IO[bytes]]]


def urlopen(url: str) -> AbstractContextManager[IO[bytes]]:
    import urllib.request

    return urllib.request.urlopen(url, timeout=60)  # noqa: S310 (a public price file, or the mirror the user set)


def offline_error(what: str, exc: BaseException) -> SriftError:
    return SriftError(f"could not reach {what} ({type(exc).__name__}: {str(exc)[:200]}); the catalog in use is unchanged.",
                      "check your network connection, then run `srift catalog refresh` again.")


def retrying(read: Callable[[], Any], what: str, say: Progress) -> Any:
    """``read()``, tried again after RETRY_DELAYS_S when it fails with a network error (OSError);
    an HTTP answer that another try would not change (4xx but 429) is not tried again."""
    for delay in (*RETRY_DELAYS_S, None):
        try:
            return read()
        except OSError as exc:
            status = getattr(exc, "code", None)  # urllib's HTTPError
            if delay is None or (isinstance(status, int) and 400 <= status < 500 and status != 429):
                raise
            say(f"{what}: {type(exc).__name__}, trying again in {delay:g} s")
            time.sleep(delay)
    raise AssertionError("unreachable")


