"""Private Slurm clusters on this machine, for the tests and for users: Debian's slurmctld, slurmd, slurmdbd with
munge and a private MariaDB (accounting, so that dead jobs have a state), state in one directory. Started as root
(CI runs as root); the daemons it started are stopped by their PIDs.

- ``Cluster``: one node, everything on loopback.
- ``NodesCluster``: N nodes (2 by default), each slurmd in its own network namespace with its own address on a
  private bridge (10.77.0.0/24 unless told otherwise), its own node name, spool and /etc/hosts (``ip netns exec``
  mounts /etc/netns/<ns>/hosts), so each node resolves this machine's hostname to its own address; slurmctld,
  slurmdbd, munge and MariaDB stay in this namespace: MariaDB on a socket, slurmctld and slurmdbd on random ports of
  every address here (Slurm binds a controller to its host name's address or to all), the nodes on their namespaces'
  addresses only.
  ``shape(node, rate)`` limits a node's link with ``tc tbf``; ``link(node, up)`` takes it down and up.

    python scripts/slurm_cluster.py start [--nodes 2] [--dir DIR]   # prints the SLURM_CONF to export; runs until ^C
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

PACKAGES = ["slurmctld", "slurmd", "slurm-client", "slurmdbd", "munge", "mariadb-server-core", "mariadb-client-core",
            "iproute2"]  # ip and tc: NodesCluster's namespaces, links and shaping
MYSQL_SOCKET = Path("/run/mysqld/mysqld.sock")  # where the MySQL client library looks for "localhost"
MUNGE_SOCKET = Path("/run/munge/munge.socket.2")  # where every Slurm client (srun in jobs, sacct) looks
LOCK = Path(tempfile.gettempdir()) / "tprimat-slurm-cluster.lock"  # held while a cluster runs: one at a time


def install() -> str | None:
    """Install Debian's packages when missing; returns why the cluster cannot run, or None."""
    if all(shutil.which(b) for b in ("slurmctld", "slurmd", "slurmdbd", "munged", "mariadbd", "sbatch", "ip", "tc")):
        return None
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return "Slurm is not installed and this is not a root Debian machine"
    return apt_install(PACKAGES)


def apt_install(packages: list[str]) -> str | None:
    """Debian's packages installed (one ``apt-get update``, one ``apt-get install``); None when done, else why not."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages]):
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if done.returncode:
            return f"{' '.join(cmd[:3])} failed: {(done.stderr or done.stdout).strip()[-300:]}"
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
        """Everything up, or, when any part fails, everything it started stopped and removed before the error. One
        cluster at a time on a machine (munge's and MariaDB's sockets are the system's paths, where every Slurm
        client looks): a second start waits for the first to stop (``LOCK``)."""
        import fcntl

        self.lock = open(LOCK, "w")
        fcntl.flock(self.lock, fcntl.LOCK_EX)
        try:
            return self._start_all()
        except BaseException:
            self.stop()
            raise

    def _start_all(self) -> "Cluster":
        r = self.root
        self.network()
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
SlurmctldHost=localhost({self.ctld_addr})
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo={auth}
{self.communication}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
StateSaveLocation={r / 'state'}
SlurmdSpoolDir={r / 'spool'}{self.per_node}
SlurmctldPidFile={r / 'slurmctld.pid'}
SlurmdPidFile={r / 'slurmd'}{self.per_node}.pid
SlurmctldLogFile={r / 'slurmctld.log'}
SlurmdLogFile={r / 'slurmd'}{self.per_node}.log
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort={dbd_port}
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
InactiveLimit=0
KillWait=5
SlurmdTimeout={self.slurmd_timeout_s}
MinJobAge=300
{self.node_lines(cpus, memory)}
""")
        self._start(["slurmdbd", "-D"], "slurmdbd.out")
        wait_for(lambda: _listening(dbd_port), "slurmdbd")
        self._start(["slurmctld", "-D", "-i"], "slurmctld.out")
        wait_for(lambda: self.run("scontrol", "ping").returncode == 0, "slurmctld")
        self.start_nodes()
        return self

    # a node that has not answered slurmctld's pings this long is DOWN and its jobs end (NODE_FAIL); Slurm's default
    # is 300 s, a test cluster's faults end sooner (15 s, not 30 s, since 2026-11-29: until then the faulted job's two
    # ranks train flat out, two cores' worth of the suite's time)
    slurmd_timeout_s = 15
    # the single node on loopback; NodesCluster overrides these four
    ctld_addr, communication, per_node = "127.0.0.1", "CommunicationParameters=NoCtldInAddrAny,NoInAddrAny", ""

    def node_lines(self, cpus: int, memory: int) -> str:
        return (f"NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory} State=UNKNOWN\n"
                "PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES")

    def start_nodes(self) -> None:
        self._start(["slurmd", "-D", "-N", "localhost"], "slurmd.out")
        wait_for(lambda: "idle" in self.run("sinfo", "-h", "-o", "%t").stdout, "slurmd (node idle)")

    def network(self) -> None:
        """Loopback only: nothing to set up."""

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
        self.teardown()

    def teardown(self) -> None:
        """Loopback only: nothing to take down but the lock."""
        self.release()

    def release(self) -> None:
        lock = getattr(self, "lock", None)
        if lock is not None:
            lock.close()  # closing the file releases the flock
            self.lock = None


