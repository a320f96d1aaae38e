"""What `serve`'s fork server imports before it forks the processes: the app, once
(`serving`'s module doc). A failure here is not said: each process then imports the
app itself, and the one that fails says why.

The collector is off while it imports (an import makes objects, not garbage: its
passes cost about a tenth of the import), and what was imported is frozen, so that
no child's collection walks it, nor writes to the pages it shares with its siblings.
"""

import contextlib
import gc

gc.disable()
with contextlib.suppress(Exception):
    import taskservice.api.app  # noqa: F401
gc.freeze()
gc.enable()
