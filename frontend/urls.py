from django.urls import path

from frontend.views import catalog, evaluations, manifests, tokens

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
    path("tokens/", tokens.tokens, name="tokens"),
]
