"""A real two-node Ray cluster on one machine: each node in a network namespace of its own.

``NetnsCluster`` makes two network namespaces (names carry this process's pid), joins them
with a veth pair on a private subnet, starts a Ray head node in namespace A with
``ray start --head`` and a second node in namespace B with ``ray start --address=...``, and
runs driver scripts inside namespace A. The two nodes only see each other through the veth,
with their own addresses, ports and loopback: what a cluster of two machines looks like to
Ray, unlike ``ray.cluster_utils.Cluster`` (every node on 127.0.0.1 of one stack).

Teardown never runs ``ray stop``: it matches Ray processes by name on the whole machine
(network namespaces do not separate process ids), so it would also stop the Ray instances of
other users of the machine. Every process of the cluster lives in one of our namespaces, so
those are found by namespace (what ``ip netns pids`` does) and killed by pid; the same makes
``kill_node_b()`` one call that takes node B away (raylet, workers, agents) abruptly.

The nodes are started as docs/cluster.md says (``documented_cluster``): its token made by
``ray get-auth-token --generate`` in the cluster's home directory, its ``ray start``
commands with their fixed ports, ``RAY_AUTH_MODE=token`` for the other node and the
drivers; the test adds only what places the nodes here (addresses, temp dirs, CPUs).

Needs root and a kernel that allows ``ip netns add``; otherwise ``NetnsCluster`` skips the
test that uses it (``pytest.skip``) with the reason.
"""

import itertools
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

#: The veth pair lives only between the two namespaces (neither has a route to the host's
#: networks), so this subnet can clash with nothing; it is still an unusual one, so that an
#: address seen in a log is recognisably ours.
SUBNET = "10.213.77"

#: Where ``ip netns exec`` finds the files it mounts over /etc in a namespace.
NETNS_ETC = "/etc/netns"

#: Object store of each node: Ray's minimum is 75 MiB; the default (30% of the machine's
#: memory per node) is far more than a test needs.
OBJECT_STORE_BYTES = 100 * 2**20

_counter = itertools.count()

#: The page whose commands start the cluster.
CLUSTER_MD = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "cluster.md")


def documented_cluster(path=CLUSTER_MD):
    """What docs/cluster.md says about starting a cluster, read from the page.

    Returns
    -------
    dict
        ``generate``, ``head``, ``node``, ``status``: the arguments of its ``ray`` commands
        (after ``ray``; the node's address holds ``HEAD_IP``); ``node_env``: the variables
        its ``export`` lines set for the other nodes (and drivers); ``ports``: the TCP ports
        its "Ports" paragraph says to open (numbers and ranges).
    """
    with open(path) as f:
        text = f.read()
    section = text[text.index("## 1. Start a cluster"):text.index("## 2.")]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1).replace("\\\n", " ")
    commands = [shlex.split(line, comments=True) for line in block.splitlines()]
    commands = [c for c in commands if c]
    out = {"node_env": {}}
    for words in commands:
        if words[0] == "export":
            key, _, value = words[1].partition("=")
            out["node_env"][key] = value
        elif words[:2] == ["ray", "get-auth-token"]:
            out["generate"] = words[1:]
        elif words[:3] == ["ray", "start", "--head"]:
            out["head"] = words[1:]
        elif words[:2] == ["ray", "start"]:
            out["node"] = words[1:]
        elif words[:2] == ["ray", "status"]:
            out["status"] = words[1:]
    paragraph = section[section.index("**Ports.**"):].split("\n\n")[0]
    ports = set()
    for low, high in re.findall(r"\b(\d{4,5})(?:-(\d{4,5}))?\b", paragraph):
        ports.update(range(int(low), int(high or low) + 1))
    out["ports"] = ports
    return out


