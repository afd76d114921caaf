"""Publishing and sharing from the pages, in a real browser: the evaluation page's Publish
button (refused, with the reason, for a private model), an anonymous visitor reading a
published evaluation, and groups: create one, add a member, share an evaluation with it."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from evaluations.models import Evaluation
from hub.models import Manifest
from tests.frontend.test_leaderboards import published_result

pytestmark = pytest.mark.browser


@pytest.fixture
def alice(builtin_manifests, django_user_model):  # type: ignore[no-untyped-def]
    return django_user_model.objects.create_user("alice")


def test_the_owner_publishes_and_an_anonymous_visitor_then_reads_it(  # type: ignore[no-untyped-def]
    page, browser, live_server, alice, sign_in, shoot
) -> None:
    run = published_result(alice, "onnxruntime", 0.98, 0.03, 50_000.0, published=False)
    anonymous = browser.new_page()
    assert anonymous.goto(f"{live_server.url}/evaluations/{run.pk}/").status == 404

    sign_in(page, alice)
    page.goto(f"/evaluations/{run.pk}/")
    expect(page.locator("#publication")).to_contain_text("private")
    # Publishing asks first: declined, nothing changes; accepted, it is published.
    asked: list[str] = []

    def decline(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", decline)
    page.locator("#publish-button").click()
    expect(page.locator("#publication")).to_contain_text("private")
    assert asked and asked[0].startswith("Publish this evaluation? Anyone")
    assert not Evaluation.objects.get(pk=run.pk).published
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("#publish-button").click()
    expect(page.locator("#publication")).to_contain_text("published")
    expect(page.get_by_role("link", name="digits leaderboard")).to_be_visible()
    assert Evaluation.objects.get(pk=run.pk).published
    shoot(page, "evaluation-published")

    assert anonymous.goto(f"{live_server.url}/evaluations/{run.pk}/").status == 200
    expect(anonymous.locator("#publication")).to_contain_text("Anyone can see it")
    expect(anonymous.locator("#publish-button")).to_have_count(0)
    expect(anonymous.locator("#unpublish-button")).to_have_count(0)
    expect(anonymous.locator("#cancel-form")).to_have_count(0)
    anonymous.close()

    page.locator("#unpublish-button").click()
    expect(page.locator("#publication")).to_contain_text("private")
    assert not Evaluation.objects.get(pk=run.pk).published


def test_publishing_an_evaluation_of_a_private_model_is_refused_with_the_reason(  # type: ignore[no-untyped-def]
    page, alice, sign_in
) -> None:
    Manifest.objects.filter(name="digits-cnn", framework="pytorch").update(
        visibility=Manifest.PRIVATE, owner=alice
    )
    run = published_result(alice, "pytorch", 0.98, 0.1, 20_000.0, published=False)
    sign_in(page, alice)
    page.goto(f"/evaluations/{run.pk}/")
    expect(page.locator("#publish-button")).to_be_disabled()
    expect(page.locator("#publish-refusal")).to_contain_text(
        "its model 'digits-cnn' is private: an evaluation of a private model can never be published"
    )


def test_a_group_shares_an_evaluation_with_its_members(  # type: ignore[no-untyped-def]
    page, browser, live_server, alice, sign_in, django_user_model
) -> None:
    bob = django_user_model.objects.create_user("bob")
    run = published_result(alice, "onnxruntime", 0.98, 0.03, 50_000.0, published=False)
    sign_in(page, alice)
    page.goto("/groups/")
    page.fill("#g-name", "Not A Name!")
    page.get_by_role("button", name="Create").click()
    expect(page.locator("#group-error")).to_contain_text("name must be 1 to 64 of a-z")
    page.fill("#g-name", "vision-lab")
    page.get_by_role("button", name="Create").click()
    expect(page.get_by_role("heading", name="vision-lab")).to_be_visible()
    page.fill("#m-username", "nobody")
    page.get_by_role("button", name="Invite").click()
    expect(page.locator("#group-error")).to_contain_text("no user 'nobody'")
    page.fill("#m-username", "bob")
    page.get_by_role("button", name="Invite").click()
    # Invited is not a member: bob joins only when he says yes.
    expect(page.locator('#invited tr[data-invited="bob"]')).to_be_visible()
    expect(page.locator('#members tr[data-member="bob"]')).to_have_count(0)

    bobs = browser.new_context(base_url=live_server.url).new_page()
    sign_in(bobs, bob)
    bobs.goto("/evaluations/")
    expect(bobs.locator("#invitation-notice")).to_contain_text("invited to join 1 group")
    bobs.locator("#invitation-notice a").click()
    row = bobs.locator('#invitation-list li[data-invitation="vision-lab"]')
    expect(row).to_contain_text("alice")
    row.get_by_role("button", name="Accept").click()
    expect(bobs.get_by_role("heading", name="vision-lab")).to_be_visible()
    expect(bobs.locator("#invitation-notice")).to_have_count(0)
    # A member chooses whether the group's hosts run their jobs: off until they say so.
    expect(bobs.locator("#trust-state")).to_contain_text("only when you name one")
    bobs.get_by_role("button", name="Run my jobs on these hosts").click()
    expect(bobs.locator("#trust-state")).to_contain_text("run your jobs when placement picks")
    page.reload()
    expect(page.locator('#members tr[data-member="bob"]')).to_be_visible()
    assert bobs.goto(f"/evaluations/{run.pk}/").status == 404

    page.goto(f"/evaluations/{run.pk}/")
    page.select_option("#share-group", "vision-lab")
    page.get_by_role("button", name="Share", exact=True).click()
    expect(page.locator("#shared-groups")).to_contain_text("vision-lab")

    assert bobs.goto(f"/evaluations/{run.pk}/").status == 200
    expect(bobs.locator("#publish-form")).to_have_count(0)
    bobs.goto("/groups/vision-lab/")
    expect(bobs.locator("#shared-evaluations")).to_contain_text("digits-cnn")
    bobs.context.close()
