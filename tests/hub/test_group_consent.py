"""Groups by consent: an invitation, which only the invitee turns into a membership; members
(only) see the group; leaving is always possible; and the memberships of hubs from before
invitations existed become invitations."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps
from django.contrib.auth.models import Group

from hub.models import GroupInvitation, GroupProfile, GroupTrust

pytestmark = pytest.mark.django_db

GROUPS = "/api/v1/groups/"
INVITATIONS = "/api/v1/invitations/"


@pytest.fixture
def clients(make_client, alice, bob, django_user_model):  # type: ignore[no-untyped-def]
    carol = django_user_model.objects.create_user("carol")
    return {
        name: make_client(user) for name, user in (("alice", alice), ("bob", bob), ("carol", carol))
    }


def test_an_invitation_makes_nobody_a_member_until_they_accept(clients) -> None:
    alice, bob = clients["alice"], clients["bob"]
    assert alice.post(GROUPS, {"name": "lab"}, format="json").status_code == 201
    invited = alice.post(f"{GROUPS}lab/invitations/", {"username": "bob"}, format="json")
    assert invited.status_code == 201
    assert invited.json()["accept"] == "/api/v1/invitations/lab/accept/"

    # Bob sees the invitation, not the group: its members stay the members' business.
    assert bob.get(f"{GROUPS}lab/").status_code == 404
    assert bob.get(GROUPS).json()["results"] == []
    mine = bob.get(INVITATIONS).json()["results"]
    assert [(i["group"], i["invited_by"], i["username"]) for i in mine] == [("lab", "alice", "bob")]
    assert not Group.objects.get(name="lab").user_set.filter(username="bob").exists()
    # Only he answers it.
    assert clients["carol"].post(f"{INVITATIONS}lab/accept/").status_code == 404
    assert alice.post(f"{INVITATIONS}lab/accept/").status_code == 404

    joined = bob.post(f"{INVITATIONS}lab/accept/")
    assert joined.status_code == 200
    assert joined.json()["members"] == ["alice", "bob"] and joined.json()["invited"] == []
    assert joined.json()["trust_hosts"] is False


def test_a_declined_or_withdrawn_invitation_leaves_no_trace(clients) -> None:
    alice, bob, carol = clients["alice"], clients["bob"], clients["carol"]
    alice.post(GROUPS, {"name": "lab"}, format="json")
    for who in ("bob", "carol"):
        alice.post(f"{GROUPS}lab/invitations/", {"username": who}, format="json")
    assert [i["username"] for i in alice.get(f"{GROUPS}lab/invitations/").json()["results"]] == [
        "carol",
        "bob",
    ]
    assert alice.get(f"{GROUPS}lab/").json()["invited"] == ["bob", "carol"]

    assert bob.delete(f"{INVITATIONS}lab/").status_code == 204
    assert bob.delete(f"{INVITATIONS}lab/").status_code == 404
    assert bob.post(f"{INVITATIONS}lab/accept/").status_code == 404
    assert (
        carol.delete(f"{GROUPS}lab/invitations/carol/").status_code == 404
    )  # not hers to withdraw
    assert alice.delete(f"{GROUPS}lab/invitations/carol/").status_code == 204
    assert carol.get(INVITATIONS).json()["results"] == []
    assert alice.get(f"{GROUPS}lab/").json()["members"] == ["alice"]
    assert not GroupInvitation.objects.exists()


def test_only_the_owner_invites_and_a_member_always_leaves(clients) -> None:
    alice, bob, carol = clients["alice"], clients["bob"], clients["carol"]
    alice.post(GROUPS, {"name": "lab"}, format="json")
    alice.post(f"{GROUPS}lab/invitations/", {"username": "bob"}, format="json")
    bob.post(f"{INVITATIONS}lab/accept/")
    assert (
        bob.post(f"{GROUPS}lab/invitations/", {"username": "carol"}, format="json").status_code
        == 403
    )
    unknown = alice.post(f"{GROUPS}lab/invitations/", {"username": "nobody"}, format="json")
    assert unknown.status_code == 400 and unknown.json()["errors"][0]["path"] == "username"
    member = alice.post(f"{GROUPS}lab/invitations/", {"username": "bob"}, format="json")
    assert member.status_code == 409
    assert carol.get(f"{GROUPS}lab/invitations/").status_code == 404

    assert bob.patch(f"{GROUPS}lab/membership/", {"trust_hosts": True}, format="json").json() == {
        "trust_hosts": True
    }
    assert bob.delete(f"{GROUPS}lab/members/bob/").status_code == 204
    assert bob.get(f"{GROUPS}lab/").status_code == 404
    assert not GroupTrust.objects.exists()  # a trust does not outlive the membership
    bad = alice.patch(f"{GROUPS}lab/membership/", {"trust_hosts": "maybe"}, format="json")
    assert bad.status_code == 400
    unknown = alice.patch(
        f"{GROUPS}lab/membership/", {"trust_hosts": True, "trust": True}, format="json"
    )
    assert unknown.status_code == 400 and unknown.json()["errors"][0]["path"] == "trust"
    assert alice.get(f"{GROUPS}lab/membership/").json() == {"trust_hosts": False}


def test_memberships_from_before_invitations_become_invitations(
    alice, bob, django_user_model
) -> None:
    carol = django_user_model.objects.create_user("carol")
    lab = Group.objects.create(name="lab")
    GroupProfile.objects.create(group=lab, owner=alice)
    lab.user_set.add(alice, bob, carol)
    migration = importlib.import_module("hub.migrations.0005_group_consent")

    migration.invitations(apps, None)

    assert list(lab.user_set.values_list("username", flat=True)) == ["alice"]
    invited = GroupInvitation.objects.order_by("invitee__username")
    assert [(i.invitee.username, i.invited_by.username) for i in invited] == [
        ("bob", "alice"),
        ("carol", "alice"),
    ]
