from django.urls import path

from frontend import views

urlpatterns = [
    path("", views.catalog, name="home"),
    path("models/<str:name>/", views.model, name="model"),
    path("datasets/<str:name>/", views.dataset, name="dataset"),
    path("upload/", views.upload, name="upload"),
    path("tokens/", views.tokens, name="tokens"),
]
