import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def invitations(apps, schema_editor):
    """Nobody joined a group by saying yes before invitations existed: every membership but
    the owner's becomes an invitation from the owner, which its member accepts or declines."""
    GroupProfile = apps.get_model("hub", "GroupProfile")
    GroupInvitation = apps.get_model("hub", "GroupInvitation")
    for profile in GroupProfile.objects.select_related("group"):
        group = profile.group
        for member in group.user_set.exclude(pk=profile.owner_id):
            GroupInvitation.objects.get_or_create(
                group=group, invitee=member, defaults={"invited_by_id": profile.owner_id}
            )
            group.user_set.remove(member)


def memberships(apps, schema_editor):
    """Back: every invitation becomes the membership it was."""
    GroupInvitation = apps.get_model("hub", "GroupInvitation")
    for invitation in GroupInvitation.objects.select_related("group", "invitee"):
        invitation.group.user_set.add(invitation.invitee)


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("hub", "0004_containerimage_host_images_and_more"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="host",
            name="agent_instance",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
        migrations.CreateModel(
            name="GroupInvitation",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "group",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="invitations",
                        to="auth.group",
                    ),
                ),
                (
                    "invited_by",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "invitee",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="group_invitations",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at", "-id"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("group", "invitee"), name="one_invitation_per_member"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="GroupTrust",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "group",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="trusts",
                        to="auth.group",
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="group_trusts",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(fields=("group", "user"), name="one_trust_per_member")
                ]
            },
        ),
        migrations.RunPython(invitations, memberships),
    ]
