"""Secrets out of everything ``pipelines`` prints: known secret values and credentials in URLs.

:func:`mask` replaces, in a text, every known secret value (at least 4 characters long,
longest first) and every credential a URL carries whatever its value: the password of
``scheme://user:password@host`` and query parameters such as ``password=``, ``token=``,
``sig=`` (an Azure SAS signature), ``X-Amz-Signature=``, ``AccountKey=``. Known values are
those a caller passes and those :func:`remember`\\ ed in this process — :func:`pipelines.jobs.config.load_job`
remembers every secret of every job it loads (values under secret-looking keys, values of
secret-looking environment variables, ``storage_options``) — so an error raised anywhere
later (a Spark failure quoting a path, say) is masked by the command that prints it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["MASK", "mask", "remember"]

MASK = "**********"

#: query or connection-string parameters whose values are credentials
_PARAM = re.compile(
    r"(?i)(?<![A-Za-z0-9_])("
    r"password|passwd|pwd|secret|client_secret|token|access_token|auth_token|api[_-]?key|"
    r"sig|signature|x-amz-signature|x-amz-security-token|x-goog-signature|"
    r"account[_-]?key|accountkey|sharedaccesskey|sas|credential|credentials"
    r")=([^&;#\s'\"]+)"
)
#: the password in scheme://user:password@host
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^/\s:@]+:)([^@/\s]+)(@)")

_known: set[str] = set()


def remember(values: Iterable[str]) -> None:
    """Mask these values (4 characters or more) in everything :func:`mask` sees from now on."""
    _known.update(v for v in values if isinstance(v, str) and len(v) >= 4)


def mask(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with secret values and URL credentials replaced by :data:`MASK`."""
    values = sorted({s for s in (*secrets, *_known) if len(s) >= 4}, key=len, reverse=True)
    for value in values:
        text = text.replace(value, MASK)
    text = _USERINFO.sub(lambda m: m.group(1) + MASK + m.group(3), text)
    return _PARAM.sub(lambda m: f"{m.group(1)}={MASK}", text)
