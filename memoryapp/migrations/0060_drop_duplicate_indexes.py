"""Indexes that another index already serves, dropped (issue 26): each was one more B-tree to write
on every insert, and on every update that is not HOT (an entry's embedding, a thread's active leaf).

- A foreign key's one-column index where a composite index or unique constraint leads with the same
  column (`entry_thread_seq_uniq` for an entry's thread, `thread_agent_external_id_uniq` for a
  thread's agent, each scoped table's unique constraint for its agent, ...), or a second copy of one
  (`entry_parent_idx`, `evidence_entry_idx`).
- Django's `varchar_pattern_ops` copy of every indexed character column (`<index>_like`), which
  serves only `LIKE 'prefix%'`: no query matches an id, a slug or a key by prefix.
- Named indexes that are a prefix of a unique constraint (`subject_mention_person_idx`,
  `person_identifier_user_idx`).

The database side is written out rather than left to AlterField: Django would drop and re-add each
foreign key to change its index, re-validating the table under lock and losing the database-level
ON DELETE CASCADE of migrations 0019 and 0045. DROP INDEX CONCURRENTLY takes no lock that stops the
service's reads and writes; it runs outside a transaction, hence `atomic = False`."""

import django.db.models.deletion
from django.db import migrations, models

# name ON table (columns): as the indexes were, for the way back.
DROPPED = (
    "memoryapp_accesslog_agent_id_fab8e2af ON memoryapp_accesslog (agent_id)",
    "memoryapp_agent_slug_81003be9_like ON memoryapp_agent (slug varchar_pattern_ops)",
    "memoryapp_agentkey_key_hash_ebb283f0_like ON memoryapp_agentkey (key_hash varchar_pattern_ops)",
    "memoryapp_agentkey_prefix_548839a7_like ON memoryapp_agentkey (prefix varchar_pattern_ops)",
    "memoryapp_channelsession_agent_id_bc97170b ON memoryapp_channelsession (agent_id)",
    "memoryapp_channelsession_id_bdf6ef24_like ON memoryapp_channelsession (id varchar_pattern_ops)",
    "memoryapp_consolidationstate_agent_id_c0934ac3 ON memoryapp_consolidationstate (agent_id)",
    "memoryapp_entity_agent_id_f95ce5c5 ON memoryapp_entity (agent_id)",
    "memoryapp_entity_id_50f0c1fe_like ON memoryapp_entity (id varchar_pattern_ops)",
    "memoryapp_entry_id_fbf73c9c_like ON memoryapp_entry (id varchar_pattern_ops)",
    "memoryapp_entry_parent_id_77470422 ON memoryapp_entry (parent_id)",
    "memoryapp_entry_parent_id_77470422_like ON memoryapp_entry (parent_id varchar_pattern_ops)",
    "memoryapp_entry_thread_id_e05dba5f ON memoryapp_entry (thread_id)",
    "memoryapp_evidence_entry_id_14dd266a ON memoryapp_evidence (entry_id)",
    "memoryapp_evidence_entry_id_14dd266a_like ON memoryapp_evidence (entry_id varchar_pattern_ops)",
    "memoryapp_evidence_file_version_id_7c9809fc_like ON memoryapp_evidence (file_version_id varchar_pattern_ops)",
    "memoryapp_evidence_item_id_0cf8bd0b_like ON memoryapp_evidence (item_id varchar_pattern_ops)",
    "memoryapp_itemreview_item_id_bebdd7cc ON memoryapp_itemreview (item_id)",
    "memoryapp_itemreview_item_id_bebdd7cc_like ON memoryapp_itemreview (item_id varchar_pattern_ops)",
    "memoryapp_knowledgechunk_agent_id_df102ae4 ON memoryapp_knowledgechunk (agent_id)",
    "memoryapp_knowledgechunk_document_id_68546033 ON memoryapp_knowledgechunk (document_id)",
    "memoryapp_knowledgechunk_document_id_68546033_like ON memoryapp_knowledgechunk (document_id varchar_pattern_ops)",
    "memoryapp_knowledgedocument_agent_id_b1786ebe ON memoryapp_knowledgedocument (agent_id)",
    "memoryapp_knowledgedocument_id_39d1c01b_like ON memoryapp_knowledgedocument (id varchar_pattern_ops)",
    "memoryapp_memoryfileversion_agent_id_b9a31413 ON memoryapp_memoryfileversion (agent_id)",
    "memoryapp_memoryfileversion_id_141d443a_like ON memoryapp_memoryfileversion (id varchar_pattern_ops)",
    "memoryapp_memoryfileversion_place_id_ceac3392_like ON memoryapp_memoryfileversion (place_id varchar_pattern_ops)",
    "memoryapp_memoryfileversion_previous_id_160222bf_like ON memoryapp_memoryfileversion (previous_id varchar_pattern_ops)",
    "memoryapp_memoryitem_agent_id_08fa2f10 ON memoryapp_memoryitem (agent_id)",
    "memoryapp_memoryitem_entity_id_3b5dd2fb_like ON memoryapp_memoryitem (entity_id varchar_pattern_ops)",
    "memoryapp_memoryitem_id_3afd5b38_like ON memoryapp_memoryitem (id varchar_pattern_ops)",
    "memoryapp_personidentifier_agent_id_3939ba57 ON memoryapp_personidentifier (agent_id)",
    "memoryapp_relation_agent_id_8e225404 ON memoryapp_relation (agent_id)",
    "memoryapp_relation_id_25294564_like ON memoryapp_relation (id varchar_pattern_ops)",
    "memoryapp_relation_object_id_ef74a19e_like ON memoryapp_relation (object_id varchar_pattern_ops)",
    "memoryapp_relation_subject_id_3f494f07_like ON memoryapp_relation (subject_id varchar_pattern_ops)",
    "memoryapp_relationevidence_entry_id_049afd39 ON memoryapp_relationevidence (entry_id)",
    "memoryapp_relationevidence_entry_id_049afd39_like ON memoryapp_relationevidence (entry_id varchar_pattern_ops)",
    "memoryapp_relationevidence_relation_id_b769f806 ON memoryapp_relationevidence (relation_id)",
    "memoryapp_relationevidence_relation_id_b769f806_like ON memoryapp_relationevidence (relation_id varchar_pattern_ops)",
    "memoryapp_subjectmention_agent_id_5a2a7876 ON memoryapp_subjectmention (agent_id)",
    "memoryapp_thread_active_leaf_id_54a68b31_like ON memoryapp_thread (active_leaf_id varchar_pattern_ops)",
    "memoryapp_thread_agent_id_b82bce09 ON memoryapp_thread (agent_id)",
    "memoryapp_threadrun_id_0c67807a_like ON memoryapp_threadrun (id varchar_pattern_ops)",
    "memoryapp_threadrun_thread_id_e5996575 ON memoryapp_threadrun (thread_id)",
    "memoryapp_webhookdelivery_webhook_id_628a6f17 ON memoryapp_webhookdelivery (webhook_id)",
    'subject_mention_person_idx ON memoryapp_subjectmention (agent_id, user_id, "table")',
    "person_identifier_user_idx ON memoryapp_personidentifier (agent_id, user_id)",
)


