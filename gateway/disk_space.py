"""Free disk space for what requests write under the data dir: takes, reference recordings, project takes.

Each write is refused (ApiError 507 `insufficient_storage`, a JSON body naming the field) where it
would leave less than `min_free_disk_mb` free (the library's database is on that disk too), before
a byte is written (`check_disk`); a write the disk could not take after all (ENOSPC, EDQUOT: another
process filled it meanwhile) is the same 507 (`full_disk_error`), and the writer removes its
partial file. Downloads check their own way (gateway/downloads.py, 507 `insufficient_disk`).
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

from gateway.errors import ApiError
from gateway.settings import MB

_FULL = (errno.ENOSPC, errno.EDQUOT)


def check_disk(folder: Path, num_bytes: int, min_free_disk_mb: float, field: str = "audio") -> None:
    """ApiError 507 `insufficient_storage` naming `field` if writing `num_bytes` under `folder` would leave
    less than `min_free_disk_mb` (MB: `MB` bytes) free there. Blocking (a statvfs): call it in a thread."""
    while not folder.exists() and folder != folder.parent:  # (the data dir's own disk, before the first write)
        folder = folder.parent
    free = shutil.disk_usage(folder).free
    if free - num_bytes < min_free_disk_mb * MB:
        raise ApiError(507, "insufficient_storage", f"the server's disk has {free / MB:.0f} MB free; this would "
                       f"leave less than the {min_free_disk_mb:g} MB it keeps free (min_free_disk_mb)", field=field)


def full_disk_error(error: BaseException, field: str = "audio") -> ApiError | None:
    """The 507 for an OSError that says the disk (or the quota) is full; None for any other error."""
    if isinstance(error, OSError) and error.errno in _FULL:
        return ApiError(507, "insufficient_storage", f"the server's disk is full ({error.strerror}); nothing was "
                        "kept", field=field)
    return None
