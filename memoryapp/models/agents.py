from __future__ import annotations

from django.db import models

from memoryapp.models.choices import Trust


class Agent(models.Model):
    """An API client. Every agent request is scoped to its agent."""

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200, blank=True)
    active = models.BooleanField(default=True)
    # Shadow mode: extraction writes every new item as `suggested` until a person reviews it.
    shadow_mode = models.BooleanField(default=True)
    # Playbook shadow mode: a fold of lessons writes /memories/playbook.next.md, which a reviewer
    # promotes, instead of the playbook every run reads.
    playbook_shadow_mode = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]
        # memoryapp.agents.services.TRUST_PERMISSION: held by no role group (a security decision).
        permissions = [
            ("set_agent_trust", "Can set how far an agent's writes are trusted (key max trust, shadow mode)")
        ]

    def __str__(self) -> str:
        return self.slug


class AgentKey(models.Model):
    """An API key of an agent, kept as a SHA-256 hash; only the prefix stays readable."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="keys")
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=16, unique=True)
    key_hash = models.CharField(max_length=64, unique=True)
    # The most trusted source the key may write items as (`model` by default: they arrive suggested).
    max_trust = models.CharField(max_length=10, choices=Trust.choices, default=Trust.MODEL)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.prefix}…"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None
