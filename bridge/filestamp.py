"""What tells a changed file from the one already read: cheaper than reading it again.

Inode as well as mtime and size: a ConfigMap or Secret update swaps a symlink to a new file,
which may keep both.  Shared by every file the bridge re-reads on change (tenancy, Slurm
credentials).
"""

import os
from pathlib import Path

FileStamp = tuple[int, int, int]


def file_stamp(path: Path) -> FileStamp:
    """(inode, mtime, size) of ``path``; raises OSError when it cannot be read."""
    st = os.stat(path)
    return (st.st_ino, st.st_mtime_ns, st.st_size)
