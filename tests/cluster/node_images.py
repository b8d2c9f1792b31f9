# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a node's kubelet reports in `status.images`: the images its runtime holds, largest first, cut at
`nodeStatusMaxImages`.

The kubelet's way (Kubernetes v1.36.3 and v1.37.2 alike):
- pkg/kubelet/nodestatus/setters.go `Images()`: the image list comes sorted, is cut to the first
  `nodeStatusMaxImages` entries unless that is -1, and each entry's names are its repo digests, then its repo
  tags, at most 5 (`MaxNamesPerImageInNodeStatus`);
- pkg/kubelet/util/sliceutils/sliceutils.go `ByImageSize`: by size, largest first; equal sizes by image ID,
  descending;
- pkg/kubelet/apis/config/v1beta1/defaults.go: `nodeStatusMaxImages` defaults to 50.

Sizes are bytes as the CRI's ImageStatus reports them: uncompressed with CRI-O and Docker; containerd reports the
compressed size (containerd/containerd#9261, kubernetes/kubernetes#120698), which shrinks every figure here alike.

Shared by tests/cluster/cluster.py (the fixture nodes of every test) and bench/balance.py.
"""
from __future__ import annotations

import hashlib

MB = 1_000_000
MAX_NAMES_PER_IMAGE = 5
DEFAULT_MAX_IMAGES = 50

# quay.io/kubevirt/virt-launcher as a kubelet reported it: 457,875,233 bytes for v1.3.0 on a Docker runtime
# (uncompressed), in the `status.images` of a NodeList captured 2024-08-09 from a minikube node (kubelet v1.30.0,
# docker://26.1.1) and kept as test data in a public GitHub repository. No published figure for v1.9.0 was found
# (bench/REPORT.md says where we looked); this is the newest one, used for the launcher of every version. The same
# NodeList gives the sizes of the other images below (KubeVirt v1.3.0 and Kubernetes v1.30.0 builds, stand-ins).
LAUNCHER_SIZE = 457_875_233
VIRT_HANDLER_SIZE = 269_115_148
SYSTEM_IMAGES = (
    ("registry.k8s.io/kube-proxy:v1.30.0", 84_675_401),
    ("registry.k8s.io/coredns/coredns:v1.11.1", 59_820_619),
    ("gcr.io/k8s-minikube/storage-provisioner:v5", 31_465_472),
    ("registry.k8s.io/pause:3.9", 743_952),
)


def launcher_reference(kubevirt_version, registry="quay.io/kubevirt"):
    return f"{registry}/virt-launcher:{kubevirt_version}"


def digest_of(reference):
    """The repo digest KWOK's pod stage reports for a reference (tests/cluster/cluster.py IMAGE_ID_LINE): the
    reference without its tag, @sha256 of the whole reference."""
    repository = reference.rsplit(":", 1)[0] if reference.rfind(":") > reference.rfind("/") else reference
    return f"{repository}@sha256:{hashlib.sha256(reference.encode()).hexdigest()}"


def held(reference, size):
    """One image in a node's runtime, as the kubelet's image manager lists it."""
    return {"id": "sha256:" + hashlib.sha256(b"config:" + reference.encode()).hexdigest(), "size": int(size),
            "repoDigests": [digest_of(reference)], "repoTags": [reference]}


def kubevirt_images(kubevirt_version, launcher_size=LAUNCHER_SIZE):
    """What every KubeVirt node holds: virt-handler, and the launcher (virt-handler's pod runs it too, so it is on
    every node virt-handler runs on: seed 004)."""
    return [held(f"quay.io/kubevirt/virt-handler:{kubevirt_version}", VIRT_HANDLER_SIZE),
            held(launcher_reference(kubevirt_version), launcher_size)]


def system_images():
    return [held(reference, size) for reference, size in SYSTEM_IMAGES]


def spread_sizes(count, low_mb, high_mb):
    """`count` sizes spread geometrically from low_mb to high_mb (in bytes), smallest first."""
    if count == 1:
        return [int(low_mb * MB)]
    ratio = (high_mb / low_mb) ** (1 / (count - 1))
    return [int(low_mb * ratio ** k * MB) for k in range(count)]


def workload_images(name, groups):
    """A workload profile's images: per group `count` images of sizes spread between its `mb` bounds."""
    images = []
    for index, group in enumerate(groups):
        for k, size in enumerate(spread_sizes(group["count"], *group["mb"])):
            images.append(held(f"registry.example/{name}/app-{index}-{k:03d}:v1", size))
    return images


def kubelet_image_list(images, max_images=DEFAULT_MAX_IMAGES):
    """`status.images` from the images a node holds: largest first (equal sizes: ID descending), cut at
    max_images unless it is -1, names = repo digests then repo tags, at most 5."""
    ordered = sorted(images, key=lambda i: i["id"], reverse=True)
    ordered.sort(key=lambda i: i["size"], reverse=True)   # stable: equal sizes keep ID order
    if -1 < max_images < len(ordered):
        ordered = ordered[:max_images]
    return [{"names": (list(i["repoDigests"]) + list(i["repoTags"]))[:MAX_NAMES_PER_IMAGE], "sizeBytes": i["size"]}
            for i in ordered]


def lists(status_images, reference):
    """Whether a status.images list names the reference."""
    return any(reference in (entry.get("names") or []) for entry in status_images)
