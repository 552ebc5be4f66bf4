"""Memory a launched server may use: the host's MemAvailable and the job's own limit (cgroup).

A batch job (slurm's mem_mb, a container's --memory) runs under a cgroup memory limit that can
be far below the host's free RAM: a pool that fits the host but not the job is killed mid-run
by the job's OOM killer. The limit is found from /proc/self/cgroup, as the kernel documents it:
cgroup v2 ("0::/path": memory.max and memory.current under /sys/fs/cgroup/path) and v1 (the
"memory" controller's line: memory.limit_in_bytes and memory.usage_in_bytes under
/sys/fs/cgroup/memory/path). Every ancestor's limit applies, so the tightest one counts. The
pool in /dev/shm is shared memory, charged to the job's cgroup like its other memory; the
reclaimable page cache (inactive_file in memory.stat) is not counted as used.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PROC_CGROUP = Path("/proc/self/cgroup")
CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_MOUNTS = Path("/proc/self/mounts")
UNLIMITED_V1 = 2**60  # v1 writes "no limit" as a page-rounded 2**63 - 1


@dataclass(frozen=True)
class JobLimit:
    """The tightest cgroup memory limit over this process's cgroup and its ancestors."""

    limit: int
    used: int
    file: str  # the limit's file, for messages

    @property
    def available(self) -> int:
        return max(self.limit - self.used, 0)


def _int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text == "max":
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _inactive_file(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _levels(leaf: Path, top: Path) -> list[Path]:
    """leaf and its ancestors up to (and including) top."""
    out, d = [], leaf
    while True:
        out.append(d)
        if d == top or top not in d.parents:
            return out
        d = d.parent


def mount_points(mounts: Path = PROC_MOUNTS) -> tuple[Path | None, Path | None]:
    """Where cgroup v2 and v1's memory controller are mounted (/proc/self/mounts), if anywhere:
    a hybrid host mounts v2 at /sys/fs/cgroup/unified and v1's memory at /sys/fs/cgroup/memory."""
    v2 = v1 = None
    try:
        lines = mounts.read_text().splitlines()
    except OSError:
        return None, None
    for line in lines:
        parts = line.split()
        if len(parts) < 4:
            continue
        if parts[2] == "cgroup2" and v2 is None:
            v2 = Path(parts[1])
        elif parts[2] == "cgroup" and "memory" in parts[3].split(",") and v1 is None:
            v1 = Path(parts[1])
    return v2, v1


def job_memory(proc_cgroup: Path = PROC_CGROUP, root: Path = CGROUP_ROOT, mounts: Path | None = PROC_MOUNTS) -> JobLimit | None:
    """The job's memory limit and use (None where no cgroup limit applies or none is readable).
    The hierarchies are looked up where /proc/self/mounts says they are mounted, else under `root`
    (v2 at root, v1's memory controller at root/memory)."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    v2_root, v1_root = mount_points(mounts) if mounts is not None else (None, None)
    found: list[JobLimit] = []
    for line in lines:
        hid, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        rel = path.strip().lstrip("/")
        if hid == "0" and controllers == "":  # cgroup v2 (unified)
            top = v2_root or root
            files = ("memory.max", "memory.current", "memory.stat", "inactive_file")
        elif "memory" in controllers.split(","):  # cgroup v1, memory controller
            top = v1_root or root / "memory"
            files = ("memory.limit_in_bytes", "memory.usage_in_bytes", "memory.stat", "total_inactive_file")
        else:
            continue
        leaf = top / rel if (top / rel).is_dir() else top  # a cgroup namespace (container) shows its own root
        for d in _levels(leaf, top):
            limit = _int(d / files[0])
            if limit is None or limit >= UNLIMITED_V1:
                continue
            used = (_int(d / files[1]) or 0) - _inactive_file(d / files[2], files[3])
            found.append(JobLimit(limit, max(used, 0), str(d / files[0])))
    return min(found, key=lambda j: j.available) if found else None
