"""Listing the host's iptables chains and removing chains (with every rule that jumps to them), IPv4 and IPv6.

The kubelet leaves KUBE-FIREWALL (with jumps from INPUT and OUTPUT), KUBE-KUBELET-CANARY and
KUBE-IPTABLES-HINT behind; kube-proxy ``--cleanup`` removes its own chains, and this sweeps what
any of them left. Parsing ``iptables -S`` is pure; running the commands is not.
"""

from __future__ import annotations

import dataclasses
import shlex
import shutil
import subprocess
from collections.abc import Iterable

#: The tables the kubelet, kube-proxy and the CNI plugins write to.
TABLES = ("filter", "nat", "mangle")
FAMILIES = ("iptables", "ip6tables")


@dataclasses.dataclass(frozen=True)
class Listing:
    """What ``iptables -t <table> -S`` says: user-defined chains and every rule (as argument lists)."""

    chains: tuple[str, ...]
    rules: tuple[tuple[str, ...], ...]
    """Each rule as ``-A CHAIN ...`` arguments."""


def parse(text: str) -> Listing:
    chains: list[str] = []
    rules: list[tuple[str, ...]] = []
    for line in text.splitlines():
        words = shlex.split(line)
        if len(words) >= 2 and words[0] == "-N":
            chains.append(words[1])
        elif len(words) >= 2 and words[0] == "-A":
            rules.append(tuple(words))
    return Listing(tuple(chains), tuple(rules))


def jump_target(rule: tuple[str, ...]) -> str | None:
    """The chain a rule jumps (``-j``) or goes (``-g``) to, if any."""
    for flag in ("-j", "-g"):
        if flag in rule[:-1]:
            return rule[rule.index(flag) + 1]
    return None


def removal_commands(listing: Listing, doomed: Iterable[str]) -> list[list[str]]:
    """The argument lists (after ``iptables -t TABLE``) that delete ``doomed`` chains: first every rule that
    jumps to one of them, then their own rules (``-F``), then the chains (``-X``)."""
    wanted = [chain for chain in listing.chains if chain in set(doomed)]
    commands = [["-D", *rule[1:]] for rule in listing.rules if jump_target(rule) in wanted and rule[1] not in wanted]
    commands += [["-F", chain] for chain in wanted]
    commands += [["-X", chain] for chain in wanted]
    return commands


def available(family: str) -> bool:
    return shutil.which(family) is not None


def listing(family: str, table: str) -> Listing:
    done = subprocess.run([family, "-w", "-t", table, "-S"], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return Listing((), ())  # table not present in this family
    return parse(done.stdout)


def chains(family: str, table: str) -> tuple[str, ...]:
    return listing(family, table).chains


def remove_chains(family: str, table: str, doomed: Iterable[str]) -> list[str]:
    """Delete ``doomed`` chains of ``table`` that exist; return the errors (empty when all went)."""
    errors: list[str] = []
    for command in removal_commands(listing(family, table), doomed):
        done = subprocess.run([family, "-w", "-t", table, *command], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            errors.append(f"{family} -t {table} {' '.join(command)}: {done.stderr.strip()}")
    return errors
