"""Record and replay: cassettes and cases through the real executor.

Record a session with ``record_session``, read and write cassettes with
``load``/``loads``/``dump``/``dumps``, and play one back with ``replay``
(a ``ReplayReport``). Everything else in this package is internal: the
cassette format's types (``cassette``), the recorder, the player's checks.
The names load on first use (``pytest_toolguard.lazy_exports``): the plugin
imports small modules of this package in every pytest run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy_exports import lazy_exports

if TYPE_CHECKING:
    from .cassette import Cassette as Cassette
    from .cassette import CassetteError as CassetteError
    from .cassette import WorkspaceState as WorkspaceState
    from .cassette import dump as dump
    from .cassette import dumps as dumps
    from .cassette import load as load
    from .cassette import loads as loads
    from .checks import ReplayReport as ReplayReport
    from .player import replay as replay
    from .recorder import record_session as record_session

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "cassette": (
            "Cassette",
            "CassetteError",
            "WorkspaceState",
            "dump",
            "dumps",
            "load",
            "loads",
        ),
        "checks": ("ReplayReport",),
        "player": ("replay",),
        "recorder": ("record_session",),
    },
)
