"""WebSocket routes of the evaluations app (mounted by mlmodelscope.asgi)."""

from django.urls import path

from evaluations import consumers

websocket_urlpatterns = [
    path("ws/evaluations/", consumers.EvaluationListConsumer.as_asgi()),
    path("ws/evaluations/<uuid:pk>/", consumers.EvaluationConsumer.as_asgi()),
]
