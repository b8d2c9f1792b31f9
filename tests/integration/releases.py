"""What the roles are expected to choose for each Kubernetes minor the local control plane runs, written out
here rather than read from plugins/module_utils/versions.py (the table under test)."""

# The descheduler release per minor: 1.37 has none yet, so the release one minor behind (with a warning).
DESCHEDULER = {34: "v0.34.0", 35: "v0.35.1", 36: "v0.36.0", 37: "v0.36.0"}
