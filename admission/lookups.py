"""What a review reads from the API server, in one place: the composition root makes them over
the one client the webhook process has (the settings' kubeconfig, the bridge's transport);
a test passes its own."""

from dataclasses import dataclass

from lightkube import AsyncClient

from admission.dra import ExtendedResources, kube_extended_resources
from admission.groups import MemberLister, kube_member_lister
from admission.owners import OwnerReader, kube_owner_reader
from admission.scope import NamespaceLabels, kube_namespace_labels


@dataclass(frozen=True, slots=True)
class Lookups:
    namespace_labels: NamespaceLabels
    """A namespace's labels (the webhook keeps them ``namespace_cache_ttl_seconds``)."""
    owners: OwnerReader
    """What sizes a pod's group (its Job, PodGroup, JobSet), and the DRA claims it names."""
    members: MemberLister
    """A group's live members, which a new member is weighed against."""
    extended_resources: ExtendedResources
    """Which DeviceClass stands for an extended resource."""

    @classmethod
    def through(cls, client: AsyncClient) -> "Lookups":
        return cls(kube_namespace_labels(client), kube_owner_reader(client),
                   kube_member_lister(client), kube_extended_resources(client))
