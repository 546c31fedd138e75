from enum import StrEnum

class ErrorCode(StrEnum):
    FORBIDDEN = "forbidden"
    INTERNAL = "internal"
    INVALID_PARAMETER = "invalid_parameter"
    MALFORMED_BODY = "malformed_body"
    NOT_FOUND = "not_found"
    UNAUTHORIZED = "unauthorized"
    UNAVAILABLE = "unavailable"
    UNPROCESSABLE = "unprocessable"

    def __str__(self) -> str:
        return str(self.value)
