from __future__ import annotations

from django.db import models

from memoryapp.models.agents import Agent
from memoryapp.models.choices import AutoCompactionStrategy


class CompactionSettings(models.Model):
    """An agent's automatic compaction (004 "Sessions and Compaction", 000 `shouldCompact`).

    After appends, a thread whose active branch (as the model sees it) holds
    `context_window * trigger_ratio` tokens or more (or `message_threshold` entries, when set) gets a
    compaction job with `strategy`. A thread may override any of these in `Thread.compaction` (memoryapp.compaction.auto). No row: off.
    """

    agent = models.OneToOneField(Agent, primary_key=True, on_delete=models.CASCADE, related_name="compaction_settings")
    enabled = models.BooleanField(default=False)
    # The window of the model the agent sends its context to, in tokens (000 ModelCard.contextWindow).
    context_window = models.PositiveIntegerField(default=128_000)
    # The share of the window at which a thread is compacted (000 CompactionPolicy.triggerRatio).
    trigger_ratio = models.FloatField(default=0.8)
    strategy = models.CharField(
        max_length=40, choices=AutoCompactionStrategy.choices, default=AutoCompactionStrategy.SUMMARIZE
    )
    # Trailing entries kept verbatim (000 keepRecent; 003 preserveRecentTurns).
    keep_recent = models.PositiveIntegerField(default=8)
    # 003 summarizerModel: the model the summarizer asks, on the configured provider ("" = LLM_MODEL).
    summarizer_model = models.CharField(max_length=200, blank=True, default="")
    # 003 templateName: the named summary prompt ("" = default; memoryapp.prompts.SUMMARY_TEMPLATES).
    template_name = models.CharField(max_length=64, blank=True, default="")
    # 003 preStep: also compact before the agent's next model step, in its context request.
    pre_step = models.BooleanField(default=False)
    # 004 messageThreshold: also compact once the history holds this many entries, whichever of
    # the two comes first (null: by tokens only).
    message_threshold = models.PositiveIntegerField(null=True, blank=True, default=None)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "automatic compaction"
        verbose_name_plural = "automatic compaction"

    def __str__(self) -> str:
        # By the agent's slug (its page's title and breadcrumb); the admin reads the agent with it.
        return f"automatic compaction of {self.agent.slug}"
