#!/usr/bin/env bash
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# The demo's steps on the local control plane, one sequence for `make demo` (the checkout's playbooks) and
# `make release-check` (the installed collection's): demo VMs, site.yml, the secondary scheduler binding a new VM,
# a targeted migration, an evacuation with its drain plan, a rebalance plan and its run, and the report.
# tests/demo/test_demo_output.py asserts on what it prints.
#
# Set by the Makefile (the working directory and the environment, KUBECONFIG and the collections path, too):
#   DEMO_ANSIBLE_PLAYBOOK   the ansible-playbook to run
#   DEMO_PLAYBOOKS          a playbook's path or name, {} standing for its name: playbooks/{}.yml, vmsched.kubevirt.{}
#   DEMO_CLUSTER            the command that runs tests/cluster/cluster.py (its scheduler-up and scheduler-down)
#   DEMO_NAMESPACE          the namespace of the demo VMs
#   DEMO_SITE_VARS          site.yml's variables (namespaces and names of its own, offline image references)
#   DEMO_SCHEDULER          the secondary scheduler site.yml deploys, as <namespace>/<name>
#   DEMO_TARGET_NODE        the node demo-vm-01 moves to, then the node evacuated
#   DEMO_EVACUATION_TARGET  where the evacuated VMs go
#   SITE_ARGS               more arguments for site.yml's first run (make demo SITE_ARGS=...)
set -euo pipefail

# Each step with the seconds since the demo began.
say() { printf '\n==> %s [%ds]\n' "$*" "$SECONDS"; }
cluster() {
    # shellcheck disable=SC2086  # a command and its arguments
    $DEMO_CLUSTER "$@"
}
play() {
    local name=$1
    shift
    "$DEMO_ANSIBLE_PLAYBOOK" "${DEMO_PLAYBOOKS//\{\}/$name}" "$@"
}

scheduler_namespace=${DEMO_SCHEDULER%%/*}
scheduler_name=${DEMO_SCHEDULER#*/}
# Word splitting wanted: lists of ansible-playbook arguments.
# shellcheck disable=SC2206
site_vars=($DEMO_SITE_VARS)
# shellcheck disable=SC2206
site_args=(${SITE_ARGS:-})
evacuate_vars=(-e "evacuate_node_name=$DEMO_TARGET_NODE" -e evacuate_node_cordon=false
    -e "evacuate_node_target_nodes=$DEMO_EVACUATION_TARGET" -e evacuate_node_wait_timeout=120
    -e "evacuate_node_namespace=$DEMO_NAMESPACE")
# The demo VMs only; no cooldown: the evacuation just moved them.
rebalance_vars=(-e "rebalance_namespaces=$DEMO_NAMESPACE" -e rebalance_cooldown=0 -e rebalance_wait_timeout=120)

# KWOK runs no container: the scheduler's Deployment is Running and binds nothing. The control plane's own
# kube-scheduler binary runs in its place, with what the role deployed, until the demo ends. A cluster that ran the
# demo before has the VM defaults already: the demo VMs get the secondary scheduler at once, and it must run now.
trap 'cluster scheduler-down' EXIT
cluster scheduler-up "$scheduler_namespace" "$scheduler_name" --if-deployed

say "demo VMs in namespace $DEMO_NAMESPACE of the local control plane (made anew: each demo starts the same)"
play demo_vms -e "demo_vms_namespace=$DEMO_NAMESPACE" -e demo_vms_state=fresh

say "site.yml: images -> secondary scheduler -> VM defaults -> descheduler -> VM opt-in -> report"
play site "${site_vars[@]}" -e "site_vms_namespace=$DEMO_NAMESPACE" "${site_args[@]}"

if [[ " ${site_args[*]} " == *" --check "* || " ${site_args[*]} " == *" -C "* ]]; then
    say "site.yml ran in check mode: it installed no scheduler to bind a new VM; leaving that step out"
else
    say "the secondary scheduler at work: kube-scheduler with $DEMO_SCHEDULER's configuration, as its ServiceAccount"
    cluster scheduler-up "$scheduler_namespace" "$scheduler_name"
    say "a new VM, demo-vm-05: the VM defaults policy gives it $scheduler_name, which binds its launcher pod"
    play demo_vms -e "demo_vms_namespace=$DEMO_NAMESPACE" -e demo_vms_count=5 \
        -e "demo_vms_expect_scheduler=$scheduler_name"
fi

say "migrate_vm.yml: $DEMO_NAMESPACE/demo-vm-01 to $DEMO_TARGET_NODE"
play migrate_vm -e "migrate_vm_namespace=$DEMO_NAMESPACE" -e migrate_vm_name=demo-vm-01 \
    -e "migrate_vm_target_node=$DEMO_TARGET_NODE" -e migrate_vm_wait_timeout=120

say "evacuate_node.yml: the demo VMs on $DEMO_TARGET_NODE to $DEMO_EVACUATION_TARGET"
play evacuate_node "${evacuate_vars[@]}"

say "rebalance.yml: a plan that evens out the VMs per node in check mode (what an approver reads) and then a run"
play rebalance --check "${rebalance_vars[@]}"
play rebalance "${rebalance_vars[@]}"

say "the report after the migration and the evacuation and the rebalance"
play site "${site_vars[@]}" -e site_image=false -e site_scheduler=false -e site_vm_defaults=false \
    -e site_descheduler=false -e site_vms=false
