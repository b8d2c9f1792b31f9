# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tests/cluster/node_images.py: status.images built the kubelet's way, and the fixture nodes built from it."""
from __future__ import annotations

import sys
from pathlib import Path

import yaml

CLUSTER = Path(__file__).resolve().parents[1] / "cluster"
sys.path.insert(0, str(CLUSTER))
import node_images  # noqa: E402  pylint: disable=wrong-import-position

LAUNCHER = "quay.io/kubevirt/virt-launcher:v1.9.0"


def image(name, size, image_id):
    return {"id": image_id, "size": size, "repoDigests": [f"{name}@sha256:{image_id[-4:]}"], "repoTags": [f"{name}:v1"]}


def test_largest_first_equal_sizes_by_id_descending_and_cut_at_the_cap():
    held = [image("small", 10, "sha256:0003"), image("big", 900, "sha256:0001"), image("tie-a", 500, "sha256:0002"),
            image("tie-b", 500, "sha256:0009"), image("mid", 700, "sha256:0004")]
    listed = node_images.kubelet_image_list(held, max_images=3)
    assert [entry["sizeBytes"] for entry in listed] == [900, 700, 500]
    assert listed[2]["names"] == ["tie-b@sha256:0009", "tie-b:v1"]   # repo digests, then repo tags
    everything = node_images.kubelet_image_list(held, max_images=-1)
    assert [e["names"][1] for e in everything] == ["big:v1", "mid:v1", "tie-b:v1", "tie-a:v1", "small:v1"]
    assert node_images.kubelet_image_list(held, max_images=0) == []


def test_names_are_capped_at_five():
    many = dict(image("x", 1, "sha256:1"), repoDigests=[f"x@sha256:{k}" for k in range(4)], repoTags=["x:a", "x:b"])
    assert node_images.kubelet_image_list([many])[0]["names"] == [f"x@sha256:{k}" for k in range(4)] + ["x:a"]


def test_the_launcher_is_listed_only_while_fewer_than_50_images_are_larger():
    base = node_images.system_images() + node_images.kubevirt_images("v1.9.0")
    larger = [node_images.held(f"registry.example/big-{k}:v1", node_images.LAUNCHER_SIZE + 1 + k) for k in range(49)]
    assert node_images.lists(node_images.kubelet_image_list(base + larger), LAUNCHER)
    one_more = larger + [node_images.held("registry.example/big-x:v1", 10 ** 10)]
    assert not node_images.lists(node_images.kubelet_image_list(base + one_more), LAUNCHER)
    assert node_images.lists(node_images.kubelet_image_list(base + one_more, max_images=-1), LAUNCHER)


def test_launcher_digest_matches_the_image_id_kwok_reports():
    """cluster.py's pod stage reports imageID <repository>@sha256:<sha256 of the reference>."""
    assert node_images.digest_of(LAUNCHER) == (
        "quay.io/kubevirt/virt-launcher@sha256:34bc7d2fbb98003cb57e73b5520a52cd4c839e2a3b48e41dc45a984f088abab2")
    assert node_images.digest_of("registry:5000/a").startswith("registry:5000/a@sha256:")


def test_spread_sizes_cover_the_range():
    sizes = node_images.spread_sizes(5, 20, 320)
    assert sizes[0] == 20 * node_images.MB and sizes[-1] == 320 * node_images.MB
    assert sizes == sorted(sizes) and len(set(sizes)) == 5


def test_fixture_workloads_give_what_nodes_yaml_says():
    """The default nodes' workloads put the launcher in or out of the 50 as `virt_launcher_image` says."""
    fixture = yaml.safe_load((CLUSTER / "nodes.yaml").read_text())
    for spec in fixture["nodes"]:
        held = (node_images.system_images() + node_images.kubevirt_images("v1.9.0")
                + node_images.workload_images(spec["workload"], fixture["workloads"][spec["workload"]]))
        listed = node_images.kubelet_image_list(held, fixture["defaults"]["node_status_max_images"])
        assert len(listed) == 50 < len(held), spec["name"]
        assert node_images.lists(listed, LAUNCHER) is spec["virt_launcher_image"], spec["name"]
