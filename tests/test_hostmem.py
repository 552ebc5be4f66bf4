"""The job's memory limit from its cgroup (issue 33, item 3): v2's memory.max and v1's
memory.limit_in_bytes, found from /proc/self/cgroup as the kernel writes it, the tightest over
the cgroup and its ancestors, reclaimable page cache not counted as used."""

from __future__ import annotations

from pathlib import Path

from kvtier.serving.hostmem import job_memory, mount_points

GiB = 2**30


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cgroup_v2_a_slurm_job(tmp_path):
    # slurm's cgroup/v2 plugin: /system.slice/slurmstepd.scope/job_42/step_0/user/task_0; mem_mb=200000 on the job
    root = tmp_path / "cg"
    job = root / "system.slice/slurmstepd.scope/job_42"
    task = job / "step_0/user/task_0"
    _write(tmp_path / "cgroup", "0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0\n")
    _write(job / "memory.max", f"{200000 * 2**20}\n")
    _write(job / "memory.current", f"{70 * GiB}\n")
    _write(job / "memory.stat", f"anon {50 * GiB}\nfile {20 * GiB}\ninactive_file {10 * GiB}\nactive_file 5\n")
    _write(task / "memory.max", "max\n")
    _write(task / "memory.current", f"{1 * GiB}\n")
    j = job_memory(tmp_path / "cgroup", root, mounts=None)
    assert j is not None and j.limit == 200000 * 2**20 and j.file == str(job / "memory.max")
    assert j.used == 60 * GiB and j.available == 200000 * 2**20 - 60 * GiB


def test_cgroup_v1_memory_controller(tmp_path):
    root = tmp_path / "cg"
    leaf = root / "memory/slurm/uid_1000/job_7"
    _write(tmp_path / "cgroup", "12:pids:/slurm/uid_1000/job_7\n4:memory:/slurm/uid_1000/job_7\n1:name=systemd:/\n")
    _write(leaf / "memory.limit_in_bytes", f"{64 * GiB}\n")
    _write(leaf / "memory.usage_in_bytes", f"{8 * GiB}\n")
    _write(leaf / "memory.stat", f"cache 1\ntotal_inactive_file {2 * GiB}\n")
    _write(root / "memory/memory.limit_in_bytes", "9223372036854771712\n")  # the root: no limit
    j = job_memory(tmp_path / "cgroup", root, mounts=None)
    assert j is not None and (j.limit, j.used, j.available) == (64 * GiB, 6 * GiB, 58 * GiB)


def test_no_limit_anywhere_and_a_container_namespace(tmp_path):
    root = tmp_path / "cg"
    _write(tmp_path / "cgroup", "0::/\n")
    assert job_memory(tmp_path / "cgroup", root, mounts=None) is None  # the root cgroup has no memory.max
    _write(root / "memory.max", "max\n")
    assert job_memory(tmp_path / "cgroup", root, mounts=None) is None
    # a container (cgroup namespace) sees its own cgroup as / while its path is the host's
    _write(tmp_path / "cgroup", "0::/kubepods/pod1/c1\n")
    _write(root / "memory.max", f"{16 * GiB}\n")
    _write(root / "memory.current", f"{4 * GiB}\n")
    assert job_memory(tmp_path / "cgroup", root, mounts=None).available == 12 * GiB
    assert job_memory(tmp_path / "missing", root, mounts=None) is None


def test_hybrid_hosts_mount_points(tmp_path):
    mounts = tmp_path / "mounts"
    _write(mounts, "tmpfs /sys/fs/cgroup tmpfs rw 0 0\ncgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0\n"
                   "cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0\ncgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n")
    assert mount_points(mounts) == (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup/memory"))
    # where they are mounted is where the limits are read
    v1 = tmp_path / "elsewhere"
    _write(mounts, f"cgroup {v1} cgroup rw,memory 0 0\n")
    _write(tmp_path / "cgroup", "4:memory:/job\n")
    _write(v1 / "job/memory.limit_in_bytes", f"{GiB}\n")
    assert job_memory(tmp_path / "cgroup", tmp_path / "nothing", mounts=mounts).limit == GiB
