"""Following tasks: the process's event hub, one task followed (a snapshot, then
its events), live output fanned out to streams."""
