"""`manage.py migrate`'s executor (agentplatform/management/migration_executor.py) renders
each operation's models for that operation alone: the SQL it makes is the SQL Django's own
executor makes, compared in SQL-collecting mode (nothing is executed) on the newest
migrations of the history, and on the changes for which the schema editor reads the models
pointing at the one altered."""

from __future__ import annotations

import pytest
from django.db import connection, migrations, models
from django.db.migrations.executor import MigrationExecutor as DjangosExecutor
from django.db.migrations.state import ModelState, ProjectState

from agentplatform.management.migration_executor import MigrationExecutor

pytestmark = pytest.mark.django_db

NEWEST = 10  # migrations, in the order a fresh database applies them


def collected_sql(
    migration_list: list[migrations.Migration], state: ProjectState, *, ours: bool
) -> list[str]:
    """The SQL of `migration_list` applied from `state` by our executor or by Django's
    Migration.apply (what its executor calls)."""
    apply = MigrationExecutor(connection).apply_operations if ours else None
    with connection.schema_editor(collect_sql=True, atomic=False) as editor:
        for migration in migration_list:
            if apply is None:
                state = migration.apply(state, editor, collect_sql=True)
            else:
                state = apply(migration, state, editor, collect_sql=True)
    return editor.collected_sql


def test_the_newest_migrations_make_the_sql_djangos_executor_makes():
    executor = DjangosExecutor(connection)
    graph = executor.loader.graph
    plan = [m for m, _ in executor.migration_plan(graph.leaf_nodes(), clean_start=True)]

    def state_before_the_newest() -> ProjectState:
        state = ProjectState(real_apps=executor.loader.unmigrated_apps)
        for migration in plan[:-NEWEST]:
            state = migration.mutate_state(state, preserve=False)
        return state

    newest = plan[-NEWEST:]
    expected = collected_sql(newest, state_before_the_newest(), ours=False)
    assert any("CREATE TABLE" in line for line in expected)  # (the window does something)
    assert collected_sql(newest, state_before_the_newest(), ours=True) == expected


def shop() -> ProjectState:
    """Two models, the second pointing at the first by its key and by a unique field."""
    state = ProjectState()
    auto = models.AutoField(primary_key=True)
    fields = [("id", auto), ("code", models.CharField(max_length=10, unique=True)),
              ("name", models.CharField(max_length=10))]  # fmt: skip
    state.add_model(ModelState("shop", "Parent", fields))
    fields = [("id", auto.clone()),
              ("parent", models.ForeignKey("shop.Parent", models.CASCADE)),
              ("by_code", models.ForeignKey("shop.Parent", models.CASCADE, to_field="code",
                                            related_name="+"))]  # fmt: skip
    state.add_model(ModelState("shop", "Child", fields))
    return state


def test_every_kind_of_change_makes_the_sql_djangos_executor_makes():
    """Each kind the executor renders alone, and the changes it must not: a primary key's or
    a unique field's new type reaches the foreign keys pointing at it."""
    note = models.Index(fields=["note"], name="child_note")
    named = models.UniqueConstraint(fields=["note"], name="child_note_once")
    first, second = migrations.Migration("0002", "shop"), migrations.Migration("0003", "shop")
    first.operations = [
        migrations.AlterField("parent", "id", models.BigAutoField(primary_key=True)),
        migrations.AlterField("parent", "code", models.CharField(max_length=20, unique=True)),
        migrations.AlterField("parent", "name", models.CharField(max_length=30)),
        migrations.AlterField(
            "child", "parent", models.ForeignKey("shop.Parent", models.CASCADE, null=True)
        ),
        migrations.AddField("child", "note", models.TextField(default="")),
        migrations.CreateModel(
            "Toy",
            [
                ("id", models.AutoField(primary_key=True)),
                ("child", models.ForeignKey("shop.Child", models.CASCADE)),
                ("label", models.CharField(max_length=10)),
            ],
        ),
        migrations.AddIndex("child", note),
        migrations.AddConstraint("child", named),
        migrations.AlterModelOptions("child", {"ordering": ["note"]}),
    ]
    second.operations = [
        migrations.RemoveIndex("child", "child_note"),
        migrations.AlterConstraint("child", "child_note_once", named),
        migrations.RemoveConstraint("child", "child_note_once"),
        migrations.AlterUniqueTogether("toy", {("child", "label")}),
    ]
    expected = collected_sql([first, second], shop(), ours=False)
    assert any('ALTER TABLE "shop_child"' in line and "bigint" in line for line in expected)
    assert collected_sql([first, second], shop(), ours=True) == expected
