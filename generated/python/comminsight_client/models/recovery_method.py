from enum import StrEnum

class RecoveryMethod(StrEnum):
    JOB = "job"
    MARKER = "marker"
    PERIOD = "period"
    TEMPLATE = "template"
    USER_TAG = "user_tag"

    def __str__(self) -> str:
        return str(self.value)
