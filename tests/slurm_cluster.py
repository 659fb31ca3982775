"""A private single-node Slurm cluster for the tests: Debian's slurmctld, slurmd, slurmdbd with munge and a
private MariaDB (accounting, so that dead jobs have a state), everything on loopback, state in a temp dir.
Started as root (CI runs as root); the daemons it started are stopped by their PIDs."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

PACKAGES = ["slurmctld", "slurmd", "slurm-client", "slurmdbd", "munge", "mariadb-server-core", "mariadb-client-core"]
MYSQL_SOCKET = Path("/run/mysqld/mysqld.sock")  # where the MySQL client library looks for "localhost"
MUNGE_SOCKET = Path("/run/munge/munge.socket.2")  # where every Slurm client (srun in jobs, sacct) looks


def install() -> str | None:
    """Install Debian's packages when missing; returns why the cluster cannot run, or None."""
    if all(shutil.which(b) for b in ("slurmctld", "slurmd", "slurmdbd", "munged", "mariadbd", "sbatch")):
        return None
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return "Slurm is not installed and this is not a root Debian machine"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES]):
        if subprocess.run(cmd, env=env, capture_output=True).returncode:
            return f"{' '.join(cmd)} failed"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(check, what: str, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise TimeoutError(f"{what} did not come up within {timeout_s} s")


class Cluster:
    def __init__(self, root: Path):
        self.root = root
        self.procs: list[subprocess.Popen] = []
        self.env = {**os.environ, "SLURM_CONF": str(root / "slurm.conf")}

    def _start(self, argv: list[str], log: str) -> subprocess.Popen:
        proc = subprocess.Popen(argv, stdout=open(self.root / log, "w"), stderr=subprocess.STDOUT, env=self.env)
        self.procs.append(proc)
        return proc

    def start(self) -> "Cluster":
        r = self.root
        for d in ("state", "spool", "mysql"):
            (r / d).mkdir(parents=True, exist_ok=True)
        self._munge()
        self._mariadb()
        dbd_port, ctld_port, slurmd_port = free_port(), free_port(), free_port()
        cpus = os.cpu_count() or 2
        memory = int(subprocess.run(["slurmd", "-C"], capture_output=True, text=True).stdout.split("RealMemory=")[1].split()[0])
        auth = f"socket={MUNGE_SOCKET}"
        (r / "slurmdbd.conf").write_text(f"""AuthType=auth/munge
AuthInfo={auth}
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={dbd_port}
SlurmUser=root
PidFile={r / 'slurmdbd.pid'}
LogFile={r / 'slurmdbd.log'}
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=root
StorageLoc=slurm_acct_db
""")
        (r / "slurmdbd.conf").chmod(0o600)
        (r / "slurm.conf").write_text(f"""ClusterName=tprimat
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo={auth}
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
StateSaveLocation={r / 'state'}
SlurmdSpoolDir={r / 'spool'}
SlurmctldPidFile={r / 'slurmctld.pid'}
SlurmdPidFile={r / 'slurmd.pid'}
SlurmctldLogFile={r / 'slurmctld.log'}
SlurmdLogFile={r / 'slurmd.log'}
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort={dbd_port}
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
InactiveLimit=0
KillWait=5
MinJobAge=300
NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory} State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
""")
        self._start(["slurmdbd", "-D"], "slurmdbd.out")
        wait_for(lambda: _listening(dbd_port), "slurmdbd")
        self._start(["slurmctld", "-D", "-i"], "slurmctld.out")
        wait_for(lambda: self.run("scontrol", "ping").returncode == 0, "slurmctld")
        self._start(["slurmd", "-D", "-N", "localhost"], "slurmd.out")
        wait_for(lambda: "idle" in self.run("sinfo", "-h", "-o", "%t").stdout, "slurmd (node idle)")
        return self

    def _munge(self) -> None:
        key = self.root / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        MUNGE_SOCKET.parent.mkdir(parents=True, exist_ok=True)
        MUNGE_SOCKET.unlink(missing_ok=True)
        self._start(["munged", "--foreground", "--force", f"--key-file={key}", f"--socket={MUNGE_SOCKET}",
                     f"--pid-file={self.root / 'munged.pid'}", f"--log-file={self.root / 'munged.log'}",
                     f"--seed-file={self.root / 'munged.seed'}", "--num-threads=10"], "munged.out")
        wait_for(lambda: MUNGE_SOCKET.exists(), "munged")

    def _mariadb(self) -> None:
        data = self.root / "mysql"
        subprocess.run(["mariadb-install-db", "--user=root", f"--datadir={data}", "--skip-test-db",
                        "--auth-root-authentication-method=socket"], capture_output=True, check=True)
        MYSQL_SOCKET.parent.mkdir(parents=True, exist_ok=True)
        self._start(["mariadbd", "--user=root", f"--datadir={data}", f"--socket={MYSQL_SOCKET}", "--skip-networking",
                     f"--pid-file={self.root / 'mysql.pid'}", f"--log-error={self.root / 'mysql.err'}"], "mariadb.out")
        wait_for(lambda: MYSQL_SOCKET.exists(), "mariadb")
        subprocess.run(["mariadb", f"--socket={MYSQL_SOCKET}", "-uroot", "-e",
                        "CREATE DATABASE IF NOT EXISTS slurm_acct_db;"], capture_output=True, check=True)

    def run(self, *argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), capture_output=True, text=True, env=self.env)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0
