"""Writing variants into a cassette's or case's own text: ``with_variants``.

Cases are written by hand (comments, the fields their author chose), so
amplification never re-dumps a file: it replaces each interaction's
``variants:`` entry, or adds one after the interaction's last field, and
leaves every other byte as it was. The text is checked by loading it back:
the variants read must be the ones written.

A JSON cassette (``dumps`` writes one above ``JSON_ABOVE`` interactions) is
machine-written and holds no comments: it is written again whole, by
``dumps`` in JSON, so an unchanged cassette keeps its bytes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import yaml

from ..replay.cassette import CassetteError, Variant, dumps, loads, syntax_of, variants_text

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

KEY = "variants"
DUMPED_COLUMN = 2
"""Where ``variants_text`` puts the key; a file's own column shifts it."""


def with_variants(text: str, variants: Sequence[Sequence[Variant]], *, source: str = "") -> str:
    """``text`` (a cassette or case) with the ``variants`` of each of its
    interactions, in order, in place of those it held (none: the entry is
    removed). ``CassetteError`` when the text is not a cassette with that
    many interactions."""
    if syntax_of(text) == "json":
        return _json_with_variants(text, variants, source)
    root = yaml.compose(text, Loader=_Loader)
    items = _interaction_nodes(root, source)
    if len(items) != len(variants):
        raise CassetteError(
            source, "interactions", f"{len(items)} in the file, {len(variants)} given"
        )
    edits: list[tuple[int, int, str]] = []
    for node, wanted in zip(items, variants, strict=True):
        pairs = node.value
        column = pairs[0][0].start_mark.column
        others = [(key, value) for key, value in pairs if key.value != KEY]
        for key, value in pairs:
            if key.value == KEY:
                start = _line_start(text, key.start_mark.index)
                edits.append((start, _insertion_point(text, value.end_mark.index), ""))
        if wanted:
            # PyYAML ends a document whose last scalar keeps its trailing
            # newlines with "...": inside a document it must go.
            listed = variants_text(list(wanted)).removesuffix("...\n")
            block = _indented(listed, column - DUMPED_COLUMN)
            at = _insertion_point(text, others[-1][1].end_mark.index)
            edits.append((at, at, block if text[at - 1 : at] in ("\n", "") else "\n" + block))
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    loaded = loads(text, source=source or "<amplified>")
    if [variants_text(list(i.variants)) for i in loaded.interactions] != [
        variants_text(list(v)) for v in variants
    ]:
        raise CassetteError(source, "variants", "written variants did not read back the same")
    return text


def _json_with_variants(text: str, variants: Sequence[Sequence[Variant]], source: str) -> str:
    cassette = loads(text, source=source or "<amplified>")
    held = len(cassette.interactions)
    if held != len(variants):
        raise CassetteError(source, "interactions", f"{held} in the file, {len(variants)} given")
    interactions = tuple(
        dataclasses.replace(interaction, variants=tuple(wanted))
        for interaction, wanted in zip(cassette.interactions, variants, strict=True)
    )
    return dumps(dataclasses.replace(cassette, interactions=interactions), syntax="json")


def _interaction_nodes(root: yaml.Node | None, source: str) -> list[yaml.MappingNode]:
    if not isinstance(root, yaml.MappingNode):
        raise CassetteError(source, "document", "must be a mapping")
    for key, value in root.value:
        if key.value == "interactions" and isinstance(value, yaml.SequenceNode):
            if value.flow_style or not all(
                isinstance(item, yaml.MappingNode) and not item.flow_style and item.value
                for item in value.value
            ):
                raise CassetteError(
                    source, "interactions", "amplify writes into block-style interactions only"
                )
            return list(value.value)
    raise CassetteError(source, "interactions", "missing")


def _insertion_point(text: str, index: int) -> int:
    """The start of the line after the value ending at ``index`` (a value's
    end may be the next token, on a line of its own: then that line's start)."""
    start = _line_start(text, index)
    return start if not text[start:index].strip() else _after_line(text, index)


def _line_start(text: str, index: int) -> int:
    return text.rfind("\n", 0, index) + 1


def _after_line(text: str, index: int) -> int:
    """``index`` if it starts a line, else just past the end of its line."""
    if index == 0 or text[index - 1] == "\n":
        return index
    newline = text.find("\n", index)
    return len(text) if newline < 0 else newline + 1


def _indented(block: str, column: int) -> str:
    pad = " " * column
    return "".join(pad + line if line.strip() else line for line in block.splitlines(keepends=True))