def _drop(definition: str) -> str:
    return f"DROP INDEX CONCURRENTLY IF EXISTS {definition.split()[0]}"


def _create(definition: str) -> str:
    return f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {definition}"


class Migration(migrations.Migration):
    atomic = False  # DROP INDEX CONCURRENTLY runs outside a transaction (the module's docstring)

    dependencies = [
        ("memoryapp", "0059_entry_thread_vectors"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(_drop(d), _create(d)) for d in DROPPED],
            state_operations=[
                migrations.RemoveIndex(
                    model_name="personidentifier",
                    name="person_identifier_user_idx",
                ),
                migrations.RemoveIndex(
                    model_name="subjectmention",
                    name="subject_mention_person_idx",
                ),
                migrations.AlterField(
                    model_name="accesslog",
                    name="agent",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="memoryapp.agent",
                    ),
                ),
                migrations.AlterField(
                    model_name="channelsession",
                    name="agent",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="memoryapp.agent",
                    ),
                ),
                migrations.AlterField(
                    model_name="consolidationstate",
                    name="agent",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="memoryapp.agent",
                    ),
                ),
                migrations.AlterField(
                    model_name="entity",
                    name="agent",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="memoryapp.agent",
                    ),
                ),
                migrations.AlterField(
                    model_name="entry",
                    name="parent",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="children",
                        to="memoryapp.entry",
                    ),
                ),
                migrations.AlterField(
                    model_name="entry",
                    name="thread",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="entries",
                        to="memoryapp.thread",
                    ),
                ),
                migrations.AlterField(
                    model_name="evidence",
                    name="entry",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="evidence",
                        to="memoryapp.entry",
                    ),
                ),
                migrations.AlterField(
                    model_name="itemreview",
                    name="item",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="reviews",
                        to="memoryapp.memoryitem",
                    ),
                ),
                migrations.AlterField(
                    model_name="knowledgechunk",
                    name="agent",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="memoryapp.agent",
                    ),
                ),
                migrations.AlterField(
                    model_name="knowledgechunk",
                    name="document",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="chunks",
                        to="memoryapp.knowledgedocument",
                    ),
                ),
                migrations.AlterField(
                    model_name="knowledgedocument",
                    name="agent",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="memoryapp.agent",
                    ),
                ),
                migrations.AlterField(
                    model_name="memoryfileversion",
                    name="agent",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="memoryapp.agent",
                    ),
                ),
                migrations.AlterField(
                    model_name="memoryitem",
                    name="agent",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="memoryapp.agent",
                    ),
                ),
                migrations.AlterField(
                    model_name="personidentifier",
                    name="agent",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="memoryapp.agent",
                    ),
                ),
                migrations.AlterField(
                    model_name="relation",
                    name="agent",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="memoryapp.agent",
                    ),
                ),
                migrations.AlterField(
                    model_name="relationevidence",
                    name="entry",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="relation_evidence",
                        to="memoryapp.entry",
                    ),
                ),
                migrations.AlterField(
                    model_name="relationevidence",
                    name="relation",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="evidence",
                        to="memoryapp.relation",
                    ),
                ),
                migrations.AlterField(
                    model_name="subjectmention",
                    name="agent",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="memoryapp.agent",
                    ),
                ),
                migrations.AlterField(
                    model_name="thread",
                    name="agent",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="threads",
                        to="memoryapp.agent",
                    ),
                ),
                migrations.AlterField(
                    model_name="threadrun",
                    name="thread",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="runs",
                        to="memoryapp.thread",
                    ),
                ),
                migrations.AlterField(
                    model_name="webhookdelivery",
                    name="webhook",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="deliveries",
                        to="memoryapp.webhook",
                    ),
                ),
            ],
        ),
    ]
