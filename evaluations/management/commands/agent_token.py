"""Write an agent token for the agent that `make run` starts beside the hub.

    python manage.py agent_token [--user local-agent] [--file VAR_DIR/agent.token]

The token (scope `agent` only) belongs to the user `--user`, created without a password when
missing, and is written to `--file` (mode 600), whose path is printed. The user is an operator
(staff), so that the local agent can put its host in the shared pool (`mlms agent --pool`) and
run every user's jobs; it cannot sign in. A file that holds an
active agent token already is kept as it is, so that restarting the hub keeps the agent's
token; otherwise a new token is issued.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from rest_framework.exceptions import AuthenticationFailed

from hub.authentication import authenticate_token
from hub.models import ApiToken


class Command(BaseCommand):
    help = "Write an agent token for the local agent to a file and print the file's path."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--user", default="local-agent", help="the agent's user")
        parser.add_argument(
            "--file",
            type=Path,
            default=None,
            help="where to write the token (default: MLMS_VAR_DIR/agent.token)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path: Path = options["file"] or Path(settings.VAR_DIR) / "agent.token"
        username = options["user"]
        User = get_user_model()
        user, created = User.objects.get_or_create(username=username)
        if created:
            user.set_unusable_password()
        if created or not user.is_staff:
            user.is_staff = True
            user.save()
        if self._current(path, username):
            self.stdout.write(str(path))
            return
        _token, raw = ApiToken.issue(user, name="local agent", scopes=["agent"])
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                handle.write(raw + "\n")
            path.chmod(0o600)
        except OSError as exc:
            raise CommandError(f"--file: cannot write {path}: {exc}") from None
        self.stderr.write(f"agent token for {username} written to {path}")
        self.stdout.write(str(path))

    def _current(self, path: Path, username: str) -> bool:
        try:
            raw = path.read_text(encoding="utf-8").strip()
        except OSError:
            return False
        try:
            token = authenticate_token(raw)
        except AuthenticationFailed:
            return False
        return token.user.get_username() == username and "agent" in token.scopes
