"""The registry's API under /api/v1/."""

from django.urls import path

from hub.api import artifacts, folders, groups, hosts, manifests, resolve, schema, tokens

urlpatterns = [
    path("manifests/", manifests.ManifestList.as_view(), name="api-manifest-list"),
    path("manifests/<int:pk>/", manifests.ManifestDetail.as_view(), name="api-manifest-detail"),
    path(
        "manifests/<int:pk>/shares/",
        groups.ManifestShares.as_view(),
        name="api-manifest-shares",
    ),
    path(
        "manifests/<int:pk>/shares/<str:group>/",
        groups.ManifestShare.as_view(),
        name="api-manifest-share",
    ),
    path("groups/", groups.GroupList.as_view(), name="api-group-list"),
    path("groups/<str:name>/", groups.GroupDetail.as_view(), name="api-group-detail"),
    path(
        "groups/<str:name>/invitations/",
        groups.GroupInvitations.as_view(),
        name="api-group-invitations",
    ),
    path(
        "groups/<str:name>/invitations/<str:username>/",
        groups.GroupInvitationDetail.as_view(),
        name="api-group-invitation",
    ),
    path(
        "groups/<str:name>/membership/",
        groups.GroupMembership.as_view(),
        name="api-group-membership",
    ),
    path(
        "groups/<str:name>/members/<str:username>/",
        groups.GroupMember.as_view(),
        name="api-group-member",
    ),
    path("invitations/", groups.InvitationList.as_view(), name="api-invitation-list"),
    path(
        "invitations/<str:group>/",
        groups.InvitationDetail.as_view(),
        name="api-invitation-detail",
    ),
    path(
        "invitations/<str:group>/accept/",
        groups.InvitationAccept.as_view(),
        name="api-invitation-accept",
    ),
    path("datasets/", manifests.DatasetList.as_view(), name="api-dataset-list"),
    path(
        "datasets/from-folder/",
        folders.DatasetFromFolder.as_view(),
        name="api-dataset-from-folder",
    ),
    path("datasets/<int:pk>/", manifests.DatasetDetail.as_view(), name="api-dataset-detail"),
    path("hosts/", hosts.HostList.as_view(), name="api-host-list"),
    path("hosts/<int:pk>/", hosts.HostDetail.as_view(), name="api-host-detail"),
    path("hosts/<int:pk>/heartbeat/", hosts.HostHeartbeat.as_view(), name="api-host-heartbeat"),
    path("tokens/", tokens.TokenList.as_view(), name="api-token-list"),
    path("tokens/<int:pk>/", tokens.TokenDetail.as_view(), name="api-token-detail"),
    path("resolve/", resolve.Resolve.as_view(), name="api-resolve"),
    path("artifacts/<path:path>", artifacts.ArtifactDownload.as_view(), name="api-artifact"),
    path("schema/manifest.json", schema.ManifestSchema.as_view(), name="api-manifest-schema"),
]
