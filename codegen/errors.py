"""The one error type of the generator: it always names the file and the field at fault."""

from __future__ import annotations


class SchemaError(Exception):
    """A protocol source (or the registry) is malformed.

    `where` is a dotted path to the offending element inside `path`, e.g.
    ``structs.header.fields.magic`` - what a person editing the file needs to find it.
    """

    def __init__(self, path: str, where: str, message: str) -> None:
        self.path = str(path)
        self.where = where
        self.message = message
        super().__init__(f"{self.path}: {where}: {message}" if where else f"{self.path}: {message}")
