# The trace models (Trace, SpanAggregate, SpanExport) moved to the traces app
# (traces/migrations/0001_initial.py): they leave this app's migration state only; their
# tables stay as they are, rows included. Their content types follow them, so that the
# permissions (and admin log entries) that point at them stay attached.

from django.db import migrations

MODELS = ('trace', 'spanaggregate', 'spanexport')


def _relabel(apps, schema_editor, old, new):
    """Give the content types of `old` to `new`. A content type that `new` has already (made
    by a `post_migrate` run in between: after `migrate traces` alone, or after migrating back)
    is younger and holds only the permissions made with it: it gives way to the old one."""
    ContentType = apps.get_model('contenttypes', 'ContentType')
    Permission = apps.get_model('auth', 'Permission')
    db = schema_editor.connection.alias
    for model in MODELS:
        kept = ContentType.objects.using(db).filter(app_label=old, model=model).first()
        if kept is None:
            continue
        young = ContentType.objects.using(db).filter(app_label=new, model=model).first()
        if young is not None:
            Permission.objects.using(db).filter(content_type=young).delete()
            young.delete()
        kept.app_label = new
        kept.save(update_fields=['app_label'])


def forwards(apps, schema_editor):
    _relabel(apps, schema_editor, 'evaluations', 'traces')


def backwards(apps, schema_editor):
    _relabel(apps, schema_editor, 'traces', 'evaluations')


class Migration(migrations.Migration):

    dependencies = [
        ('auth', '0001_initial'),
        ('contenttypes', '0002_remove_content_type_name'),
        ('evaluations', '0006_span_exports'),
        ('traces', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name='SpanExport'),
                migrations.DeleteModel(name='SpanAggregate'),
                migrations.DeleteModel(name='Trace'),
            ],
            database_operations=[],
        ),
        migrations.RunPython(forwards, backwards),
    ]
