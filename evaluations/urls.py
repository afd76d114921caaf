"""The evaluations API under /api/v1/."""

from django.urls import path, re_path

from evaluations.api import (
    agent_config,
    cancel,
    claim,
    compare,
    diff,
    divergence,
    evaluations,
    images,
    leaderboards,
    predictions,
    progress,
    result,
    sharing,
    status,
    watches,
)

urlpatterns = [
    path("images/", images.ImageList.as_view(), name="api-image-list"),
    re_path(
        rf"^images/(?P<digest>{images.DIGEST})/$",
        images.ImageDetail.as_view(),
        name="api-image-detail",
    ),
    re_path(
        rf"^images/(?P<digest>{images.DIGEST})/diff/(?P<other>{images.DIGEST})/$",
        images.ImageDiff.as_view(),
        name="api-image-diff",
    ),
    path("evaluations/", evaluations.EvaluationList.as_view(), name="api-evaluation-list"),
    path(
        "evaluations/<uuid:pk>/",
        evaluations.EvaluationDetail.as_view(),
        name="api-evaluation-detail",
    ),
    path(
        "evaluations/<uuid:pk>/predictions/",
        predictions.EvaluationPredictions.as_view(),
        name="api-evaluation-predictions",
    ),
    path(
        "evaluations/<uuid:pk>/layers/",
        predictions.EvaluationLayers.as_view(),
        name="api-evaluation-layers",
    ),
    path(
        "evaluations/<uuid:pk>/publish/",
        sharing.EvaluationPublish.as_view(),
        name="api-evaluation-publish",
    ),
    path(
        "evaluations/<uuid:pk>/shares/",
        sharing.EvaluationShares.as_view(),
        name="api-evaluation-shares",
    ),
    path(
        "evaluations/<uuid:pk>/shares/<str:group>/",
        sharing.EvaluationShare.as_view(),
        name="api-evaluation-share",
    ),
    path("compare/", compare.Compare.as_view(), name="api-compare"),
    path("compare/traces/", diff.CompareTraces.as_view(), name="api-compare-traces"),
    path("divergence/", divergence.DivergenceList.as_view(), name="api-divergence-list"),
    path(
        "divergence/<uuid:pk>/",
        divergence.DivergenceDetail.as_view(),
        name="api-divergence-detail",
    ),
    path(
        "evaluations/<uuid:pk>/inputs/<int:index>/",
        compare.EvaluationInput.as_view(),
        name="api-evaluation-input",
    ),
    path("leaderboards/", leaderboards.LeaderboardList.as_view(), name="api-leaderboard-list"),
    path(
        "leaderboards/<str:task>/<str:dataset>/",
        leaderboards.LeaderboardDetail.as_view(),
        name="api-leaderboard",
    ),
    path(
        "evaluations/<uuid:pk>/cancel/",
        cancel.EvaluationCancel.as_view(),
        name="api-evaluation-cancel",
    ),
    # The agents' side.
    path(
        "evaluations/<uuid:pk>/claim/", claim.EvaluationClaim.as_view(), name="api-evaluation-claim"
    ),
    path(
        "evaluations/<uuid:pk>/progress/",
        progress.EvaluationProgress.as_view(),
        name="api-evaluation-progress",
    ),
    path(
        "evaluations/<uuid:pk>/status/",
        status.EvaluationStatus.as_view(),
        name="api-evaluation-status",
    ),
    path(
        "evaluations/<uuid:pk>/result/",
        result.EvaluationResult.as_view(),
        name="api-evaluation-result",
    ),
    path(
        "evaluations/<uuid:pk>/result/predictions/",
        result.EvaluationPredictionsPage.as_view(),
        name="api-evaluation-result-predictions",
    ),
    path("agent/config/", agent_config.AgentConfig.as_view(), name="api-agent-config"),
    path("watches/", watches.WatchList.as_view(), name="api-watch-list"),
    path("watches/<uuid:pk>/", watches.WatchDetail.as_view(), name="api-watch-detail"),
    path("watches/<uuid:pk>/runs/", watches.WatchRuns.as_view(), name="api-watch-runs"),
]
