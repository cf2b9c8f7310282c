"""Test certificates: a throwaway CA (trustme) and a server certificate for 127.0.0.1 and localhost.

:func:`server_certificates` writes ``ca.pem`` (the CA to trust), ``cert.pem`` (the chain) and
``key.pem`` into a directory and returns their paths by those names.
"""

from __future__ import annotations

from pathlib import Path

import pytest


def server_certificates(directory: Path) -> dict[str, Path]:
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    files = {"ca": directory / "ca.pem", "cert": directory / "cert.pem", "key": directory / "key.pem"}
    ca.cert_pem.write_to_path(str(files["ca"]))
    cert = ca.issue_cert("127.0.0.1", "localhost")
    for i, pem in enumerate(cert.cert_chain_pems):
        pem.write_to_path(str(files["cert"]), append=i > 0)
    cert.private_key_pem.write_to_path(str(files["key"]))
    return files
