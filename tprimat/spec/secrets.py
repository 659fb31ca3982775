"""Credentials never reach a message, a log or a result: environment variables whose name looks like a
credential, and any text that contains one of their values."""

from __future__ import annotations

import os
import re

SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH", re.IGNORECASE)
MIN_SECRET_CHARS = 6  # shorter values ("1", "true") are not credentials, and redacting them would garble text


def secret_values() -> dict[str, str]:
    """value -> variable name, for every credential-named variable of this process's environment."""
    return {v: k for k, v in os.environ.items() if SECRET_NAME.search(k) and len(v) >= MIN_SECRET_CHARS}


def redact(value, secrets: dict[str, str] | None = None):
    """``value`` (a string, or dicts and lists of them) with every secret replaced by <redacted NAME>."""
    secrets = secret_values() if secrets is None else secrets
    if not secrets:
        return value
    if isinstance(value, str):
        for secret, name in secrets.items():
            if secret in value:
                value = value.replace(secret, f"<redacted {name}>")
        return value
    if isinstance(value, dict):
        return {k: redact(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, secrets) for v in value]
    return value


WANDB_HOST = "api.wandb.ai"


def wandb_credentials() -> bool:
    """Whether W&B online mode has an API key to use: ``WANDB_API_KEY``, or a ``wandb login`` entry in ~/.netrc
    (where the W&B client stores it); a custom ``WANDB_BASE_URL`` host is looked up the same way."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    import netrc
    from urllib.parse import urlparse

    host = urlparse(os.environ.get("WANDB_BASE_URL", "")).hostname or WANDB_HOST
    try:
        return netrc.netrc().authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False