def netns_reason() -> str | None:
    """Why this machine cannot host a cluster of network namespaces, or None (root, ip, tc, veth and bridges)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if not (shutil.which("ip") and shutil.which("tc")):
        return "ip or tc (iproute2) is not installed"
    probe = f"tpprobe{os.getpid() % 10000}"
    made = subprocess.run(["ip", "link", "add", probe, "type", "bridge"], capture_output=True, text=True)
    subprocess.run(["ip", "link", "del", probe], capture_output=True)
    return None if made.returncode == 0 else f"cannot create a bridge: {made.stderr.strip()}"


class NodesCluster(Cluster):
    """``nodes`` slurmd nodes, node1..nodeN, each in network namespace <prefix>N at <subnet>.(10+N) on a bridge
    whose own address (<subnet>.1) slurmctld listens on."""

    # Slurm binds a controller that NoCtldInAddrAny restricts to its host name's address (localhost here), not to the
    # address it is configured at: slurmctld binds every address of this namespace, as slurmdbd always does
    communication = ""

    def __init__(self, root: Path, nodes: int = 2, subnet: str = "10.77.0", prefix: str = "tpn"):
        super().__init__(root)
        if not 1 <= nodes <= 8:
            raise ValueError(f"nodes={nodes}: must be 1-8")
        self.nodes, self.subnet, self.prefix = nodes, subnet, prefix
        self.bridge, self.ctld_addr, self.per_node = f"{prefix}br0", f"{subnet}.1", "-%n"
        self.made_links: list[str] = []
        self.made_namespaces: list[str] = []

    def name(self, i: int) -> str:
        return f"node{i}"

    def ns(self, i: int) -> str:
        return f"{self.prefix}{i}"

    def addr(self, i: int) -> str:
        return f"{self.subnet}.{10 + i}"

    def veth(self, i: int) -> str:
        return f"{self.prefix}v{i}"

    def node_lines(self, cpus: int, memory: int) -> str:
        share = max(memory // self.nodes, 256)
        lines = [f"NodeName={self.name(i)} NodeAddr={self.addr(i)} CPUs={cpus} RealMemory={share} State=UNKNOWN"
                 for i in range(1, self.nodes + 1)]
        names = ",".join(self.name(i) for i in range(1, self.nodes + 1))
        return "\n".join([*lines, f"PartitionName=debug Nodes={names} Default=YES MaxTime=INFINITE State=UP "
                                   "OverSubscribe=YES"])

    def ip(self, *argv: str) -> None:
        done = subprocess.run(["ip", *argv], capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"ip {' '.join(argv)}: {done.stderr.strip()}")

    def network(self) -> None:
        """The bridge, one namespace per node with its veth, address, route and hosts file (a previous cluster of
        this prefix that was killed before it could stop is removed first: its namespaces hold no process then)."""
        for i in range(1, 9):
            if not subprocess.run(["ip", "netns", "pids", self.ns(i)], capture_output=True, text=True).stdout.strip():
                subprocess.run(["ip", "netns", "del", self.ns(i)], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
        self.ip("link", "add", self.bridge, "type", "bridge")
        self.made_links.append(self.bridge)
        self.ip("addr", "add", f"{self.ctld_addr}/24", "dev", self.bridge)
        self.ip("link", "set", self.bridge, "up")
        me = socket.gethostname()
        for i in range(1, self.nodes + 1):
            ns = self.ns(i)
            self.ip("netns", "add", ns)
            self.made_namespaces.append(ns)
            self.ip("link", "add", self.veth(i), "type", "veth", "peer", "name", "eth0", "netns", ns)
            self.made_links.append(self.veth(i))
            self.ip("link", "set", self.veth(i), "master", self.bridge, "up")
            self.ip("-n", ns, "addr", "add", f"{self.addr(i)}/24", "dev", "eth0")
            self.ip("-n", ns, "link", "set", "eth0", "up")
            self.ip("-n", ns, "link", "set", "lo", "up")
            hosts = self.hosts_file(i)
            hosts.parent.mkdir(parents=True, exist_ok=True)
            hosts.write_text("127.0.0.1 localhost\n" + f"{self.addr(i)} {me}\n" + f"{self.ctld_addr} ctld\n"
                             + "".join(f"{self.addr(j)} {self.name(j)}\n" for j in range(1, self.nodes + 1)))

    def start_nodes(self) -> None:
        self.slurmd = {i: self.start_slurmd(i) for i in range(1, self.nodes + 1)}
        self.wait_idle()

    def start_slurmd(self, i: int) -> subprocess.Popen:
        """Node i's slurmd in the node's network, with its own /etc/hosts in a private mount namespace (not ``ip netns
        exec``, which remounts /sys without the cgroup hierarchy slurmd reads); each exec keeps the PID: slurmd's."""
        (self.root / f"spool-{self.name(i)}").mkdir(parents=True, exist_ok=True)
        return self._start(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                            f"mount --bind {self.hosts_file(i)} /etc/hosts && exec nsenter "
                            f"--net=/run/netns/{self.ns(i)} slurmd -D -N {self.name(i)}"], f"slurmd-{self.name(i)}.out")

    def stop_slurmd(self, i: int) -> None:
        """Stop node i's slurmd as an administrator or a crash does (SIGTERM): the job steps it started run on."""
        self.slurmd[i].terminate()
        self.slurmd[i].wait(timeout=30)

    def hosts_file(self, i: int) -> Path:
        return Path("/etc/netns") / self.ns(i) / "hosts"

    def wait_idle(self, timeout_s: float = 180) -> None:
        wait_for(lambda: self.run("sinfo", "-h", "-o", "%t").stdout.split().count("idle") == self.nodes
                 or self.run("sinfo", "-h", "-o", "%D %t").stdout.strip() == f"{self.nodes} idle",
                 f"{self.nodes} slurmd nodes (idle)", timeout_s)

    def recover(self, i: int) -> None:
        """Node i back after a fault: its link up, its slurmd started afresh (it registers at once, rather than at
        slurmctld's next ping of a node it holds lost; job steps still running there are adopted), returned to
        service, every node idle."""
        self.link(i, True)
        if self.slurmd[i].poll() is None:
            self.stop_slurmd(i)
        self.slurmd[i] = self.start_slurmd(i)
        wait_for(lambda: "*" not in self.run("sinfo", "-h", "-N", "-n", self.name(i), "-o", "%t").stdout,
                 f"{self.name(i)} registered", 120)
        self.run("scontrol", "update", f"nodename={self.name(i)}", "state=resume")
        self.wait_idle()

    def shape(self, i: int, rate_mbit: float | None) -> None:
        """Limit node i's link to ``rate_mbit`` Mbit/s each way (tc tbf on both ends of its veth); None lifts it."""
        for argv in (["tc", "qdisc", "del", "dev", self.veth(i), "root"],
                     ["ip", "netns", "exec", self.ns(i), "tc", "qdisc", "del", "dev", "eth0", "root"]):
            subprocess.run(argv, capture_output=True)
        if rate_mbit is None:
            return
        for argv in (["tc", "qdisc", "add", "dev", self.veth(i)], ["ip", "netns", "exec", self.ns(i), "tc", "qdisc",
                                                                   "add", "dev", "eth0"]):
            subprocess.run([*argv, "root", "tbf", "rate", f"{rate_mbit}mbit", "burst", "256kb", "latency", "100ms"],
                           capture_output=True, check=True)

    def link(self, i: int, up: bool) -> None:
        self.ip("link", "set", self.veth(i), "up" if up else "down")

    def teardown(self) -> None:
        """Every namespace and link this cluster made, and their hosts files; processes still in a namespace are
        named, then killed (by PID: ``ip netns pids``)."""
        self.left_behind = []
        for ns in self.made_namespaces:
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            self.left_behind += [(ns, pid) for pid in pids]
            for pid in pids:
                subprocess.run(["kill", "-9", pid], capture_output=True)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)
        for link in self.made_links:
            subprocess.run(["ip", "link", "del", link], capture_output=True)
        self.made_namespaces, self.made_links = [], []
        self.release()


def main() -> None:
    import argparse
    import signal
    import sys

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["start"])
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--dir", default=None, help="state directory (default: a new temporary one)")
    args = parser.parse_args()
    reason = install() or netns_reason()
    if reason:
        raise SystemExit(f"cannot start the cluster: {reason}")
    root = Path(args.dir or tempfile.mkdtemp(prefix="tprimat-slurm-"))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # a kill by PID stops the cluster as ^C does
    cluster = NodesCluster(root, args.nodes).start()
    print(f"export SLURM_CONF={root / 'slurm.conf'}   # {args.nodes} nodes up; ^C stops them", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()



def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


if __name__ == "__main__":
    main()
