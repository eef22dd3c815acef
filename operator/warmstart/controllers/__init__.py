"""Thin kopf handlers: read, call render/, apply with server-side apply, write status."""
