from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.archive_provider import ArchiveProvider
from typing import cast

if TYPE_CHECKING:
  from ..models.archive_error import ArchiveError





T = TypeVar("T", bound="ArchiveStatus")



@_attrs_define
class ArchiveStatus:
    """ 
        Attributes:
            provider (ArchiveProvider): local (a directory, including a 3FS mount) or fsspec (an object-store URL).
            url (str): COMMINSIGHT_COMMON_ARCHIVE_URL with any credentials removed.
            pending_files (int): Sealed files waiting for upload.
            pending_bytes (int):
            uploaded_files_total (int):
            uploaded_bytes_total (int): Bytes uploaded (compressed).
            failed_uploads_total (int): Failed attempts, retried later.
            local_deleted_files_total (int): Archived local files deleted to stay within the disk budget.
            disk_budget_bytes (int | None): Local disk budget for CommInsight data; null when unlimited.
            disk_used_bytes (int):
            flush_in_progress (bool):
            last_upload_real_ns (int | None):
            last_error (ArchiveError | None):
     """

    provider: ArchiveProvider
    url: str
    pending_files: int
    pending_bytes: int
    uploaded_files_total: int
    uploaded_bytes_total: int
    failed_uploads_total: int
    local_deleted_files_total: int
    disk_budget_bytes: int | None
    disk_used_bytes: int
    flush_in_progress: bool
    last_upload_real_ns: int | None
    last_error: ArchiveError | None
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.archive_error import ArchiveError # noqa: PLC0415
        provider = self.provider.value

        url = self.url

        pending_files = self.pending_files

        pending_bytes = self.pending_bytes

        uploaded_files_total = self.uploaded_files_total

        uploaded_bytes_total = self.uploaded_bytes_total

        failed_uploads_total = self.failed_uploads_total

        local_deleted_files_total = self.local_deleted_files_total

        disk_budget_bytes: int | None
        disk_budget_bytes = self.disk_budget_bytes

        disk_used_bytes = self.disk_used_bytes

        flush_in_progress = self.flush_in_progress

        last_upload_real_ns: int | None
        last_upload_real_ns = self.last_upload_real_ns

        last_error: dict[str, Any] | None
        if isinstance(self.last_error, ArchiveError):
            last_error = self.last_error.to_dict()
        else:
            last_error = self.last_error


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "provider": provider,
            "url": url,
            "pending_files": pending_files,
            "pending_bytes": pending_bytes,
            "uploaded_files_total": uploaded_files_total,
            "uploaded_bytes_total": uploaded_bytes_total,
            "failed_uploads_total": failed_uploads_total,
            "local_deleted_files_total": local_deleted_files_total,
            "disk_budget_bytes": disk_budget_bytes,
            "disk_used_bytes": disk_used_bytes,
            "flush_in_progress": flush_in_progress,
            "last_upload_real_ns": last_upload_real_ns,
            "last_error": last_error,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.archive_error import ArchiveError # noqa: PLC0415
        d = dict(src_dict)
        provider = ArchiveProvider(d.pop("provider"))




        url = d.pop("url")

        pending_files = d.pop("pending_files")

        pending_bytes = d.pop("pending_bytes")

        uploaded_files_total = d.pop("uploaded_files_total")

        uploaded_bytes_total = d.pop("uploaded_bytes_total")

        failed_uploads_total = d.pop("failed_uploads_total")

        local_deleted_files_total = d.pop("local_deleted_files_total")

        def _parse_disk_budget_bytes(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        disk_budget_bytes = _parse_disk_budget_bytes(d.pop("disk_budget_bytes"))


        disk_used_bytes = d.pop("disk_used_bytes")

        flush_in_progress = d.pop("flush_in_progress")

        def _parse_last_upload_real_ns(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        last_upload_real_ns = _parse_last_upload_real_ns(d.pop("last_upload_real_ns"))


        def _parse_last_error(data: object) -> ArchiveError | None:
            if data is None:
                return data
            try:
                if not isinstance(data, dict):
                    raise TypeError()
                last_error_type_0 = ArchiveError.from_dict(data)



                return last_error_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(ArchiveError | None, data)

        last_error = _parse_last_error(d.pop("last_error"))


        archive_status = cls(
            provider=provider,
            url=url,
            pending_files=pending_files,
            pending_bytes=pending_bytes,
            uploaded_files_total=uploaded_files_total,
            uploaded_bytes_total=uploaded_bytes_total,
            failed_uploads_total=failed_uploads_total,
            local_deleted_files_total=local_deleted_files_total,
            disk_budget_bytes=disk_budget_bytes,
            disk_used_bytes=disk_used_bytes,
            flush_in_progress=flush_in_progress,
            last_upload_real_ns=last_upload_real_ns,
            last_error=last_error,
        )


        archive_status.additional_properties = d
        return archive_status

    @property
    def additional_keys(self) -> list[str]:
        return list(self.additional_properties.keys())

    def __getitem__(self, key: str) -> Any:
        return self.additional_properties[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.additional_properties[key] = value

    def __delitem__(self, key: str) -> None:
        del self.additional_properties[key]

    def __contains__(self, key: str) -> bool:
        return key in self.additional_properties
