from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset






T = TypeVar("T", bound="IncidentStackFrame")



@_attrs_define
class IncidentStackFrame:
    """ One Python frame.

        Attributes:
            file (str): Source file of the frame.
            function (str): Function (code object) name.
            line (int | Unset): Line being run; absent when Python cannot say.
            code (str | Unset): The source line, stripped; absent when the file could not be read.
     """

    file: str
    function: str
    line: int | Unset = UNSET
    code: str | Unset = UNSET





    def to_dict(self) -> dict[str, Any]:
        file = self.file

        function = self.function

        line = self.line

        code = self.code


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "file": file,
            "function": function,
        })
        if line is not UNSET:
            field_dict["line"] = line
        if code is not UNSET:
            field_dict["code"] = code

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        file = d.pop("file")

        function = d.pop("function")

        line = d.pop("line", UNSET)

        code = d.pop("code", UNSET)

        incident_stack_frame = cls(
            file=file,
            function=function,
            line=line,
            code=code,
        )

        return incident_stack_frame

