"""Removing the kubelet's chains: the jumps into them go first, then their rules, then the chains."""

from __future__ import annotations

from warmstart.localcluster import iptables

FILTER = """-P INPUT ACCEPT
-P FORWARD ACCEPT
-P OUTPUT ACCEPT
-N KUBE-FIREWALL
-N KUBE-KUBELET-CANARY
-N MINE
-A INPUT -j KUBE-FIREWALL
-A INPUT -s 10.0.0.0/8 -j MINE
-A OUTPUT -j KUBE-FIREWALL
-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming localnet connections" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP
"""  # noqa: E501 - iptables-save output, verbatim


def test_parse_finds_chains_and_rules_with_quoted_comments() -> None:
    listing = iptables.parse(FILTER)
    assert listing.chains == ("KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "MINE")
    assert len(listing.rules) == 4
    assert "block incoming localnet connections" in listing.rules[3]
    assert iptables.jump_target(listing.rules[3]) == "DROP"


def test_removal_deletes_jumps_then_flushes_then_deletes_and_leaves_other_chains() -> None:
    commands = iptables.removal_commands(iptables.parse(FILTER), ["KUBE-FIREWALL", "KUBE-KUBELET-CANARY"])
    assert commands == [
        ["-D", "INPUT", "-j", "KUBE-FIREWALL"],
        ["-D", "OUTPUT", "-j", "KUBE-FIREWALL"],
        ["-F", "KUBE-FIREWALL"],
        ["-F", "KUBE-KUBELET-CANARY"],
        ["-X", "KUBE-FIREWALL"],
        ["-X", "KUBE-KUBELET-CANARY"],
    ]


def test_absent_chains_produce_no_commands() -> None:
    assert iptables.removal_commands(iptables.parse(FILTER), ["KUBE-SERVICES"]) == []
