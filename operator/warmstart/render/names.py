"""Names and label values of an object's children that Kubernetes accepts, whatever the parent's name.

A CR name is a DNS-1123 subdomain: up to 253 characters, dots allowed, a digit first allowed. Its children are not
that free: a Service name must be a DNS-1035 label (at most 63, a letter first, no dots) and a label value at most 63
characters. A name that already fits is used unchanged (so existing children keep their names); any other is
sanitized, shortened and given 8 hex digits of SHA-256 of the original name, so two parents never share a child.
"""

from __future__ import annotations

import hashlib
import re

MAX_LABEL = 63
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DIGEST = 8


def _digest(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:_DIGEST]


def is_dns1035(value: str) -> bool:
    """A DNS-1035 label: what a Service name must be."""
    return len(value) <= MAX_LABEL and bool(_DNS1035.match(value))


def is_label_value(value: str) -> bool:
    """A valid label value."""
    return len(value) <= MAX_LABEL and bool(_LABEL_VALUE.match(value))


def child_name(name: str, suffix: str = "") -> str:
    """`<name><suffix>` when that is a DNS-1035 label, else `<sanitized name>-<hash><suffix>` of at most 63."""
    if is_dns1035(name + suffix):
        return name + suffix
    base = re.sub(r"[^a-z0-9-]+", "-", name.lower())
    if not base[:1].isalpha():
        base = f"w{base}"
    room = MAX_LABEL - len(suffix) - _DIGEST - 1
    return f"{base[:room].rstrip('-')}-{_digest(name)}{suffix}"


def label_value(name: str) -> str:
    """`name` when it is a valid label value, else its first characters and a hash, at most 63."""
    if is_label_value(name):
        return name
    room = MAX_LABEL - _DIGEST - 1
    head = re.sub(r"^[^A-Za-z0-9]+", "", name[:room]).rstrip("-_.")
    return f"{head}-{_digest(name)}" if head else _digest(name)
