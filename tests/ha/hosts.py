"""Test hosts: network namespaces joined to this one by veth pairs.

Each :class:`Host` is a network namespace with its own loopback and one veth
link to the root namespace, where the database listens on the link's root-side
address. A worker started in a host (``ip netns exec``) reaches PostgreSQL only
over that link, so a partition is an nftables rule in the host's namespace that
drops its packets (``cut``: both ways, or only what comes in: a one-way link),
and healing deletes the rule. The kernel here has no ``netem`` (``tc qdisc add ...
netem`` fails), so delay and loss are not simulated this way; the fault proxy's
tests (tests/faults/test_fault_network.py) cover a slow link.

Addresses are the project's own: 10.231.0.0/16 is carved into one /30 per host,
offset by this process's id so two test runs on one machine do not collide.
Everything made is removed by :meth:`Host.remove` (and by the fixture after a
failure); nothing outside the namespaces is changed but the veth ends.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["NETWORK", "Host", "hosts_unavailable", "make_hosts"]

NETWORK = ipaddress.ip_network("10.231.0.0/16")
_TABLE = "stint_partition"
_REMOVE_TABLE = "delete table inet stint_partition"  # nft's words, not SQL


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {done.stderr.strip()}")


def hosts_unavailable() -> str | None:
    """Why network-namespace hosts cannot be made here (None when they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root (CI runs as root)"
    missing = [tool for tool in ("ip", "nft") if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} not found: install iproute2 and nftables"
    return None


@dataclass(frozen=True)
class Host:
    """One namespace: ``address`` is its end of the link, ``gateway`` the root's."""

    name: str
    veth: str
    address: str
    gateway: str

    @property
    def peer(self) -> str:
        """The link's end inside the namespace."""
        return f"{self.veth}p"

    def exec_prefix(self) -> list[str]:
        """Prefix a command with this to run it in the host (``ip netns exec`` execs it:
        the pid is the command's own)."""
        return ["ip", "netns", "exec", self.name]

    def cut(self, *, inbound_only: bool = False) -> None:
        """Drop the host's packets on its link (loopback inside it keeps working)."""
        self._drop(["input"] if inbound_only else ["input", "output"], "")

    def lossy(self, percent: int) -> None:
        """Drop ``percent`` % of the link's packets each way, at random (nftables'
        ``numgen random``: a lossy link without netem)."""
        self._drop(["input", "output"], f"numgen random mod 100 < {percent} ")

    def _drop(self, hooks: list[str], condition: str) -> None:
        script = [f"add table inet {_TABLE}"]
        for hook in hooks:
            script.append(
                f"add chain inet {_TABLE} {hook} "
                f"{{ type filter hook {hook} priority 0; policy accept; }}"
            )
            direction = "iifname" if hook == "input" else "oifname"
            script.append(
                f'add rule inet {_TABLE} {hook} {direction} "{self.peer}" {condition}drop'
            )
        self._nft("\n".join(script))

    def heal(self) -> None:
        """Remove the partition's rules."""
        self._nft(_REMOVE_TABLE)

    def remove(self) -> None:
        """Delete the namespace (its veth end goes with it, and the pair with that)."""
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, check=False)
        subprocess.run(["ip", "link", "del", self.veth], capture_output=True, check=False)

    def _nft(self, script: str) -> None:
        done = subprocess.run(
            [*self.exec_prefix(), "nft", "-f", "-"],
            input=script,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"nft in {self.name} failed: {done.stderr.strip()}")


def make_hosts(count: int) -> list[Host]:
    """``count`` hosts, each with a /30 of its own; removes what it made on failure."""
    pid = os.getpid()
    first = (pid % 1024) * 16  # 16 /30s per process: 1024 processes fill the /16
    made: list[Host] = []
    try:
        for i in range(count):
            base = NETWORK.network_address + 4 * (first + i)
            host = Host(f"stint-{pid}-h{i}", f"st{pid}h{i}", str(base + 2), str(base + 1))
            made.append(host)
            _plumb(host)
    except BaseException:
        remove_hosts(made)
        raise
    return made


def remove_hosts(hosts: Sequence[Host]) -> None:
    for host in hosts:
        host.remove()


def _plumb(host: Host) -> None:
    peer, prefix = host.peer, 30
    _run("ip", "netns", "add", host.name)
    _run("ip", "link", "add", host.veth, "type", "veth", "peer", "name", peer)
    _run("ip", "link", "set", peer, "netns", host.name)
    _run("ip", "addr", "add", f"{host.gateway}/{prefix}", "dev", host.veth)
    _run("ip", "link", "set", host.veth, "up")
    inside = ["ip", "netns", "exec", host.name]
    _run(*inside, "ip", "addr", "add", f"{host.address}/{prefix}", "dev", peer)
    _run(*inside, "ip", "link", "set", peer, "up")
    _run(*inside, "ip", "link", "set", "lo", "up")
