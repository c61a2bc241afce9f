"""Plain typed Python functions as tools: ``from_function``.

The input schema comes from the function's signature and type hints
(``pytest_toolguard.signatures``, which ``@tool`` uses too when it is given
no ``input_schema``); ``from_function`` wraps a function an agent framework
already calls, which takes no ``ToolContext``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from ...registry import Handler, ToolSpec, tool
from ...signatures import schema_from_signature, with_dataclass_arguments


def from_function(
    function: Callable[..., Any], *, takes_context: bool = False, **options: Any
) -> ToolSpec:
    """A ``ToolSpec`` from a plain typed function, such as one an agent
    framework already calls: ``from_function(add, risk="read")``. The
    schema comes from its signature; ``options`` are ``@tool``'s (name,
    description, risk, paths, ...). Unless ``takes_context``, the function
    is called without the ``ToolContext`` (``function(**arguments)``);
    async functions stay async."""
    schema = schema_from_signature(function, skip_context=takes_context)
    target = with_dataclass_arguments(function, skip_context=takes_context)
    handler: Handler
    if takes_context:
        handler = target
    elif inspect.iscoroutinefunction(function):

        async def async_handler(ctx: Any, **arguments: Any) -> Any:
            return await target(**arguments)

        handler = async_handler
    else:

        def plain_handler(ctx: Any, **arguments: Any) -> Any:
            return target(**arguments)

        handler = plain_handler
    options.setdefault("name", getattr(function, "__name__", None))
    options.setdefault("description", (inspect.getdoc(function) or "").strip())
    return tool(input_schema=options.pop("input_schema", None) or schema, **options)(handler)
