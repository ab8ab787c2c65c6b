"""Pure decisions of host operations: no Django, no database, fast enough to run per alert."""
