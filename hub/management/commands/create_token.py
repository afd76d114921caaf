"""Create an API token for a user and print it alone on the last line."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from hub.models import SCOPES, ApiToken


class Command(BaseCommand):
    help = "Create an API token. The token is printed alone on the last line, and only once."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--user", required=True, help="user name")
        parser.add_argument(
            "--scopes", default="read", help=f"comma-separated, from: {', '.join(SCOPES)}"
        )
        parser.add_argument("--name", default="cli", help="a name to tell the token apart")
        parser.add_argument(
            "--expires-in", type=int, default=None, metavar="DAYS", help="days until it expires"
        )
        parser.add_argument(
            "--create-user", action="store_true", help="create the user if it does not exist"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        scopes = [s.strip() for s in options["scopes"].split(",") if s.strip()]
        unknown = sorted(set(scopes) - set(SCOPES))
        if not scopes or unknown:
            raise CommandError(
                f"--scopes: unknown scope(s) {', '.join(unknown) or '(none given)'}; use {', '.join(SCOPES)}"
            )
        days = options["expires_in"]
        if days is not None and not 1 <= days <= 3650:
            raise CommandError("--expires-in: must be between 1 and 3650 days")
        name = options["name"].strip()
        if not name or len(name) > 100:
            raise CommandError("--name: must be 1 to 100 characters long")
        User = get_user_model()
        username = options["user"].strip()
        max_length = User._meta.get_field(User.USERNAME_FIELD).max_length or 150
        if not username or len(username) > max_length or "\x00" in username:
            raise CommandError(f"--user: must be a user name of 1 to {max_length} characters")
        user = User.objects.filter(username=username).first()
        if user is None:
            if not options["create_user"]:
                raise CommandError(
                    f"--user: no user named '{username}' (add --create-user to create one)"
                )
            user = User.objects.create_user(username=username)
            self.stderr.write(
                f"created user {username} (no password; sign in by setting one with changepassword)"
            )
        token, raw = ApiToken.issue(user, name=name, scopes=scopes, expires_in_days=days)
        expiry = f", expires {token.expires_at:%Y-%m-%d}" if token.expires_at else ""
        self.stderr.write(
            f"token '{token.name}' for {username}, scopes {', '.join(token.scopes)}{expiry}:"
        )
        self.stdout.write(raw)
