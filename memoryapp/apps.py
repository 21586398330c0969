from django.apps import AppConfig


class MemoryAppConfig(AppConfig):
    name = "memoryapp"
    verbose_name = "Memory"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported here: the app registry must be ready before modules that import models load.
        from governance.crypto.rotation import collisions_merge_with
        from governance.jobs.runs import job_finished_follow
        from memoryapp.agents.keycache import key_cache_connect
        from memoryapp.compaction.auto import auto_compaction_check_thread
        from memoryapp.extraction.schedule import extraction_schedule
        from memoryapp.graph.services import entity_collision_merge
        from memoryapp.items.facts import facts_by_meaning_provide
        from memoryapp.models import Entity, PersonIdentifier, SubjectMention
        from memoryapp.screening.identifiers import identifier_collision_drop
        from memoryapp.search.fact_meaning import facts_nearest
        from memoryapp.search.indexing import embedding_schedule
        from memoryapp.subjects.detect import job_result_recorded
        from memoryapp.subjects.texts import redaction_refresh_register
        from memoryapp.threads.hooks import entries_added_follow, entries_added_follow_thread, vectors_cleared_follow
        from memoryapp.threads.screened import entry_texts_refresh

        # What follows new entries, in this order: their vectors, then what extraction learns.
        # Threads name neither (they sit below both); this is where they are wired.
        entries_added_follow("embedding", lambda agent_id, thread_pk: embedding_schedule(agent_id=agent_id))
        entries_added_follow("extraction", lambda agent_id, thread_pk: extraction_schedule(thread_pk=thread_pk))

        # Then automatic compaction: a thread past its trigger gets its compaction job. It is given
        # the thread as the write left it (its running token count): no query per append.
        entries_added_follow_thread("compaction", lambda thread: auto_compaction_check_thread(thread=thread))

        # A change of an agent or a key makes every process's cached key lookups stale.
        key_cache_connect()

        # Entries whose vectors a cascade cleared are embedded again from what remains.
        vectors_cleared_follow("embedding", lambda agent_id: embedding_schedule(agent_id=agent_id))

        # Facts found by meaning (002 Memory.semantic): search sits above items, which ask it here.
        facts_by_meaning_provide(facts_nearest)

        # A job's result naming a registered person is in the subject index as the run finishes.
        job_finished_follow(job_result_recorded)

        # A write naming a person being erased stores the placeholder: an entry's text and hash follow.
        redaction_refresh_register(SubjectMention.Table.ENTRY, entry_texts_refresh)

        # What a rotation with new keys folds when its new hashes give two rows one unique name.
        collisions_merge_with(Entity, entity_collision_merge)
        collisions_merge_with(PersonIdentifier, identifier_collision_drop)
