"""The admin page of channel sessions: which thread a person's chat on a channel goes to.

A list to answer "where did this Telegram chat's turns go?": the session's person, channel and
state, and a link to its thread read as a conversation. Sessions are opened and closed by agents over
the API (memoryapp.sessions.services); staff read them here and never edit them (a session goes with
its thread: a thread's delete or a person's erasure takes it).
"""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from governance.staff.adminlog import NamelessAdminLog
from governance.staff.lists import FullWidthList, cell_text, id_cell, moment, short_id
from memoryapp.admin.conversation import thread_url
from memoryapp.models import ChannelSession, Thread


@admin.register(ChannelSession)
class ChannelSessionAdmin(FullWidthList, NamelessAdminLog, admin.ModelAdmin):
    list_display = ("session_id", "agent_shown", "person", "channel", "status", "thread_link", "opened", "closed")
    list_display_links = ("session_id",)
    list_filter = ("status", "channel_type", "agent")
    list_select_related = ("agent", "thread")
    # Exact ids, not substrings: a person's id or a chat's id is looked up whole.
    search_fields = ("=user_id", "=channel_id", "=id", "=thread__external_id")
    show_full_result_count = False
    ordering = ("-created_at", "-id")
    fields = (
        "id",
        "agent",
        "user_id",
        "channel_type",
        "channel_id",
        "status",
        "thread_link",
        "created_at",
        "closed_at",
    )
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # agents open sessions over the API

    def has_change_permission(self, request: HttpRequest, obj: ChannelSession | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: ChannelSession | None = None) -> bool:
        return False  # a session goes with its thread (the thread's page deletes it, with its turns)

    @admin.display(description="session", ordering="id")
    def session_id(self, obj: ChannelSession) -> SafeString:
        return format_html('<span title="{}">{}</span>', obj.id, short_id(obj.id))

    @admin.display(description="agent", ordering="agent__slug")
    def agent_shown(self, obj: ChannelSession) -> SafeString:
        return cell_text(obj.agent.slug, 18)

    @admin.display(description="person", ordering="user_id")
    def person(self, obj: ChannelSession) -> SafeString:
        return cell_text(obj.user_id, 24)

    @admin.display(description="channel", ordering="channel_type")
    def channel(self, obj: ChannelSession) -> SafeString:
        return format_html("{} · {}", obj.channel_type, id_cell(obj.channel_id, 24))

    @admin.display(description="thread")
    def thread_link(self, obj: ChannelSession) -> SafeString:
        thread: Thread = obj.thread
        return format_html('<a href="{}">{}</a>', thread_url(thread.pk), id_cell(thread.external_id, 24))

    @admin.display(description="opened", ordering="created_at")
    def opened(self, obj: ChannelSession) -> SafeString:
        return moment(obj.created_at)

    @admin.display(description="closed", ordering="closed_at")
    def closed(self, obj: ChannelSession) -> SafeString:
        return moment(obj.closed_at)
