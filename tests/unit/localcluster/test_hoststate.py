"""What ``down`` treats as the real nodes' leftovers: only new KUBE-*/CNI-* chains, only changed sysctls."""

from __future__ import annotations

import pathlib

from warmstart.localcluster import hoststate


def snapshot(chains: dict[str, list[str]], sysctls: dict[str, str]) -> hoststate.Snapshot:
    return hoststate.Snapshot(sysctls=sysctls, chains=chains, existed=[])


def test_new_chains_are_the_owned_ones_that_appeared() -> None:
    before = snapshot({"iptables/filter": ["KUBE-OLD", "DOCKER"]}, {})
    after = snapshot(
        {
            "iptables/filter": ["KUBE-OLD", "DOCKER", "KUBE-FIREWALL", "OTHER"],
            "ip6tables/mangle": ["KUBE-IPTABLES-HINT"],
        },
        {},
    )
    assert hoststate.new_chains(before, after) == {
        "iptables/filter": ["KUBE-FIREWALL"],
        "ip6tables/mangle": ["KUBE-IPTABLES-HINT"],
    }


def test_changed_sysctls_report_old_and_new_values() -> None:
    before = snapshot({}, {"kernel.panic": "1", "vm.overcommit_memory": "0"})
    after = snapshot({}, {"kernel.panic": "10", "vm.overcommit_memory": "0"})
    assert hoststate.changed_sysctls(before, after) == {"kernel.panic": ("1", "10")}


def test_snapshot_round_trips_through_its_file(tmp_path: pathlib.Path) -> None:
    original = snapshot({"iptables/nat": ["KUBE-X"]}, {"kernel.panic": "1"})
    original.save(tmp_path / "host-state.json")
    assert hoststate.Snapshot.load(tmp_path / "host-state.json") == original
    assert hoststate.Snapshot.load(tmp_path / "absent.json") is None
