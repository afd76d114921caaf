from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('traces', '0002_finished_traces'),
    ]

    operations = [
        migrations.AddField(
            model_name='spanaggregate',
            name='parent',
            field=models.CharField(blank=True, default='', max_length=1024),
        ),
        migrations.AddField(
            model_name='spanaggregate',
            name='value_p50',
            field=models.FloatField(blank=True, null=True),
        ),
    ]


def _recompute(apps, schema_editor):  # noqa: ANN001, ANN202 - Django's migration signature
    """Aggregates stored before this migration merge the spans of one name under different
    parents and hold no counter values: mark them stale, so that the next read or the
    finishing sweep computes them again."""
    apps.get_model("traces", "Trace").objects.update(aggregated_chunks=0)


Migration.operations.append(migrations.RunPython(_recompute, migrations.RunPython.noop))
