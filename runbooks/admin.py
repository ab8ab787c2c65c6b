from django.contrib import admin

from console.core.admin import ReadOnlyAdmin
from runbooks.models import RunbookNote, RunbookRevision


@admin.register(RunbookNote)
class RunbookNoteAdmin(ReadOnlyAdmin):
    list_display = ["title", "slug", "scope", "host", "served_model", "version", "updated_at"]
    list_filter = ["scope", "from_library"]
    search_fields = ["title", "slug", "body"]


@admin.register(RunbookRevision)
class RunbookRevisionAdmin(ReadOnlyAdmin):
    list_display = ["note", "version", "edited_by_name", "edited_at", "summary"]
    search_fields = ["note__title", "edited_by_name", "summary"]
