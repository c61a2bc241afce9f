"""Record and replay: cassettes and cases through the real executor.

The public names are listed once, in ``__init__.pyi``, and load on first use
(``pytest_toolguard.lazy_exports``): the plugin imports small modules of
this package in every pytest run.
"""

from __future__ import annotations

from ..lazy_exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__)
