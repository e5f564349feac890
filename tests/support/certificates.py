"""A self-signed certificate for TLS tests, made with the openssl command: valid a day, for
``localhost`` and ``127.0.0.1``."""

import subprocess
from pathlib import Path


def make_certificate(folder: Path) -> tuple[Path, Path]:
    """``(cert.pem, key.pem)`` written in ``folder``."""
    certificate, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(certificate), "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return certificate, key
