from django.contrib import admin

from runbooks.models import RunbookNote, RunbookRevision


class ReadOnlyAdmin(admin.ModelAdmin):
    """Notes are edited in the console, which keeps their history; the admin only shows them."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(RunbookNote)
class RunbookNoteAdmin(ReadOnlyAdmin):
    list_display = ["title", "slug", "scope", "host", "served_model", "version", "updated_at"]
    list_filter = ["scope", "from_library"]
    search_fields = ["title", "slug", "body"]


@admin.register(RunbookRevision)
class RunbookRevisionAdmin(ReadOnlyAdmin):
    list_display = ["note", "version", "edited_by_name", "edited_at", "summary"]
    search_fields = ["note__title", "edited_by_name", "summary"]