def _run(cmd, timeout=120, check=True, env=None):
    """Run a command (a list), returning the CompletedProcess; raise with its output if it fails."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}:\n{proc.stdout[-2000:]}{proc.stderr[-4000:]}")
    return proc


def _ns_id(path):
    """(device, inode) that identify a network namespace file (/run/netns/X or /proc/PID/ns/net)."""
    st = os.stat(path)
    return st.st_dev, st.st_ino


_usable = None


def netns_clusters_can_run():
    """Whether a ``NetnsCluster`` can be made here: root, and a kernel that allows ``ip netns
    add`` (tried once per process, with a namespace deleted at once)."""
    global _usable
    if _usable is None:
        name = f"prl{os.getpid()}probe"
        _usable = os.geteuid() == 0 and shutil.which("ip") is not None
        if _usable:
            try:
                _usable = _run(["ip", "netns", "add", name], timeout=30, check=False).returncode == 0
            except (OSError, subprocess.SubprocessError):
                _usable = False
            if _usable:
                _run(["ip", "netns", "delete", name], timeout=30, check=False)
    return _usable


class NetnsCluster:
    """Two Ray nodes started by ``ray start``, each in a network namespace of its own.

    A context manager: entering builds the namespaces and starts both nodes (each ``ray
    start`` returns once its node is registered with the head's GCS, so both are alive when
    ``__enter__`` returns); leaving kills every process of both namespaces, checks by pid that
    none is left, and deletes the namespaces (the veth goes with them) and the temporary
    directory. A failure while entering cleans up what was made before raising.

    Parameters
    ----------
    num_cpus : int
        Logical CPUs each node declares to Ray (``ray start --num-cpus``).
    num_cpus_a : int or None
        Logical CPUs of node A (the head, where drivers run) if not ``num_cpus``: room for
        the replacements of workers lost with node B.
    start_timeout : float
        Seconds each ``ray start`` may take before the setup fails.
    system_config : dict or None
        Ray system configuration of the cluster (the head's hidden ``ray start
        --system-config``), e.g. ``{"health_check_period_ms": 500,
        "health_check_failure_threshold": 3}`` to have a lost node declared dead in about
        1.5 s instead of Ray's default of about 15 s.

    Attributes
    ----------
    ns_a, ns_b : str
        Names of the two network namespaces.
    ip_a, ip_b : str
        Addresses of the nodes on the veth (the ``--node-ip-address`` of each node).
    port : int
        Port of the head's GCS; ``address`` is ``"ip_a:port"``, the RAY_ADDRESS of drivers.
    """

    def __init__(self, num_cpus=1, start_timeout=90.0, system_config=None, num_cpus_a=None):
        tag = f"{os.getpid()}x{next(_counter)}"
        self.ns_a, self.ns_b = f"prl{tag}a", f"prl{tag}b"
        # Interface names are limited to 15 characters.
        self.veth_a, self.veth_b = f"pv{tag}a"[-15:], f"pv{tag}b"[-15:]
        self.ip_a, self.ip_b = f"{SUBNET}.1", f"{SUBNET}.2"
        # The head's port as docs/cluster.md gives it (nothing else listens in a namespace
        # made here).
        self.port = int(next(w for w in documented_cluster()["head"] if w.startswith("--port=")).split("=")[1])
        self.address = f"{self.ip_a}:{self.port}"
        self.num_cpus = num_cpus
        self.num_cpus_a = num_cpus if num_cpus_a is None else num_cpus_a
        self.start_timeout = start_timeout
        self.system_config = dict(system_config or {})
        self._made = []       # namespaces created, deleted on exit
        self._etc = []        # their /etc/netns folders, deleted on exit
        self._tmp = None
        self._seen = {}       # pid -> start time of every cluster process seen
        self._ray = os.path.join(os.path.dirname(sys.executable), "ray")
        self.documented = documented_cluster()
        self.home = None      # the cluster's home directory (its ~/.ray/auth_token), made on start

    # ------------------------------------------------------------------ setup
    def __enter__(self):
        if os.geteuid() != 0:
            pytest.skip("a two-namespace Ray cluster needs root (ip netns add)")
        try:
            self._make_network()
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            self._teardown()
            pytest.skip(f"cannot make network namespaces here: {exc}")
        try:
            self._start_nodes()
        except BaseException:
            self._teardown()
            raise
        return self

    def __exit__(self, *exc):
        self._teardown()
        return False

    def _make_network(self):
        for ns in (self.ns_a, self.ns_b):
            _run(["ip", "netns", "add", ns])
            self._made.append(ns)
        # Both ends are created directly inside the namespaces: no name in the host's namespace.
        _run(["ip", "link", "add", self.veth_a, "netns", self.ns_a, "type", "veth",
              "peer", "name", self.veth_b, "netns", self.ns_b])
        for ns, dev, ip in ((self.ns_a, self.veth_a, self.ip_a), (self.ns_b, self.veth_b, self.ip_b)):
            # Ray's workers and drivers talk to their own raylet over loopback.
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
            _run(["ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", dev])
            _run(["ip", "-n", ns, "link", "set", dev, "up"])
            # Ray finds "this node's address" from the route towards a public address; with a
            # default route through the veth that is the veth address, not 127.0.0.1.
            _run(["ip", "-n", ns, "route", "add", "default", "dev", dev])
        self._name_hosts()

    def _name_hosts(self):
        """Give each namespace a hosts file naming both nodes and a resolver that answers at
        once (``ip netns exec`` mounts ``/etc/netns/<ns>/*`` over ``/etc``). Without them a
        name lookup in a namespace goes to the host's nameserver through the default route
        into the veth and waits out the resolver's timeout: torch.distributed's rendezvous
        looks up each peer's name, 6 s per lookup, 6-9 s per DD-PPO group formed."""
        with open("/etc/hosts") as f:
            hosts = f.read()
        hosts += f"\n{self.ip_a} {self.ns_a}\n{self.ip_b} {self.ns_b}\n"
        for ns in (self.ns_a, self.ns_b):
            etc = os.path.join(NETNS_ETC, ns)
            os.makedirs(etc, exist_ok=True)
            self._etc.append(etc)
            with open(os.path.join(etc, "hosts"), "w") as f:
                f.write(hosts)
            # Nothing listens on port 53 in the namespace: a lookup not in hosts is refused
            # at once instead of timing out.
            with open(os.path.join(etc, "resolv.conf"), "w") as f:
                f.write("nameserver 127.0.0.1\n")

    def _env(self, extra=None, head=False):
        """Environment of the cluster's processes: a home directory of its own, where the
        token docs/cluster.md makes is (the user's ~/.ray/auth_token is another cluster's),
        and the page's ``export`` lines for every process but the head's ``ray start``."""
        env = {k: v for k, v in os.environ.items()
               if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE")}
        env["RAY_USAGE_STATS_ENABLED"] = "0"
        env["HOME"] = self.home
        if not head:
            env.update(self.documented["node_env"])
        env.update(extra or {})
        return env

    def _start_nodes(self):
        # Short paths: Ray's Unix sockets live under the temp dir, and a socket path is
        # limited to 107 bytes.
        self._tmp = tempfile.mkdtemp(prefix="prl", dir="/tmp")
        self.home = os.path.join(self._tmp, "home")
        os.makedirs(self.home)
        doc = self.documented
        _run([self._ray, *doc["generate"]], timeout=self.start_timeout, env=self._env(head=True))
        # What places the nodes on this machine, after the page's arguments.
        common = ["--num-gpus=0", f"--object-store-memory={OBJECT_STORE_BYTES}", "--disable-usage-stats"]
        head = [self._ray, *doc["head"], f"--node-ip-address={self.ip_a}", "--include-dashboard=false",
                f"--temp-dir={self._tmp}/a", f"--num-cpus={self.num_cpus_a}",
                f"--resources={json.dumps({'node_a': 1})}"] + common
        if self.system_config:
            head.append(f"--system-config={json.dumps(self.system_config)}")
        node = [self._ray, *[w.replace("HEAD_IP", self.ip_a) for w in doc["node"]], f"--node-ip-address={self.ip_b}",
                f"--temp-dir={self._tmp}/b", f"--num-cpus={self.num_cpus}",
                f"--resources={json.dumps({'node_b': 1})}"] + common
        for ns, cmd, is_head in ((self.ns_a, head, True), (self.ns_b, node, False)):
            proc = subprocess.run(["ip", "netns", "exec", ns] + cmd, capture_output=True, text=True,
                                  env=self._env(head=is_head), timeout=self.start_timeout)
            self._remember_pids()
            if proc.returncode != 0:
                raise RuntimeError(f"ray start in {ns} exited with {proc.returncode}:\n"
                                   f"{proc.stdout[-3000:]}{proc.stderr[-3000:]}")

    def run_in(self, which, cmd, env=None, timeout=120):
        """Run ``cmd`` (a list; ``ray`` is this Python's) in namespace ``which`` ("a" or
        "b") with the environment of the cluster's nodes; returns the CompletedProcess."""
        if cmd[0] == "ray":
            cmd = [self._ray, *cmd[1:]]
        ns = self.ns_a if which == "a" else self.ns_b
        try:
            return subprocess.run(["ip", "netns", "exec", ns] + list(cmd), capture_output=True, text=True,
                                  env=self._env(env), timeout=timeout)
        finally:
            self._remember_pids()

    def listening_ports(self, which):
        """TCP ports listened on in namespace ``which`` other than on loopback: what other
        machines would have to reach (read from the kernel's socket table of a process in
        that namespace)."""
        pids = self.pids(which)
        ports = set()
        for table in ("tcp", "tcp6"):
            for pid in pids:
                try:
                    with open(f"/proc/{pid}/net/{table}") as f:
                        rows = f.read().splitlines()[1:]
                except (FileNotFoundError, ProcessLookupError):
                    continue
                for row in rows:
                    local, state = row.split()[1], row.split()[3]
                    address, port = local.rsplit(":", 1)
                    loopback = address in ("0100007F", "00000000000000000000000001000000") or \
                        address.endswith("0100007F") and address.startswith("0000000000000000FFFF0000")
                    if state == "0A" and not loopback:   # LISTEN
                        ports.add(int(port, 16))
                break   # every process of a namespace sees the same table
        return ports

    # ---------------------------------------------------------------- queries
    def pids(self, which="ab"):
        """Pids of the live processes in namespace A and/or B.

        Parameters
        ----------
        which : str
            "a", "b" or "ab": the namespaces to look in.
        """
        wanted = {}
        for key, ns in (("a", self.ns_a), ("b", self.ns_b)):
            if key in which and ns in self._made:
                try:
                    wanted[_ns_id(f"/run/netns/{ns}")] = ns
                except FileNotFoundError:
                    pass
        found = []
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                # A zombie has no namespace link any more: it has ended, only not been reaped.
                if _ns_id(f"/proc/{name}/ns/net") in wanted:
                    found.append(int(name))
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                continue
        return found

    def netns_inodes(self):
        """{"a": inode, "b": inode} of the two namespaces: a process whose
        ``/proc/PID/ns/net`` has one of these inodes runs on that node."""
        return {"a": _ns_id(f"/run/netns/{self.ns_a}")[1], "b": _ns_id(f"/run/netns/{self.ns_b}")[1]}

    def _remember_pids(self):
        for pid in self.pids():
            self._seen.setdefault(pid, _start_time(pid))

    # ---------------------------------------------------------------- driving
    def run_driver(self, script, timeout=120, env=None):
        """Run a Python script as a Ray driver inside namespace A, with RAY_ADDRESS set.

        Parameters
        ----------
        script : str
            Python source; it joins the cluster with ``ray.init()`` (or a Scheme) through
            RAY_ADDRESS.
        timeout : float
            Seconds before the driver is killed (``subprocess.TimeoutExpired`` is raised).
        env : dict or None
            Extra environment variables of the driver.

        Returns
        -------
        subprocess.CompletedProcess
            With text ``stdout`` and ``stderr``.
        """
        proc = self._popen_driver(script, env, stdin=None, stderr=subprocess.PIPE)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
        finally:
            self._remember_pids()
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def start_driver(self, script, env=None):
        """Start a Python script as a Ray driver inside namespace A (as ``run_driver``) and
        return at once: a ``subprocess.Popen`` with text pipes to its stdin and its stdout
        (stderr merged in), so that a test can talk to it while it runs, e.g. read the line
        saying that it is ready for node B to be killed, then write the line that lets it go
        on. End it with ``finish_driver``.

        Parameters
        ----------
        script : str
            Python source (joins the cluster through RAY_ADDRESS).
        env : dict or None
            Extra environment variables of the driver.
        """
        return self._popen_driver(script, env, stdin=subprocess.PIPE, stderr=subprocess.STDOUT)

    def finish_driver(self, proc, timeout=120):
        """Wait for a driver of ``start_driver`` to end (killed after ``timeout`` s, with
        ``subprocess.TimeoutExpired`` raised); returns the rest of its output."""
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
        finally:
            self._remember_pids()
        return out

    def _popen_driver(self, script, env, stdin, stderr):
        path = os.path.join(self._tmp, f"driver{next(_counter)}.py")
        with open(path, "w") as f:
            f.write(script)
        proc = subprocess.Popen(["ip", "netns", "exec", self.ns_a, sys.executable, path], stdin=stdin,
                                stdout=subprocess.PIPE, stderr=stderr, text=True,
                                env=self._env({"RAY_ADDRESS": self.address, **(env or {})}))
        self._remember_pids()
        return proc

    # ---------------------------------------------------------------- killing
    def kill_node_b(self, timeout=15.0):
        """Take node B away abruptly: SIGKILL to every process of namespace B (raylet,
        workers, agents), as if its machine had lost power. Returns their pids.

        Parameters
        ----------
        timeout : float
            Seconds to wait for them to be gone (RuntimeError if some are not).
        """
        return self._kill_namespace("b", grace=0.0, timeout=timeout)

    def _kill_namespace(self, which, grace, timeout):
        """SIGTERM (when ``grace`` > 0, then wait up to ``grace`` s) and SIGKILL every process
        of the namespaces ``which`` until none is left; return the pids killed."""
        killed = set()
        if grace > 0:
            killed |= self._signal(self.pids(which), signal.SIGTERM)
            self._wait_empty(which, grace)
        deadline = time.monotonic() + timeout
        # Repeated: a raylet may fork a worker between listing and killing.
        while True:
            left = self.pids(which)
            if not left:
                return sorted(killed)
            killed |= self._signal(left, signal.SIGKILL)
            if self._wait_empty(which, min(1.0, max(0.0, deadline - time.monotonic()))):
                return sorted(killed)
            if time.monotonic() > deadline:
                raise RuntimeError(f"processes of namespace(s) {which} survive SIGKILL: {self.pids(which)}")

    @staticmethod
    def _signal(pids, sig):
        sent = set()
        for pid in pids:
            try:
                os.kill(pid, sig)
                sent.add(pid)
            except ProcessLookupError:
                pass
        return sent

    def _wait_empty(self, which, timeout):
        """True once no process is left in the namespaces ``which`` (polled: there is no
        event for "the last process of a namespace ended")."""
        deadline = time.monotonic() + timeout
        while self.pids(which):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def _wait_seen_gone(self, timeout):
        """The pids of this cluster's processes still running after up to ``timeout`` s.

        A killed process leaves its network namespace before it has finished exiting (the
        kernel drops the namespaces before closing its files and turning it into a zombie),
        so an empty namespace does not yet mean every process is gone; on a loaded machine
        that last stretch was seen to take seconds. Polled: there is no event to wait on for
        processes that are not our children.
        """
        deadline = time.monotonic() + timeout
        while True:
            # By pid and start time, so that a pid reused by someone else's process is not ours.
            alive = [pid for pid, start in self._seen.items() if start is not None and _start_time(pid) == start]
            if not alive or time.monotonic() >= deadline:
                return alive
            time.sleep(0.05)

    # --------------------------------------------------------------- teardown
    def _teardown(self):
        errors = []
        try:
            if self._made:
                self._remember_pids()
                # SIGKILL at once, as ``ray stop --force`` does: raylet and GCS take seconds to
                # drain on SIGTERM, and what they would clean up is in our temp dir anyway.
                self._kill_namespace("ab", grace=0.0, timeout=30.0)
        except Exception as exc:  # the namespaces and the temp dir go all the same
            errors.append(str(exc))
        alive = self._wait_seen_gone(timeout=30.0)
        if alive:
            errors.append(f"Ray processes of the cluster still running: {sorted(alive)}")
        for ns in reversed(self._made):
            proc = _run(["ip", "netns", "del", ns], check=False)
            if proc.returncode != 0:
                errors.append(f"ip netns del {ns}: {proc.stderr.strip()}")
        self._made = []
        for etc in self._etc:
            shutil.rmtree(etc, ignore_errors=True)
        self._etc = []
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None
        if errors:
            raise RuntimeError("; ".join(errors))


def _start_time(pid):
    """Start time (clock ticks since boot) of the running process ``pid``; None once it has
    ended (a zombie has ended: only its parent has not collected it yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # Fields after the command name: state is the 1st, starttime the 20th.
    return None if fields[0] in ("Z", "X") else int(fields[19])
