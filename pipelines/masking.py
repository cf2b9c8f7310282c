"""Secrets out of everything ``pipelines`` prints: known secret values and credentials in URLs.

The one scrubber of the package. :func:`mask` replaces, in a text, every known secret value
(at least 4 characters long, longest first) and every credential a URL carries whatever its
value: the password of ``scheme://user:password@host`` and query parameters such as
``password=``, ``token=``, ``sig=`` (an Azure SAS signature), ``X-Amz-Signature=``,
``AccountKey=``. Known values are those a caller passes and those :func:`remember`\\ ed in this
process — :func:`pipelines.jobs.config.load_job` remembers every secret of every job it loads
(values under secret-looking keys, values of secret-looking environment variables,
``storage_options``) — so an error raised anywhere later (a Spark failure quoting a path, say)
is masked by the command that prints it.

:func:`mask_data` does the same over structured data (a job shown by ``validate --show``, a
model's repr): values under secret-looking keys (:func:`is_secret_key`) and pydantic
``SecretStr`` become :data:`MASK`, every other string goes through :func:`mask`.
:func:`secret_values` collects the values :func:`mask_data` would hide by key, to remember them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

__all__ = ["MASK", "is_secret_key", "mask", "mask_data", "remember", "secret_values"]

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


#: keys whose values are secret, wherever they appear (job files, options, storage options)
_SECRET_KEY = re.compile(
    r"token|password|passwd|secret|credential|private[_.-]?key|account[_.-]?key|access[_.-]?key"
    r"|auth[_.-]?params",
    re.I,
)
_PATH_KEY = re.compile(r"(file|path|dir)$", re.I)


def is_secret_key(key: object) -> bool:
    """True for keys whose values are never shown: ``*token*``, ``*password*``, ``*secret*``, ...

    Keys naming a file or path (``auth_token_file``) are not secret: the file is.
    """
    return isinstance(key, str) and bool(_SECRET_KEY.search(key)) and not _PATH_KEY.search(key)


def _is_secret_str(value: object) -> bool:  # pydantic.SecretStr and SecretBytes, without pydantic
    return callable(getattr(value, "get_secret_value", None))


def mask_data(value: Any, secrets: Iterable[str] = (), key: object = None) -> Any:
    """A copy of ``value`` (dicts, lists, scalars) safe to print.

    ``SecretStr`` values and scalars under a secret-looking ``key`` become :data:`MASK`; strings
    elsewhere are :func:`mask`\\ ed with ``secrets``; other scalars stay as they are.
    """
    known = list(secrets)
    if _is_secret_str(value):
        return MASK
    if isinstance(value, dict):
        return {k: mask_data(v, known, k) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [mask_data(v, known, key) for v in value]
    if value is not None and is_secret_key(key) and not hasattr(value, "model_dump"):
        return MASK
    if isinstance(value, str):
        return mask(value, known)
    return value


def secret_values(value: Any, key: object = None) -> set[str]:
    """The scalar values found under secret-looking keys in ``value`` (as text)."""
    if isinstance(value, dict):
        return {s for k, v in value.items() for s in secret_values(v, k)}
    if isinstance(value, list | tuple):
        return {s for v in value for s in secret_values(v, key)}
    if is_secret_key(key) and isinstance(value, str | int) and not isinstance(value, bool):
        return {str(value)}
    return set()
