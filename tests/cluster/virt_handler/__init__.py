# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A simulated virt-handler: KubeVirt's node agent, the one part of KubeVirt that cannot run here."""
