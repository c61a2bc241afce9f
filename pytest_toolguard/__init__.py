"""pytest-toolguard: a safe execution boundary for LLM agents' tool calls,
and the pytest harness that tests it.

The public API is listed once, in ``__init__.pyi`` (what the README
teaches: the runtime, tools and their registry, calls and results, risks
and capabilities, hooks and the plan, the audit store, the redactor, the
workspace, the one base class of our exceptions); everything else is in the
submodule that owns it (see ARCHITECTURE.md). The names load on first use
(``lazy_exports``): the pytest plugin imports this package in every run.
"""

from __future__ import annotations

from .lazy_exports import lazy_exports

__version__ = "0.1.0"

__toolguard_owned__ = True
"""Our code: an inline deadline never lands in it (``runtime/inline.py``);
packages holding tools' code set it false."""

__getattr__, __dir__, __all__ = lazy_exports(__name__)
__all__ += ["__version__"]
