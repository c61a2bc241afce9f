"""Amplified cassettes: each recorded call grown into boundary, text and size
variants, recorded with the trusted tool, replayed as checks of their own.

``derive`` finds the candidates of one call from its schema and its data,
``record`` runs them with the tools in use and keeps or drops each
(``amplify``, ``amplify_file``), ``write`` puts the variants into the
file's own text. Replay runs them with ``replay.variants.replay_variants``.
"""

from __future__ import annotations

from .record import AmplifyReport, amplify, amplify_file

__all__ = [
    "AmplifyReport",
    "amplify",
    "amplify_file",
]
