from django.urls import path

from frontend.views import (
    catalog,
    compare,
    divergence,
    evaluations,
    groups,
    leaderboards,
    manifests,
    tokens,
    watches,
)

urlpatterns = [
    path("", catalog.catalog, name="home"),
    path("models/<str:name>/", manifests.model, name="model"),
    path("datasets/<str:name>/", manifests.dataset, name="dataset"),
    path("upload/", manifests.upload, name="upload"),
    path("evaluate/", evaluations.launch, name="launch"),
    path("evaluations/", evaluations.evaluations, name="evaluations"),
    path("evaluations/<uuid:pk>/", evaluations.evaluation, name="evaluation"),
    path("evaluations/<uuid:pk>/timeline/", evaluations.timeline, name="evaluation-timeline"),
    path("evaluations/<uuid:pk>/cancel/", evaluations.cancel, name="evaluation-cancel"),
    path("evaluations/<uuid:pk>/publish/", evaluations.publish, name="evaluation-publish"),
    path("evaluations/<uuid:pk>/share/", evaluations.share, name="evaluation-share"),
    path("compare/", compare.compare, name="compare"),
    path("compare/traces/", compare.trace_diff, name="compare-traces"),
    path("divergence/", divergence.launch, name="divergence-launch"),
    path("divergence/<uuid:pk>/", divergence.divergence, name="divergence"),
    path("leaderboards/", leaderboards.index, name="leaderboards"),
    path("leaderboards/<str:task>/<str:dataset>/", leaderboards.board, name="leaderboard"),
    path("groups/", groups.group_list, name="groups"),
    path("groups/<str:name>/", groups.group, name="group"),
    path("tokens/", tokens.tokens, name="tokens"),
    path("watches/<uuid:pk>/", watches.watch, name="watch"),
]
