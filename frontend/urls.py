from django.urls import path

from frontend import views

urlpatterns = [
    path("", views.home, name="home"),
    path("tokens/", views.tokens, name="tokens"),
]
