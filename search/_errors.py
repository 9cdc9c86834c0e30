"""One exception for every user-facing mistake: it names the field or thing and what was
expected."""


class StudyError(ValueError):
    """Bad input: a study file, a flag, a storage or a cluster that cannot be used. Exit code 2."""

    def __init__(self, where: str, message: str) -> None:
        self.where = where
        self.message = message
        super().__init__(f"{where}: {message}" if where else message)
