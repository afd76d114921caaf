"""The hub's settings for the test suite: production settings with a fast password hasher."""

from mlmodelscope.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
