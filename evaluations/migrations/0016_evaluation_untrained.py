"""Evaluation.untrained: the model is marked not trained; existing evaluations take it from
their model manifest (`attributes.trained: false`)."""

from typing import Any

from django.db import migrations, models


def mark_untrained(apps: Any, schema_editor: Any) -> None:
    Evaluation = apps.get_model("evaluations", "Evaluation")
    Evaluation.objects.filter(model__content__attributes__trained=False).update(untrained=True)


class Migration(migrations.Migration):
    dependencies = [
        ("evaluations", "0015_result_image"),
    ]

    operations = [
        migrations.AddField(
            model_name="evaluation",
            name="untrained",
            field=models.BooleanField(default=False),
        ),
        migrations.RunPython(mark_untrained, migrations.RunPython.noop),
    ]
