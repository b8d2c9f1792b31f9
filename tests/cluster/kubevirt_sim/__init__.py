# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parts of the KubeVirt simulator (tests/cluster/simulator.py is the entry point).

    kube.py         a small JSON REST client on top of the kubernetes client's kubeconfig handling
    informer.py     list+watch caches (informers) and a work queue, as client-go has them
    constants.py    KubeVirt's label, annotation and finalizer names, and the simulator's own knobs
    launcher.py     virt-launcher pod rendering (virt-controller's template service)
    controllers.py  the VM, VMI, migration and evacuation controllers (virt-controller + virt-handler)
    webhook.py      the admission webhooks (virt-api): migration create, launcher eviction
"""
