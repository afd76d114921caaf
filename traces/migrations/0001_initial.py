# The trace models moved here from the evaluations app (evaluations 0002, 0006): this migration
# creates them in the migration state only. Their tables keep the names they had there
# (`db_table`), so the database does not change and no row moves;
# evaluations/0007_move_traces.py then removes them from the evaluations app's state.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('evaluations', '0006_span_exports'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='Trace',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('trace_id', models.CharField(max_length=32, unique=True)),
                        ('span_count', models.PositiveBigIntegerField(default=0)),
                        ('chunk_count', models.PositiveIntegerField(default=0)),
                        ('start_ns', models.BigIntegerField(blank=True, null=True)),
                        ('end_ns', models.BigIntegerField(blank=True, null=True)),
                        ('aggregated_chunks', models.PositiveIntegerField(default=0)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('updated_at', models.DateTimeField(auto_now=True)),
                        ('evaluation', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='traces', to='evaluations.evaluation')),
                        ('owner', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='traces', to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'db_table': 'evaluations_trace',
                        'ordering': ['-created_at', 'id'],
                    },
                ),
                migrations.CreateModel(
                    name='SpanAggregate',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('level', models.CharField(blank=True, default='', max_length=32)),
                        ('name', models.CharField(max_length=255)),
                        ('op_type', models.CharField(blank=True, default='', max_length=128)),
                        ('layer_index', models.BigIntegerField(blank=True, null=True)),
                        ('count', models.PositiveBigIntegerField()),
                        ('total_ns', models.BigIntegerField()),
                        ('mean_ns', models.FloatField()),
                        ('p50_ns', models.BigIntegerField()),
                        ('p99_ns', models.BigIntegerField()),
                        ('min_ns', models.BigIntegerField()),
                        ('max_ns', models.BigIntegerField()),
                        ('trace', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='aggregates', to='traces.trace')),
                    ],
                    options={
                        'db_table': 'evaluations_spanaggregate',
                        'ordering': ['trace', '-total_ns', 'id'],
                    },
                ),
                migrations.CreateModel(
                    name='SpanExport',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('attempt', models.PositiveIntegerField(default=0)),
                        ('key', models.CharField(blank=True, default='', max_length=32)),
                        ('spans', models.PositiveIntegerField()),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('evaluation', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='span_exports', to='evaluations.evaluation')),
                        ('trace', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='exports', to='traces.trace')),
                    ],
                    options={
                        'db_table': 'evaluations_spanexport',
                        'ordering': ['created_at', 'id'],
                        'indexes': [models.Index(fields=['evaluation', 'attempt'], name='evaluations_evaluat_6831d5_idx')],
                        'constraints': [models.UniqueConstraint(condition=models.Q(('key', ''), _negated=True), fields=('trace', 'key'), name='span_export_once_per_trace')],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
